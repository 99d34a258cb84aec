"""Layers: objects that own parameters and compute with them (step 32).

PyTorch calls these modules (`torch.nn.Module`, `torch.nn.Linear`); DeZero calls them
layers. A layer registers every `Parameter` and every sub-layer assigned to one of
its attributes, so `params()` finds all the parameters of a model, however deeply
its layers are nested, for an optimizer to update.
"""
import numbers

import numpy as np

from tinypytorch import cuda, dtypes, random, recomputation, views
from tinypytorch import functions as F
from tinypytorch.core import Variable, as_variable
from tinypytorch.cuda import get_array_module


class Parameter(Variable):  # step 32
    """A Variable that a Layer registers as trainable (PyTorch's `nn.Parameter`).

    It is a Variable in every other respect; the class only marks it. Made of an array, or of a Variable
    (`nn.Parameter(torch.randn(3))`), whose memory and version counter it then shares, as PyTorch's.
    """

    def __init__(self, data=None, requires_grad=True, *, name=None):  # step 52
        shared = data.version_counter if isinstance(data, Variable) else None
        if isinstance(data, Variable):
            data = data.data
        elif data is None:  # PyTorch's empty parameter
            data = np.empty(0, dtypes.default())
        super().__init__(data, name=name, requires_grad=requires_grad)
        if shared is not None:
            views.share_version_counter(self, shared)


class Layer:  # step 32
    """Base class of layers: subclasses create parameters in `__init__` and compute in `forward`."""

    def __init__(self):
        self._registered = []  # attribute names, in the order assigned (PyTorch keeps that order too)
        self.training = True  # step 41: train() and eval() switch it, for this layer and its sub-layers
        self._buffer_names = []  # step 48: arrays the layer keeps that are not trained, moved with it

    def __setattr__(self, name, value):
        registered = self.__dict__.get("_registered")
        if isinstance(value, (Parameter, Layer)):
            if registered is None:
                raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning {name!r}")
            if name not in registered:
                registered.append(name)
        elif registered is not None and name in registered:
            registered.remove(name)  # replaced by something that is not a parameter (e.g. bias = None)
        super().__setattr__(name, value)

    def __call__(self, *inputs):
        return self.forward(*inputs)

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def modules(self):
        """This layer, then its sub-layers depth first, in the order they were assigned (PyTorch's name)."""
        yield self
        for name in self._registered:
            value = getattr(self, name)
            if isinstance(value, Layer):
                yield from value.modules()

    def params(self):
        """Every Parameter of this layer and its sub-layers (PyTorch's order), each once."""
        seen = set()
        for layer in self.modules():
            for name in layer._registered:
                value = getattr(layer, name)
                if isinstance(value, Parameter) and id(value) not in seen:  # a shared parameter counts once
                    seen.add(id(value))
                    yield value

    def register_buffer(self, name, array):  # step 48
        """Keep `array` as attribute `name`: state that is not trained (BatchNorm's running statistics), but
        that `to()` moves with the parameters, as PyTorch's buffers."""
        if not isinstance(array, cuda.array_types):
            raise TypeError(f"register_buffer: {name!r} must be an array, got {type(array).__name__}")
        if name not in self._buffer_names:
            self._buffer_names.append(name)
        setattr(self, name, array)

    # step 48: buffers (running statistics) move with the layer too
    def buffers(self):
        """Every buffer of this layer and its sub-layers."""
        for layer in self.modules():
            for name in layer._buffer_names:
                yield getattr(layer, name)

    def to(self, device):  # step 48
        """Move every parameter (and its gradient) and every buffer to `device`, in place; returns the layer.

        The parameters stay the same objects, only their arrays move, so an optimizer made
        before the move still holds them (PyTorch's `Module.to` does the same).
        """
        where = cuda.device(device)
        for param in self.params():
            param.data = cuda.to_device(param.data, where, f"{type(self).__name__}.to")
            if param.grad is not None:
                param.grad = Variable(cuda.to_device(param.grad.data, where), requires_grad=False)
        for layer in self.modules():
            for name in layer._buffer_names:
                setattr(layer, name, cuda.to_device(getattr(layer, name), where))
        return self

    # step 48: a layer moves to a device as a whole
    def cuda(self):
        return self.to("cuda")

    # step 48: and back to the host
    def cpu(self):
        return self.to("cpu")

    def cleargrads(self):
        for param in self.params():
            param.cleargrad()

    # step 41: training and evaluation modes
    def train(self, mode=True):
        """Training mode (dropout drops, batch norm uses and updates batch statistics); returns the layer."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")  # PyTorch's type and words
        for layer in self.modules():
            layer.training = mode
        return self

    # step 41: evaluation mode
    def eval(self):
        """Evaluation mode: train(False)."""
        return self.train(False)

    parameters = params  # PyTorch's names
    zero_grad = cleargrads


def registered_names(layer):  # step 52
    """The names of `layer`'s parameters and sub-layers, in the order assigned: nn.Module's door into the
    registry, for a Module and a plain Layer alike."""
    return list(layer._registered)


def buffer_names(layer):  # step 52
    """The names of `layer`'s buffers, in the order registered."""
    return list(layer._buffer_names)


def keep_registered(layer, name, kept):  # step 52
    """Put `name` into the registry (a Module's empty slot, which holds None) or take it out (a deleted one)."""
    if kept and name not in layer._registered:
        layer._registered.append(name)
    elif not kept and name in layer._registered:
        layer._registered.remove(name)


def forget_buffer(layer, name):  # step 52
    """`name` is no buffer any more (deleted, or now a parameter or a sub-module)."""
    if name in layer._buffer_names:
        layer._buffer_names.remove(name)


def _check_size(layer, name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{layer}: {name} must be a positive int, got {value!r}")


class Linear(Layer):  # step 32
    """y = x W^T + b, PyTorch's `nn.Linear(in_size, out_size)`: weight (out_size, in_size), bias (out_size,).

    Both start uniform in [-k, k], k = 1/sqrt(in_size), as in PyTorch, drawn from the
    framework's generator, so `tinypytorch.manual_seed` fixes them as `torch.manual_seed` does;
    or from `rng`, a NumPy Generator of the caller's. float64, NumPy's dtype, unless `dtype` says
    otherwise (nn.Linear passes PyTorch's default, float32).
    """

    def __init__(self, in_size, out_size, bias=True, *, rng=None, dtype=None):
        super().__init__()
        _check_size("Linear", "in_size", in_size)
        _check_size("Linear", "out_size", out_size)
        rng = random.default_generator() if rng is None else rng
        k = 1.0 / np.sqrt(in_size)
        self.weight = Parameter(rng.uniform(-k, k, (out_size, in_size)), name="weight")
        self.bias = Parameter(rng.uniform(-k, k, out_size), name="bias") if bias else None
        if dtype is not None:  # step 59: nn.Linear's parameters in PyTorch's default dtype, float32
            for param in self.params():
                param.data = param.data.astype(dtype)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class MLP(Layer):  # step 32
    """A multi-layer perceptron: Linear layers of the given sizes, `activation` between them.

    `MLP((1, 10, 1))` maps 1 input to 1 output through 10 hidden units.
    """

    def __init__(self, sizes, activation=F.sigmoid, *, rng=None):
        super().__init__()
        sizes = tuple(sizes)
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs an input and an output size, got {sizes}")
        self.activation = activation
        self.layers = []  # a plain list is not registered: each layer is also an attribute
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layer = Linear(n_in, n_out, rng=rng)
            setattr(self, f"l{i}", layer)
            self.layers.append(layer)

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


class Dropout(Layer):  # step 41
    """PyTorch's `nn.Dropout(p)`: drops in training mode, passes through in evaluation mode."""

    def __init__(self, p=0.5):
        super().__init__()
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability has to be between 0 and 1, but got {p!r}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class BatchNorm1d(Layer):  # step 45
    """PyTorch's `nn.BatchNorm1d(num_features)` for inputs of shape (N, num_features).

    In training mode each feature is normalised with the batch's mean and (biased) variance,
    then scaled by `weight` and shifted by `bias`; the running statistics move towards the
    batch's (the variance unbiased), with `momentum`, and `num_batches_tracked` counts the
    updates. In evaluation mode the running statistics normalise. Built from the package's
    operations, so its gradients of every order come from theirs.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, *, dtype=np.float64):  # dtype: step 59
        super().__init__()
        name = type(self).__name__  # nn.BatchNorm2d is built on this layer too
        _check_size(name, "num_features", num_features)
        if not isinstance(eps, numbers.Real) or not eps > 0:
            raise ValueError(f"{name}: eps must be a positive number, got {eps!r}")
        if momentum is not None and (not isinstance(momentum, numbers.Real) or not 0.0 <= momentum <= 1.0):
            raise ValueError(f"{name}: momentum must be None (a cumulative average) or in [0, 1], "
                             f"got {momentum!r}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(np.ones(num_features, dtype), name="weight")
        self.bias = Parameter(np.zeros(num_features, dtype), name="bias")
        self.register_buffer("running_mean", np.zeros(num_features, dtype))  # step 48: buffers move with the layer
        self.register_buffer("running_var", np.ones(num_features, dtype))
        self.num_batches_tracked = 0

    def forward(self, x):
        x = as_variable(x, "BatchNorm1d")
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm1d: expected an input of shape (N, {self.num_features}), got {tuple(x.shape)}")
        # step 48: the buffers are raw arrays, which no operation checks: a model left on the CPU fails here
        cuda.check_same_device("batchnorm1d", [x.data, self.weight.data, self.running_mean])
        if not self.training:
            xp = get_array_module(x)
            scale = (1.0 / xp.sqrt(self.running_var + self.eps)).astype(x.dtype)
            return (x - self.running_mean.astype(x.dtype)) * scale * self.weight + self.bias
        n = x.shape[0]
        if n < 2:
            raise ValueError(f"BatchNorm1d: expected more than 1 value per feature in training, got input of shape "
                             f"{tuple(x.shape)}")
        mean = x.sum(axis=0) / n
        centred = x - mean
        var = (centred * centred).sum(axis=0) / n
        y = centred / (var + self.eps) ** 0.5 * self.weight + self.bias
        if not recomputation.is_recomputing():  # step 45: a recomputation must not count the batch twice
            self.num_batches_tracked += 1
            # momentum None: a cumulative average of every batch so far, as in PyTorch
            m = 1.0 / self.num_batches_tracked if self.momentum is None else self.momentum
            self.running_mean *= 1 - m
            self.running_mean += m * mean.data  # the buffers live where the batch does (step 48)
            self.running_var *= 1 - m
            self.running_var += m * var.data * n / (n - 1)
        return y
