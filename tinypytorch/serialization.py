"""Saving and loading: PyTorch's torch.save / torch.load (step 52).

    save(model.state_dict(), "net.pt")
    save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss": 0.25}, "ckpt.pt")
    checkpoint = load("ckpt.pt", weights_only=True)
    save(model, "model.pt"); model = load("model.pt", weights_only=False)  # a whole object: pickled

A structure of tensors is saved without pickle. `save` describes a Variable (tensor) or a Parameter, a NumPy array
or scalar, an int, float, bool, str or None, a dtype (`tinypytorch.float32`: it comes back as itself, as torch.load
gives back a torch.dtype), and dicts (str or int keys), OrderedDicts, lists and tuples of these, nested: a model's
or an optimizer's `state_dict()`, a training checkpoint. `load` gives the same structure back: the same container
types and key order, arrays of the same dtypes and shapes; Variables and Parameters as leaves that require grad as
they did when saved (torch's rule; no gradient, no graph), NumPy arrays as NumPy arrays, a NumPy scalar as a 0-d
array of its dtype (as torch.load gives back a 0-d tensor with its dtype; its weights-only loader refuses NumPy
scalars themselves). An object found twice in one call (`[x, x]`) comes back as one object, as from torch.load.
Any depth of nesting is kept (torch.load stops near 500 levels).

The file is a NumPy .npz archive laid out like PyTorch's zip file: each array an entry, `data/0`, `data/1`, ...,
and the entry `structure`, JSON text that describes the rest and names those entries, where PyTorch's file holds a
pickle. The arrays are read with `allow_pickle=False` and the structure with `json`: loading such a file never
runs code from it.

Anything else is pickled, as torch.save pickles everything: a Module, an optimizer, a set, an object of any class,
dict keys of other types, a container that holds itself. The pickle is one more entry of the same archive,
`pickle`, and the arrays of its tensors stay entries of their own, which the pickle names (as PyTorch's names its
storages). `load` follows PyTorch's rule for it: with weights_only=True, the default, it unpickles only what
PyTorch's weights-only unpickler allows (tensors, dtypes, devices, sizes, numbers, strings, bytes, None, and dicts,
OrderedDicts, Counters, lists, tuples and sets of these) and refuses anything else, a Module's class among them,
with pickle.UnpicklingError; weights_only=False unpickles anything, which can run code from the file, so only
for a file from a trusted source. What pickle cannot pickle (a lambda) raises pickle's error, and nothing is
written.
"""
import _codecs
import collections
import io
import json
import os
import pickle
import zipfile

import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch.core import Variable
from tinypytorch.layers import Parameter
from tinypytorch.size import Size

FORMAT, VERSION = "tinypytorch.save", 1
STRUCTURE = "structure"  # the JSON entry; the arrays are "data/0", "data/1", ...: no name a caller picks
PICKLE = "pickle"  # the entry of a pickled object, which the structure names
CONTAINERS = {dict: "dict", collections.OrderedDict: "OrderedDict", list: "list", tuple: "tuple"}
NUMBERS = (bool, int, float, str)  # exact types: a subclass (an IntEnum, np.float64) would not come back as itself


def save(obj, f, pickle_module=pickle, pickle_protocol=2):  # step 52
    """Write `obj` to `f`, a path (written under exactly that name: np.savez alone would add ".npz") or a binary
    file object: a structure of tensors described without pickle, anything else pickled (see the module's
    docstring; pickle_module and pickle_protocol, PyTorch's, are for that). Nothing is written if `obj` cannot be
    saved."""
    is_path = isinstance(f, (str, bytes, os.PathLike))
    if not is_path:
        _check_file("save", f, "write", "wb")
    writer, entries = _Writer(), {}
    try:
        writer.describe(obj)  # the root is the last node
        structure = {"format": FORMAT, "version": VERSION, "nodes": writer.nodes}
    except _NotDescribed:  # anything else is pickled, as PyTorch pickles everything
        writer, pickled = _Writer(), io.BytesIO()
        _pickler(pickle_module, pickled, pickle_protocol, writer).dump(obj)
        structure = {"format": FORMAT, "version": VERSION, "pickle": PICKLE}
        entries[PICKLE] = np.frombuffer(pickled.getvalue(), dtype=np.uint8)
    entries.update({f"data/{i}": array for i, array in enumerate(writer.arrays)})
    entries[STRUCTURE] = np.frombuffer(json.dumps(structure).encode(), dtype=np.uint8)
    if is_path:
        with open(f, "wb") as file:
            np.savez(file, allow_pickle=False, **entries)
    else:
        np.savez(f, allow_pickle=False, **entries)


def load(f, map_location=None, *, weights_only=True, mmap=None):  # step 52
    """Read what `save` wrote to `f` (a path or a binary file object).

    map_location: PyTorch's forms. None puts each array back on the device it was saved from; "cpu", "cuda",
    "cuda:1" or a `tinypytorch.device` puts them all there; a dict maps the device an array was saved from ("cpu",
    "cuda:0") to the one it goes to; a function `fn(array, location)` gets each array on the CPU (a NumPy array,
    the package's storage) and the name of the device it was saved from, and returns the array (a Variable) where
    it should be, or None for the saved device.
    weights_only: True (the default; None too) refuses to unpickle anything but tensors and plain data, as
    PyTorch's; False unpickles anything (only for a file from a trusted source). A structure of tensors is never
    pickled: either loads it.
    mmap: None or False; NumPy cannot memory-map the arrays inside an .npz archive.
    """
    place = _placement(map_location)
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"load: weights_only must be a bool, got {type(weights_only).__name__}")
    if mmap:
        raise ValueError("load: mmap=True is not supported: NumPy cannot memory-map the arrays inside an .npz "
                         "archive; leave mmap unset")
    weights_only = weights_only is not False
    if isinstance(f, (str, bytes, os.PathLike)):
        with open(f, "rb") as file:
            return _load(file, repr(os.fsdecode(f)), place, weights_only)
    _check_file("load", f, "read", "rb")
    return _load(f, "the file", place, weights_only)


# ----- writing: the structure as a JSON list of nodes, the arrays apart ----------------------------------------------

class _NotDescribed(Exception):
    """What the JSON structure cannot describe (an object of another type, dict keys other than str and int, an
    array of strings, a container that holds itself): save pickles the object instead."""


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
                if self.index[id(obj)] is None:  # a container that holds itself: a cycle, which pickle keeps
                    raise _NotDescribed
                done.append(self.index[id(obj)])
            elif type(obj) in CONTAINERS:
                self.index[id(obj)] = None  # met, not finished: meeting it again inside itself is a cycle
                work.append(("exit", obj, where))
                work.extend(("enter", value, (where, key)) for key, value in reversed(self.children(obj)))
            else:
                done.append(self.leaf(obj, where))
        return done[0]

    def add(self, obj, node):
        self.nodes.append(node)
        if obj is not None:
            self.index[id(obj)] = len(self.nodes) - 1
        return len(self.nodes) - 1

    @staticmethod
    def children(obj):
        if not isinstance(obj, dict):
            return list(enumerate(obj))
        for key in obj:
            if type(key) not in (str, int):  # JSON keeps these two apart; a bool or a tuple it could not give back
                raise _NotDescribed
        return list(obj.items())

    @staticmethod
    def pairs(obj, items):
        return [[key, item] for key, item in zip(obj, items)] if isinstance(obj, dict) else items

    def leaf(self, obj, where):
        if obj is None or type(obj) in NUMBERS:
            return self.add(None, obj)
        if _numeric_array(obj):
            if isinstance(obj, np.generic):  # not remembered: np.True_ is one object however often it is used
                return self.add(None, self.array_node(np.asarray(obj), where))
            return self.add(obj, self.array_node(obj, where))
        if type(obj) is dtypes.dtype:  # by name: one object per dtype, found again when loaded
            return self.add(None, {"type": "dtype", "name": obj.dtype.name})
        raise _NotDescribed

    def array_node(self, obj, where):
        data = obj.data if isinstance(obj, Variable) else obj
        if data is None:
            raise ValueError(f"save: {_path(where)} is a Variable without data")
        kind = type(obj).__name__ if isinstance(obj, Variable) else "ndarray"  # NumPy's or CuPy's
        node = {"type": kind, "data": len(self.arrays), "device": str(cuda.device_of(data))}
        if isinstance(obj, Variable):
            node["requires_grad"] = obj.requires_grad
        self.arrays.append(cuda.as_numpy(data))
        return node


def _numeric_array(obj):
    """Whether obj is kept as an array entry: a Variable or a Parameter, or a NumPy or CuPy array or NumPy scalar of
    numbers or booleans (exact types: a subclass, a masked array, would lose its kind; an array of other dtypes
    needs pickle, or has no tensor dtype)."""
    if type(obj) in (Variable, Parameter):
        return True
    return (type(obj) in cuda.array_types or isinstance(obj, np.generic)) and obj.dtype.kind in "biufc"


def _path(where):
    """`where`, a chain of (parent, key) pairs from the top, as a path: obj['model'][0]."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(f"[{key!r}]")
    return "obj" + "".join(reversed(keys))


# ----- pickling: everything else, its tensors' arrays kept as entries ---------------------------------------------

def _pickler(pickle_module, file, protocol, writer):
    """A pickler of `pickle_module` that hands each tensor, array, dtype, device and size to `persistent_id`: the
    arrays become entries of the archive (through `writer`), the rest names that load finds again. So a pickle
    needs no global for them, and load's weights-only unpickler can give them back without running code."""

    class Pickler(pickle_module.Pickler):
        def __init__(self):
            super().__init__(file, protocol)
            self.ids = {}  # id(obj) -> its persistent id, and obj kept alive so that its id stays its own

        def persistent_id(self, obj):
            if _numeric_array(obj):
                known = self.ids.get(id(obj))
                if known is not None:
                    return known[0]
                array = np.asarray(obj) if isinstance(obj, np.generic) else obj  # a scalar: a 0-d array
                node = writer.array_node(array, None)
                pid = ("array", node["type"], node["data"], node["device"], node.get("requires_grad", False))
                self.ids[id(obj)] = (pid, obj)
                return pid
            if type(obj) is dtypes.dtype:
                return ("dtype", obj.dtype.name)
            if type(obj) is cuda.device:
                return ("device", str(obj))
            if type(obj) is Size:
                return ("Size", tuple(obj))
            return None

    return Pickler()


# PyTorch's weights-only unpickler allows these globals, besides its tensors, dtypes, devices and sizes (persistent
# ids here); a pickle of protocol 2 names builtins as Python 2 did, __builtin__
_SAFE_GLOBALS = {("collections", "OrderedDict"): collections.OrderedDict,
                 ("collections", "Counter"): collections.Counter,
                 ("_codecs", "encode"): _codecs.encode}  # encode: bytes, in a pickle of protocol 2
_SAFE_GLOBALS.update({(module, kind.__name__): kind for kind in (set, complex, bytearray)
                      for module in ("builtins", "__builtin__")})


class _Unpickler(pickle.Unpickler):
    """Unpickles what save pickled, its arrays read from the archive; with weights_only, only the globals
    PyTorch's weights-only unpickler allows (find_class is where every class and function a pickle names is
    looked up, so nothing else can be built or called)."""

    def __init__(self, file, reader, weights_only):
        super().__init__(file)
        self.reader, self.weights_only, self.loaded = reader, weights_only, {}

    def find_class(self, module, name):
        if not self.weights_only:
            return super().find_class(module, name)
        found = _SAFE_GLOBALS.get((module, name))
        if found is None:  # (named as PyTorch names it: a builtin by its name alone)
            shown = name if module in ("builtins", "__builtin__") else f"{module}.{name}"
            raise pickle.UnpicklingError(_weights_only_refusal(shown))
        return found

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid:
            raise RuntimeError(f"load: {self.reader.name} is damaged: its pickle names {pid!r}")
        if pid not in self.loaded:  # (an array named twice is one object, as it was when saved)
            self.loaded[pid] = self.reader.persistent(pid)
        return self.loaded[pid]


def _weights_only_refusal(name):
    """PyTorch's message, for what a weights-only load does not unpickle."""
    return ("Weights only load failed. This file can still be loaded, but only if you trust its source: re-running "
            "`tinypytorch.load` with `weights_only` set to `False` will likely succeed, but it can result in "
            "arbitrary code execution. Do it only if you got the file from a trusted source.\n"
            f"\tWeightsUnpickler error: Unsupported global: GLOBAL {name} was not an allowed global by default. With "
            "weights_only=True, load gives back tensors, NumPy arrays of numbers, dtypes, devices, sizes, numbers, "
            "strings, bytes, None, and dicts, OrderedDicts, Counters, lists, tuples and sets of these.")


def _check_file(op, f, method, mode):
    if isinstance(f, io.TextIOBase) or not callable(getattr(f, method, None)):
        raise TypeError(f"{op}: f must be a path or a file object opened in binary mode ('{mode}'), "
                        f"got {type(f).__name__}")


# ----- reading: refuse what save did not write, then rebuild ---------------------------------------------------

def _placement(map_location):
    """load's map_location, checked before the file is read, as a function (array, the name of the device it was
    saved from, the file's name) -> the array where it goes."""
    if map_location is None:
        return lambda array, saved, name: _placed(array, cuda.device(saved), name)
    if isinstance(map_location, dict):  # PyTorch's: {saved device: device}, the others where they were saved
        targets = {key: _device(value) for key, value in map_location.items()}
        return lambda array, saved, name: _placed(array, targets.get(saved) or cuda.device(saved), name)
    if callable(map_location):  # PyTorch's: fn(storage on the CPU, saved location) -> storage, or None
        def place(array, saved, name):
            result = map_location(array, saved)
            if result is None:
                return _placed(array, cuda.device(saved), name)
            result = result.data if isinstance(result, Variable) else result
            if type(result) not in cuda.array_types:
                raise TypeError(f"load: map_location returned a {type(result).__name__}; it must return the "
                                "array it was given, placed (a NumPy or CuPy array, or a Variable), or None")
            return result
        return place
    target = _device(map_location)
    return lambda array, saved, name: _placed(array, target, name)


def _device(spec):
    if isinstance(spec, (str, cuda.device)):
        try:
            return cuda.device(spec)
        except RuntimeError:
            pass
    shown = repr(spec) if isinstance(spec, str) else f"a {type(spec).__name__}"
    raise ValueError(f"load: map_location must be None, 'cpu', 'cuda', 'cuda:<index>', a tinypytorch.device, a dict "
                     f"of these or a function, got {shown}")


def _placed(array, where, name):
    if where.type == "cuda" and not cuda.is_available():
        raise RuntimeError(f"load: cannot place the arrays of {name} on {where}: {cuda.why_unavailable()}; on a "
                           "machine without a GPU pass map_location='cpu'")
    return cuda.to_device(array, where, op="load")


def _load(file, name, place, weights_only):
    with _archive(file, name) as archive:
        reader = _Reader(archive, name, place)
        structure = reader.structure()
        if "pickle" in structure:
            return reader.unpickle(structure["pickle"], weights_only)
        try:
            return reader.build(structure["nodes"])
        except _PlacementFailed as failed:
            raise failed.__cause__
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


class _PlacementFailed(Exception):
    """Carries an error of map_location's placement (its __cause__) past the checks for a damaged file."""


class _Reader:
    """Rebuilds the objects that a structure describes, from a file that save wrote, or refuses the file."""

    def __init__(self, archive, name, place):
        self.archive, self.name, self.place = archive, name, place

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
        array = self.entry(f"data/{node['data']}")
        try:
            array = self.place(array, node["device"], self.name)
        except Exception as error:  # map_location's error: the caller's, not a damaged file
            raise _PlacementFailed from error
        if node["type"] == "ndarray":
            return array
        return (Variable if node["type"] == "Variable" else Parameter)(array, requires_grad=node["requires_grad"])

    def unpickle(self, entry, weights_only):
        """The object pickled in `entry`, its arrays from the archive; with weights_only, only plain data."""
        raw = self.entry(PICKLE) if entry == PICKLE and PICKLE in self.archive.files else None
        if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
            raise RuntimeError(f"load: {self.name} is damaged: its structure names no pickle that save wrote")
        try:
            return _Unpickler(io.BytesIO(raw.tobytes()), self, weights_only).load()
        except _PlacementFailed as failed:
            raise failed.__cause__

    def persistent(self, pid):
        """What a persistent id of the pickle stands for (_pickler): an array read from the archive, a dtype, a
        device, a size."""
        try:
            kind, *rest = pid
            if kind == "array":
                kind, index, device, requires_grad = rest  # the array's kind: Variable, Parameter or ndarray
                if kind not in ("Variable", "Parameter", "ndarray") or type(index) is not int or \
                        type(device) is not str or type(requires_grad) is not bool:
                    raise ValueError(f"an array described as {pid!r}")
                return self.leaf({"type": kind, "data": index, "device": device, "requires_grad": requires_grad})
            if kind == "dtype" and len(rest) == 1:
                return _dtype(rest[0])
            if kind == "device" and len(rest) == 1 and type(rest[0]) is str:
                return cuda.device(rest[0])
            if kind == "Size" and len(rest) == 1 and all(type(n) is int for n in rest[0]):
                return Size(rest[0])
            raise ValueError(f"unknown persistent id {pid!r}")
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise RuntimeError(f"load: {self.name} is damaged: its pickle does not match its arrays ({error!r})") \
                from error


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
