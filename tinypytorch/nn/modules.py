"""PyTorch's torch.nn.Module and the modules built on it (step 52).

`Module` is what step 32's `Layer` grows into: a subclass of it that keeps everything a Layer
does (registration by attribute, `to`, `train`/`eval`) and adds names. A model is a tree of
modules; each parameter, sub-module and buffer is reached from the root by the attribute names
on the way, joined by dots (`"0.weight"`, `"encoder.1.bias"`), PyTorch's keys. The names are
what `named_parameters`, `state_dict` and `load_state_dict` speak.

The registry stays Layer's, reached through its doors (`layers.registered_names`, `buffer_names`,
`keep_registered`, `forget_buffer`): the names of parameters and sub-modules in the order they were
assigned, and those of buffers. Module, a Layer itself, adds `_kinds`, which slot each registered
name is, so that a slot emptied with None keeps its kind as in PyTorch. A plain Layer inside a
Module (a `layers.BatchNorm1d`) is walked the same way.
"""
import collections
import collections.abc
import itertools
import numbers
import operator

import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch import layers
from tinypytorch.core import Variable
from tinypytorch.grad_mode import no_grad
from tinypytorch.size import Size
from tinypytorch.layers import Layer, Parameter
from tinypytorch.nn import functional as F
from tinypytorch.nn import module_hooks


def _typename(value):
    """PyTorch's torch.typename: 'int', 'numpy.ndarray', 'tinypytorch.core.Variable'."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _check_name(what, name, owner):
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f'{what} name can\'t contain "."')
    if name == "":
        raise KeyError(f'{what} name can\'t be empty string ""')


class Module(Layer):  # step 52
    """PyTorch's nn.Module: a Layer whose parameters, sub-modules and buffers have names."""

    def __init__(self):
        super().__init__()
        self._kinds = {}  # name -> "parameter" or "module", for every registered slot (None-valued ones too)
        self._non_persistent = set()  # buffers that state_dict leaves out

    def __setattr__(self, name, value):
        kinds = self.__dict__.get("_kinds")
        if kinds is None:  # Layer.__init__ is still running, or a Layer's own rule applies
            return super().__setattr__(name, value)
        if isinstance(value, (Parameter, Layer)):
            self._forget_buffer(name)
            kinds[name] = "parameter" if isinstance(value, Parameter) else "module"
            return super().__setattr__(name, value)  # Layer appends the name to its registry
        if name in layers.buffer_names(self):
            return object.__setattr__(self, name, self._buffer_value(name, value, "as buffer", "expected"))
        kind = kinds.get(name)
        if kind is not None and value is not None:  # PyTorch's meaning: a slot keeps its kind
            slot, expected = ("parameter", "Parameter") if kind == "parameter" else ("child module", "Module")
            raise TypeError(f"cannot assign '{_typename(value)}' as {slot} '{name}' "
                            f"(tinypytorch.nn.{expected} or None expected)")
        object.__setattr__(self, name, value)  # None empties a slot without removing it, as in PyTorch

    def __delattr__(self, name):
        if name in self._kinds:
            del self._kinds[name]
            layers.keep_registered(self, name, False)
        self._forget_buffer(name)
        object.__delattr__(self, name)

    def _forget_buffer(self, name):
        layers.forget_buffer(self, name)
        self._non_persistent.discard(name)

    @staticmethod
    def _buffer_value(name, value, how, verb):
        if isinstance(value, Variable):
            return value.data  # buffers are arrays, as Layer keeps them (step 48)
        if not isinstance(value, cuda.array_types):
            raise TypeError(f"cannot assign '{_typename(value)}' {how} '{name}' "
                            f"(tinypytorch.Tensor or an array {verb})")
        return value

    def _declare(self, name, kind, value):
        _check_name(kind, name, self)
        if "_kinds" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if hasattr(self, name) and self._kinds.get(name) != kind:
            raise KeyError(f"attribute '{name}' already exists")
        if value is None:
            layers.keep_registered(self, name, True)
            self._kinds[name] = kind
        setattr(self, name, value)

    def register_parameter(self, name, param):
        """Register `param` (a Parameter, or None for an empty slot such as Linear's bias=False) as `name`."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(tinypytorch.nn.Parameter or None required)")
        self._declare(name, "parameter", param)

    def add_module(self, name, module):
        """Register `module` (or None) as the child `name`; PyTorch's `add_module`."""
        if module is not None and not isinstance(module, Layer):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        self._declare(name, "module", module)

    register_module = add_module

    def register_buffer(self, name, tensor, persistent=True):
        """Keep `tensor` (an array or a Variable's array) as buffer `name`: moved by `to`, saved by `state_dict`
        unless `persistent=False`, never trained."""
        _check_name("buffer", name, self)
        if hasattr(self, name) and name not in layers.buffer_names(self):
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is None:
            raise TypeError(f"register_buffer: buffer '{name}' is None; tinypytorch's buffers are arrays")
        super().register_buffer(name, self._buffer_value(name, tensor, "object to buffer", "required"))
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)

    def forward(self, *inputs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # step 53: hooks (tinypytorch.nn.module_hooks runs them)

    def __call__(self, *args, **kwargs):
        return module_hooks.call(self, args, kwargs)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) -> None or new args, before forward (with_kwargs: hook(module, args, kwargs))."""
        return module_hooks.register(self, "_forward_pre_hooks", (hook, with_kwargs), prepend)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """hook(module, args, output) -> None or a new output, after forward."""
        return module_hooks.register(self, "_forward_hooks", (hook, with_kwargs, always_call), prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output, before the module's backward."""
        return module_hooks.register(self, "_backward_pre_hooks", hook, prepend)

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input, once the inputs' gradients are made."""
        return module_hooks.register(self, "_backward_hooks", hook, prepend)

    # Walking the tree. A child may be a plain Layer: the same walk works on it, Module being a Layer.

    def named_children(self):
        """(name, child) for each direct sub-module, in the order assigned, each once."""
        seen = set()
        for name in layers.registered_names(self):
            child = getattr(self, name)
            if isinstance(child, Layer) and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def _module_slots(self):
        """(name, module or None) for every child slot, a shared module under each of its names (PyTorch's
        _modules)."""
        return [(n, getattr(self, n)) for n in layers.registered_names(self) if self._kinds.get(n) == "module"]

    def children(self):
        for _, child in self.named_children():
            yield child

    def named_modules(self, memo=None, prefix=""):
        """(dotted name, module) for this module ("") and every module below it, depth first, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in Module.named_children(self):
            yield from Module.named_modules(child, memo, f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def _named_members(self, own, prefix, recurse):
        seen = set()
        tree = Module.named_modules(self, prefix=prefix) if recurse else [(prefix, self)]
        for path, module in tree:
            for name, value in own(module):
                if id(value) not in seen:  # a shared parameter counts once, under its first name
                    seen.add(id(value))
                    yield (f"{path}.{name}" if path else name), value

    def named_parameters(self, prefix="", recurse=True):
        """(dotted name, Parameter) for every parameter of the tree: PyTorch's names and order."""
        def own(module):
            return [(n, getattr(module, n)) for n in layers.registered_names(module)
                    if isinstance(getattr(module, n), Parameter)]
        return self._named_members(own, prefix, recurse)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True):
        """(dotted name, array) for every buffer of the tree."""
        def own(module):
            return [(n, getattr(module, n)) for n in layers.buffer_names(module)]
        return self._named_members(own, prefix, recurse)

    def buffers(self, recurse=True):
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    # devices and dtypes, PyTorch's forms: to(device), to(dtype), to(device, dtype), to(tensor)

    def to(self, *args, device=None, dtype=None):  # step 59
        """Move the parameters and buffers to `device` and/or cast the floating point ones to `dtype`, in place (the
        Parameters stay the same objects, so an optimizer made before still holds them); returns the module."""
        for arg in args:
            if isinstance(arg, Variable):
                device, dtype = arg.device, arg.data.dtype
            elif isinstance(arg, (str, cuda.device)):
                device = arg
            else:
                dtype = arg
        if device is not None:
            Layer.to(self, device)
        if dtype is not None:
            self._cast(np.dtype(dtype))
        return self

    def _cast(self, dtype):
        if dtype.kind not in "fc":
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtypes.as_torch(dtype)}")
        # A tensor already in `dtype` keeps its memory, as PyTorch's (a state dict taken before still shares it)
        for param in self.parameters():
            if param.data.dtype.kind in "fc" and param.data.dtype != dtype:
                param.data = param.data.astype(dtype)  # a new array, as PyTorch's module.to gives param.data
            if param.grad is not None and param.grad.data.dtype.kind in "fc" and param.grad.data.dtype != dtype:
                param.grad = Variable(param.grad.data.astype(dtype), requires_grad=False)
        for module in self.modules():
            for name in layers.buffer_names(module):
                buffer = getattr(module, name)
                if buffer.dtype.kind in "fc" and buffer.dtype != dtype:
                    object.__setattr__(module, name, buffer.astype(dtype))

    def float(self):  # step 59
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    def half(self):
        return self.to(dtype=np.float16)

    def requires_grad_(self, requires_grad=True):  # step 57
        """Whether autograd records operations on the parameters (freezing a model: False); returns the module."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def apply(self, fn):  # step 52
        """fn(module) for every sub-module, children first, then this module (PyTorch's order); returns the module."""
        for child in self.children():
            Module.apply(child, fn) if isinstance(child, Module) else fn(child)
        fn(self)
        return self

    def zero_grad(self, set_to_none=True):
        """Forget every parameter's gradient (None, as PyTorch since 2.0), or zero it in place: the same Variable,
        so whoever holds it sees the zeros, as in PyTorch."""
        for param in self.parameters():
            if param.grad is not None:
                if set_to_none:
                    param.grad = None
                else:
                    if param.grad.creator is not None:  # a gradient made with create_graph: cut from its graph first
                        param.grad = param.grad.detach()
                    param.grad.requires_grad_(False)
                    param.grad.zero_()

    # The state: names to arrays, and back.

    def _state_entries(self, prefix=""):
        """(key, owner, attribute) for every parameter and persistent buffer: PyTorch's keys, in its order
        (a module's own parameters, its buffers, then each child's, depth first; shared ones under every name)."""
        for name in layers.registered_names(self):
            if isinstance(getattr(self, name), Parameter):
                yield prefix + name, self, name
        for name in layers.buffer_names(self):
            if name not in getattr(self, "_non_persistent", ()):
                yield prefix + name, self, name
        for name in layers.registered_names(self):
            child = getattr(self, name)
            if isinstance(child, Layer):
                yield from Module._state_entries(child, f"{prefix}{name}.")

    def state_dict(self, prefix="", keep_vars=False):
        """An ordered dict from dotted names to the parameters' and buffers' values (Variables sharing their
        memory, detached, as PyTorch's; the Parameters themselves with keep_vars=True)."""
        state = collections.OrderedDict()
        for key, owner, name in Module._state_entries(self, prefix):
            value = getattr(owner, name)
            if isinstance(value, Variable):  # detached: the same memory and version counter, as PyTorch's
                state[key] = value if keep_vars else value.detach()
            else:
                state[key] = Variable(value, requires_grad=False)
        return state

    def load_state_dict(self, state_dict, strict=True):
        """Copy the values of `state_dict` into this module's parameters and buffers, in place.

        Everything that matches is copied; then, as PyTorch, a wrong shape is an error, and with `strict` so is a
        missing or an unexpected key. Returns (missing_keys, unexpected_keys).
        """
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        errors, expected = [], {}
        for key, owner, name in Module._state_entries(self):
            expected[key] = (owner, name)
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Variable):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(value)}")
                continue
            target = getattr(owner, name)
            if value.shape != target.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {Size(value.shape)} from "
                              f"checkpoint, the shape in current model is {Size(target.shape)}.")  # PyTorch's words
                continue
            _copy_into(target, value)
        missing = [key for key in expected if key not in state_dict]
        unexpected = [key for key in state_dict if key not in expected]
        if strict:  # each inserted at the front: missing keys first, then unexpected ones, then the shapes
            for what, keys in (("Unexpected", unexpected), ("Missing", missing)):
                if keys:
                    errors.insert(0, f"{what} key(s) in state_dict: " + ", ".join(f'"{k}"' for k in keys) + ". ")
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                    "\n\t".join(errors)))
        return IncompatibleKeys(missing, unexpected)

    # The picture in text: PyTorch's repr.

    def extra_repr(self):
        """The module's own settings, inside its parentheses (`in_features=2, out_features=3, bias=True`)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + _indent(_repr(module), 2) for name, module in self._module_slots()]
        lines = extra_lines + child_lines
        if not lines:
            return f"{type(self).__name__}()"
        if len(extra_lines) == 1 and not child_lines:
            return f"{type(self).__name__}({extra_lines[0]})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"


def factory_dtype(dtype):
    """The dtype of a module's new parameters: `dtype` (floating) or the default dtype, as PyTorch's modules."""
    if dtype is None:
        return dtypes.default()
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc":
        raise TypeError(f"nn modules' parameters must be floating point or complex, got dtype {dtypes.as_torch(dtype)}")
    return dtype


def _copy_into(target, value):
    """A state's value copied into a parameter or buffer, in place (optimizers keep their Parameters), in the
    target's own dtype and device; a parameter counts it as an in-place change, so a graph that saved the old
    value refuses it (PyTorch's copy_ under no_grad)."""
    if isinstance(target, Variable):
        with no_grad():
            target.copy_(value.to(target.device))
    else:
        target[...] = cuda.to_device(value.data, cuda.device_of(target))


class IncompatibleKeys(collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict returns; PyTorch's _IncompatibleKeys."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


def _repr(module):
    """A child's repr: a plain Layer (step 32) has no names, so it is shown as a Module without children."""
    return repr(module) if module is None or isinstance(module, Module) else f"{type(module).__name__}()"


def _indent(text, spaces):
    """Every line after the first moved right (PyTorch's _addindent)."""
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * spaces + line for line in rest])


def _index(index, size):
    """A position in a container of `size` modules, negative ones counted from the end (PyTorch's rule)."""
    index = operator.index(index)
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of range")
    return index % size


class Sequential(Module):  # step 52
    """PyTorch's nn.Sequential: modules named "0", "1", ... (or by an OrderedDict), applied in turn."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)

    def _items(self):
        return self._module_slots()

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter([module for _, module in self._items()])

    def __getitem__(self, index):
        items = self._items()
        if isinstance(index, slice):  # a Sequential of the slice, the names kept (PyTorch's)
            return type(self)(collections.OrderedDict(items[index]))
        return items[_index(index, len(items))][1]

    def __setitem__(self, index, module):
        name = self._items()[_index(index, len(self))][0]
        setattr(self, name, module)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):  # step 52
    """PyTorch's nn.ModuleList: a list whose modules are registered ("0", "1", ...), so the model finds their
    parameters; a plain Python list would hide them."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _items(self):
        return [module for _, module in self._module_slots()]

    def __len__(self):
        return len(self._items())

    def __iter__(self):
        return iter(self._items())

    def __getitem__(self, index):
        items = self._items()
        if isinstance(index, slice):
            return type(self)(items[index])  # renumbered from 0, as PyTorch
        return items[_index(index, len(items))]

    def __setitem__(self, index, module):
        setattr(self, str(_index(index, len(self))), module)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        if isinstance(modules, (str, numbers.Number)) or not hasattr(modules, "__iter__"):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        for module in modules:
            self.append(module)
        return self

    def __repr__(self):
        """Runs of equal modules are shown once, `(0-2): 3 x Linear(...)`, as PyTorch does."""
        reprs = [_repr(module) for module in self]
        if not reprs:
            return "ModuleList()"
        lines, start = [], 0
        for text, run in itertools.groupby(reprs):
            n = len(list(run))
            where = f"({start})" if n == 1 else f"({start}-{start + n - 1}): {n} x"
            lines.append(_indent(f"{where}: {text}" if n == 1 else f"{where} {text}", 2))
            start += n
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class Linear(layers.Linear, Module):  # step 52
    """PyTorch's nn.Linear(in_features, out_features, bias=True): step 32's Linear, as a Module.

    weight (out_features, in_features) and bias (out_features,) uniform in [-k, k], k = 1/sqrt(in_features): what
    PyTorch's kaiming_uniform_(a=sqrt(5)) comes to; drawn from the framework's generator (or `rng`), in `dtype`
    (the default dtype, float32, unless given) on `device`.
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *, rng=None):
        super().__init__(in_features, out_features, bias, rng=rng, dtype=factory_dtype(dtype))  # layers.Linear, then
        self.in_features, self.out_features = in_features, out_features  # Module's __init__
        if device is not None:
            self.to(device)
        self.in_features, self.out_features = in_features, out_features
        if not bias:
            del self.bias
            self.register_parameter("bias", None)  # an empty slot, as PyTorch's

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Dropout(layers.Dropout, Module):  # step 52
    """PyTorch's nn.Dropout(p): step 41's Dropout, as a Module."""

    def __init__(self, p=0.5, inplace=False):
        if inplace:
            raise ValueError("Dropout: inplace=True is not supported; tinypytorch's dropout makes a new array")
        super().__init__(p)
        self.inplace = inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class ReLU(Module):  # step 52
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):  # noqa: A002
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):  # step 52
    def forward(self, input):  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):  # step 52
    def forward(self, input):  # noqa: A002
        return F.sigmoid(input)


def _check_reduction(module, reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{module}: {reduction} is not a valid value for reduction (mean, sum or none)")
    return reduction


class MSELoss(Module):  # step 52
    """PyTorch's nn.MSELoss(reduction="mean"): the squared differences, averaged ("mean"), summed or kept."""

    def __init__(self, *, reduction="mean"):
        super().__init__()
        self.reduction = _check_reduction("MSELoss", reduction)

    def forward(self, input, target):  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(Module):  # step 52
    """PyTorch's nn.CrossEntropyLoss(ignore_index=-100, reduction="mean"), on step 50's cross_entropy."""

    def __init__(self, *, ignore_index=-100, reduction="mean"):
        super().__init__()
        self.ignore_index = ignore_index
        self.reduction = _check_reduction("CrossEntropyLoss", reduction)

    def forward(self, input, target):  # noqa: A002
        return F.cross_entropy(input, target, ignore_index=self.ignore_index, reduction=self.reduction)
