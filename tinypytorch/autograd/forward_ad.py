"""Forward-mode automatic differentiation, PyTorch's `torch.autograd.forward_ad` (step 64).

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        value, jvp = forward_ad.unpack_dual(y)   # f(primal) and J tangent, in one forward pass

A dual tensor carries a tangent beside its value. While the level is open every operation computes its
outputs' tangents from its inputs' by its `jvp` rule (Function.push_tangents, core); a tensor without a
tangent counts as a zero tangent. Closing the level drops every tangent. One level at a time, as in PyTorch.
"""
import collections
import contextlib

from tinypytorch import forward_ad_state
from tinypytorch.core import Variable
from tinypytorch.functions import Reshape

UnpackedDualTensor = collections.namedtuple("UnpackedDualTensor", ["primal", "tangent"])  # step 64


def enter_dual_level():  # step 64
    """Open the dual level (`dual_level` does it for a with block); returns its number, 0."""
    return forward_ad_state.enter_dual_level()


def exit_dual_level(*, level=None):  # step 64
    """Close the dual level: every tangent made under it is dropped."""
    forward_ad_state.exit_dual_level()


@contextlib.contextmanager
def dual_level():  # step 64
    """Within the block, dual tensors carry their tangents through every operation."""
    level = enter_dual_level()
    try:
        yield level
    finally:
        exit_dual_level(level=level)


def _alias(tensor):
    """A view of `tensor` sharing its memory (and its graph: a gradient flows back through it), no tangent."""
    view = Reshape(tensor.shape)(tensor)
    forward_ad_state.set_tangent(view, None)
    return view


def make_dual(tensor, tangent, *, level=None):  # step 64
    """A view of `tensor` whose tangent is `tangent` (same shape), at the open level."""
    if not forward_ad_state.open_dual_levels:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                           "enter_dual_level() first.")
    for name, t in (("primal", tensor), ("tangent", tangent)):
        if t.dtype.kind not in "fc":
            raise ValueError(f"Expected {name} to be floating point or complex, but got: {_torch_dtype(t.dtype)}")
    if tuple(tangent.shape) != tensor.shape:
        raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                           f"Tensor, this is not supported. Tensor is of size {list(tensor.shape)} while the given "
                           f"forward gradient is of size {list(tangent.shape)}.")
    if forward_ad_state.tangent_of(tensor) is not None:
        raise RuntimeError("Making a dual Tensor based on a Tensor that already has a forward gradient at the "
                           "same level 0 is not supported.")
    if isinstance(tangent, Variable) and forward_ad_state.tangent_of(tangent) is not None:  # step 65: PyTorch's
        raise RuntimeError("Setting a forward grad that itself has a forward gradient at the same level0 is not "
                           "supported.")  # (a second order needs a second level, which PyTorch has not either)
    dual = _alias(tensor)
    if isinstance(tangent, Variable):
        forward_ad_state.set_tangent(dual, tangent.data, as_variable=tangent)  # unpack_dual hands back `tangent`
    else:
        forward_ad_state.set_tangent(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):  # step 64
    """(primal, tangent): a view of `tensor` without tangent, and its tangent (None if it has none or no level
    is open)."""
    tangent = forward_ad_state.tangent_variable(tensor, lambda array: Variable(array, requires_grad=False))
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    return UnpackedDualTensor(_alias(tensor), tangent)


def keep_tangent(source, target):  # step 65
    """`target` gets `source`'s tangent at the open level, if it has one (a copy of a dual that stays dual)."""
    if forward_ad_state.open_dual_levels:
        forward_ad_state.set_tangent(target, forward_ad_state.tangent_of(source))


def _torch_dtype(dtype):
    """NumPy's dtype under PyTorch's name, for the messages: int64 -> torch.int64, bool -> torch.bool."""
    return f"torch.{dtype.name}"
