"""Saving and loading: PyTorch's torch.save / torch.load, without pickle (step 52).

    save(model.state_dict(), "net.pt")
    save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss": 0.25}, "ckpt.pt")
    checkpoint = load("ckpt.pt", weights_only=True)

`save` keeps a Variable (tensor) or a Parameter, a NumPy array or scalar, an int, float, bool, str or None, a
dtype (`tinypytorch.float32`: it comes back as itself, as torch.load gives back a torch.dtype), and dicts (str or
int keys), OrderedDicts, lists and tuples of these, nested: a model's or an optimizer's `state_dict()`, a training
checkpoint. `load` gives the same structure back: the same container types and key
order, arrays of the same dtypes and shapes; Variables and Parameters as leaves that require grad as they did when
saved (torch's rule; no gradient, no graph), NumPy arrays as NumPy arrays, a NumPy scalar as a 0-d array of its
dtype (as torch.load gives back a 0-d tensor with its dtype; its weights-only loader refuses NumPy scalars
themselves). An object found twice in one call (`[x, x]`) comes back as one object, as from torch.load. Any depth
of nesting is kept (torch.load stops near 500 levels).

The file is a NumPy .npz archive laid out like PyTorch's zip file: each array an entry, `data/0`, `data/1`, ...,
and the entry `structure`, JSON text that describes the rest and names those entries, where PyTorch's file holds a
pickle. Nothing in it is pickled: the arrays are read with `allow_pickle=False` and the structure with `json`, so
loading a file never runs code from it.

Refused with a TypeError that names what is supported: a Module or an optimizer (save its `state_dict()`, as
PyTorch's recipe recommends), a set, a function or any other object, a dict key that is not a str or an int, an
array of anything but numbers and booleans. A container that holds itself (which pickle keeps) is refused with
a ValueError.
"""
import collections
import io
import json
import os
import zipfile

import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch.core import Variable
from tinypytorch.layers import Parameter

FORMAT, VERSION = "tinypytorch.save", 1
STRUCTURE = "structure"  # the JSON entry; the arrays are "data/0", "data/1", ...: no name a caller picks
CONTAINERS = {dict: "dict", collections.OrderedDict: "OrderedDict", list: "list", tuple: "tuple"}
NUMBERS = (bool, int, float, str)  # exact types: a subclass (an IntEnum, np.float64) would not come back as itself
SUPPORTED = ("Variables (tensors), NumPy arrays and scalars, int, float, bool, str, None, dtypes, and dicts (str "
             "or int keys), lists and tuples of these")


def save(obj, f):  # step 52
    """Write `obj` (a tensor, or a structure of them: see the module's docstring) to `f`, a path (written under
    exactly that name: np.savez alone would add ".npz") or a binary file object. Nothing is written if `obj` holds
    something that cannot be saved."""
    is_path = isinstance(f, (str, bytes, os.PathLike))
    if not is_path:
        _check_file("save", f, "write", "wb")
    writer = _Writer()
    writer.describe(obj)  # the root is the last node
    entries = {f"data/{i}": array for i, array in enumerate(writer.arrays)}
    structure = {"format": FORMAT, "version": VERSION, "nodes": writer.nodes}
    entries[STRUCTURE] = np.frombuffer(json.dumps(structure).encode(), dtype=np.uint8)
    if is_path:
        with open(f, "wb") as file:
            np.savez(file, allow_pickle=False, **entries)
    else:
        np.savez(f, allow_pickle=False, **entries)


def load(f, map_location=None, *, weights_only=True, mmap=None):  # step 52
    """Read what `save` wrote to `f` (a path or a binary file object).

    map_location: None puts each array back on the device it was saved from; "cpu", "cuda", "cuda:1" or a
    `tinypytorch.device` puts them all there (PyTorch's dict and function forms are not supported).
    weights_only: True or False give the same: the file never holds pickled objects, so there is nothing that an
    unrestricted load could run.
    mmap: None or False; NumPy cannot memory-map the arrays inside an .npz archive.
    """
    target = _target_device(map_location)
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"load: weights_only must be a bool, got {type(weights_only).__name__}")
    if mmap:
        raise ValueError("load: mmap=True is not supported: NumPy cannot memory-map the arrays inside an .npz "
                         "archive; leave mmap unset")
    if isinstance(f, (str, bytes, os.PathLike)):
        with open(f, "rb") as file:
            return _load(file, repr(os.fsdecode(f)), target)
    _check_file("load", f, "read", "rb")
    return _load(f, "the file", target)


# ----- writing: the structure as a JSON list of nodes, the arrays apart ----------------------------------------------

class _Writer:
    """Lists the nodes of a structure children first, without recursion (so any depth): a primitive is its JSON
    value; a container {"type", "items"} names its items by their indexes; a tensor or an array
    {"type", "data", "device"(, "requires_grad")} names its entry. An object met twice is one node, as pickle's
    memo makes it one object."""

    def __init__(self):
        self.nodes, self.arrays, self.index = [], [], {}  # index: id of an object met -> its node's index

    def describe(self, root):
        work, done = [("enter", root, None)], []  # done: the node indexes of finished children, in order
        while work:
            step, obj, where = work.pop()
            if step == "exit":
                items = done[len(done) - len(obj):]
                del done[len(done) - len(obj):]
                done.append(self.add(obj, {"type": CONTAINERS[type(obj)], "items": self.pairs(obj, items)}))
            elif id(obj) in self.index:
                if self.index[id(obj)] is None:
                    raise ValueError(f"save: {_path(where)} is a container that holds itself; the file describes "
                                     "trees, not cycles")
                done.append(self.index[id(obj)])
            elif type(obj) in CONTAINERS:
                self.index[id(obj)] = None  # met, not finished: meeting it again inside itself is a cycle
                work.append(("exit", obj, where))
                work.extend(("enter", value, (where, key)) for key, value in reversed(self.children(obj, where)))
            else:
                done.append(self.leaf(obj, where))
        return done[0]

    def add(self, obj, node):
        self.nodes.append(node)
        if obj is not None:
            self.index[id(obj)] = len(self.nodes) - 1
        return len(self.nodes) - 1

    @staticmethod
    def children(obj, where):
        if not isinstance(obj, dict):
            return list(enumerate(obj))
        for key in obj:
            if type(key) not in (str, int):  # JSON keeps these two apart; a bool or a tuple it could not give back
                raise TypeError(f"save: the keys of {_path(where)} must be str or int, got {type(key).__name__} "
                                f"({key!r})")
        return list(obj.items())

    @staticmethod
    def pairs(obj, items):
        return [[key, item] for key, item in zip(obj, items)] if isinstance(obj, dict) else items

    def leaf(self, obj, where):
        if obj is None or type(obj) in NUMBERS:
            return self.add(None, obj)
        if isinstance(obj, np.generic):  # not remembered: np.True_ is one object however often it is used
            return self.add(None, self.array_node(np.asarray(obj), where))
        if type(obj) in (Variable, Parameter, *cuda.array_types):  # a subclass (a masked array) would lose its kind
            return self.add(obj, self.array_node(obj, where))
        if type(obj) is dtypes.dtype:  # by name: one object per dtype, found again when loaded
            return self.add(None, {"type": "dtype", "name": obj.dtype.name})
        raise TypeError(_unsupported(obj, where))

    def array_node(self, obj, where):
        data = obj.data if isinstance(obj, Variable) else obj
        if data is None:
            raise ValueError(f"save: {_path(where)} is a Variable without data")
        if data.dtype.kind not in "biufc":  # anything else would need pickle (objects) or has no tensor dtype
            raise TypeError(f"save: {_path(where)} is an array of dtype {data.dtype}; arrays of numbers and "
                            "booleans are saved")
        kind = type(obj).__name__ if isinstance(obj, Variable) else "ndarray"  # NumPy's or CuPy's
        node = {"type": kind, "data": len(self.arrays), "device": str(cuda.device_of(data))}
        if isinstance(obj, Variable):
            node["requires_grad"] = obj.requires_grad
        self.arrays.append(cuda.as_numpy(data))
        return node


def _path(where):
    """`where`, a chain of (parent, key) pairs from the top, as a path: obj['model'][0]."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(f"[{key!r}]")
    return "obj" + "".join(reversed(keys))


def _unsupported(obj, where):
    kind, where = type(obj).__name__, _path(where)
    if callable(getattr(obj, "state_dict", None)):  # a Module or an optimizer: PyTorch's recipe saves the state
        return (f"save: {where} is of type {kind}; save its state_dict() instead, and load that into a new {kind} "
                "with load_state_dict()")
    return f"save: {where} is of type {kind}, which cannot be saved; supported are {SUPPORTED}"


def _check_file(op, f, method, mode):
    if isinstance(f, io.TextIOBase) or not callable(getattr(f, method, None)):
        raise TypeError(f"{op}: f must be a path or a file object opened in binary mode ('{mode}'), "
                        f"got {type(f).__name__}")


# ----- reading: refuse what save did not write, then rebuild ---------------------------------------------------

def _target_device(map_location):
    """None (each array where it was saved), or the device every array goes to."""
    if map_location is None:
        return None
    if isinstance(map_location, (str, cuda.device)):
        try:
            return cuda.device(map_location)
        except RuntimeError:
            pass
    shown = repr(map_location) if isinstance(map_location, str) else f"a {type(map_location).__name__}"
    raise ValueError(f"load: map_location must be None, 'cpu', 'cuda', 'cuda:<index>' or a tinypytorch.device, "
                     f"got {shown}")


def _load(file, name, target):
    with _archive(file, name) as archive:
        reader = _Reader(archive, name, target)
        structure = reader.structure()
        try:
            return reader.build(structure["nodes"])
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise RuntimeError(f"load: {name} is damaged: its structure does not match its arrays ({error!r})") \
                from error


def _archive(file, name):
    """`file` opened as an .npz archive, or a RuntimeError that says what the file is instead."""
    start = file.tell()
    magic = file.read(6)
    file.seek(start)
    if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # a zip's first entry, or an empty zip
        raise RuntimeError(f"load: {name} is {_kind_of(magic)}, not a file that tinypytorch.save wrote")
    try:
        return np.load(file, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise RuntimeError(f"load: {name} is a damaged zip archive ({error})") from error


def _kind_of(magic):
    if not magic:
        return "empty"
    if magic.startswith(b"\x93NUMPY"):
        return "a NumPy .npy file (one array, for numpy.load)"
    if magic.startswith(b"\x80"):
        return "pickled data (torch.save's legacy format, or pickle.dump), which load never unpickles"
    return "neither a zip archive nor a NumPy file"  # text, or a zip damaged at its start


class _Reader:
    """Rebuilds the objects that a structure describes, from a file that save wrote, or refuses the file."""

    def __init__(self, archive, name, target):
        self.archive, self.name, self.target = archive, name, target

    def structure(self):
        names = self.archive.files
        if STRUCTURE not in names:
            if any(n.endswith("data.pkl") for n in names):
                raise RuntimeError(f"load: {self.name} was written by torch.save (a zip archive around a pickle), "
                                   "which load never unpickles; read it with torch.load and hand the tensors over "
                                   "with tinypytorch.from_numpy")
            raise RuntimeError(f"load: {self.name} is a zip archive without the entry {STRUCTURE!r}, not a file "
                               "that tinypytorch.save wrote")
        raw = self.entry(STRUCTURE)
        try:
            structure = json.loads(raw.tobytes().decode()) if raw.dtype == np.uint8 and raw.ndim == 1 else None
        except ValueError:  # not UTF-8, or not JSON
            structure = None
        if not isinstance(structure, dict) or structure.get("format") != FORMAT:
            raise RuntimeError(f"load: the entry {STRUCTURE!r} of {self.name} is not a structure that "
                               "tinypytorch.save wrote")
        if structure.get("version") != VERSION:
            raise RuntimeError(f"load: {self.name} has version {structure.get('version')!r} of the format; this "
                               f"tinypytorch reads version {VERSION}")
        return structure

    def entry(self, key):
        try:
            return self.archive[key]
        except ValueError as error:  # pickled objects (allow_pickle=False refuses them) or a broken header
            raise RuntimeError(f"load: the entry {key!r} of {self.name} cannot be read without unpickling "
                               f"({error})") from error

    def build(self, nodes):
        """The objects of `nodes` in order, each container of items built before it; the last is the root."""
        if not isinstance(nodes, list) or not nodes:
            raise ValueError("no nodes")
        built = []
        for node in nodes:
            built.append(node if node is None or type(node) in NUMBERS else self.node(node, built))
        return built[-1]

    def node(self, node, built):
        kind = node["type"]
        if kind in ("Variable", "Parameter", "ndarray"):
            return self.leaf(node)
        if kind == "dtype":
            return _dtype(node["name"])
        items = node["items"]
        if kind in ("dict", "OrderedDict"):
            pairs = ((key, _earlier(built, item)) for key, item in items)
            return dict(pairs) if kind == "dict" else collections.OrderedDict(pairs)
        if kind in ("list", "tuple"):
            values = (_earlier(built, item) for item in items)
            return list(values) if kind == "list" else tuple(values)
        raise ValueError(f"unknown type {kind!r}")

    def leaf(self, node):
        array = self.placed(self.entry(f"data/{node['data']}"), self.target or cuda.device(node["device"]))
        if node["type"] == "ndarray":
            return array
        return (Variable if node["type"] == "Variable" else Parameter)(array, requires_grad=node["requires_grad"])

    def placed(self, array, where):
        if where.type == "cuda" and not cuda.is_available():
            raise RuntimeError(f"load: cannot place the arrays of {self.name} on {where}: {cuda.why_unavailable()}; "
                               "on a machine without a GPU pass map_location='cpu'")
        return cuda.to_device(array, where, op="load")


def _dtype(name):
    """The dtype object a file names; only the names of dtypes a tensor holds (no NumPy dtype from its text)."""
    found = next((d for d in dtypes.AS_TORCH.values() if d.dtype.name == name), None)
    if found is None:
        raise ValueError(f"unknown dtype {name!r}")
    return found


def _earlier(built, index):
    if type(index) is not int or not 0 <= index < len(built):  # items come before their container
        raise ValueError(f"item {index!r} is not an earlier node")
    return built[index]
