"""Every differentiable operation of the package (tests/operations.py) against PyTorch: values,
first derivatives with respect to every operand, second derivatives of a scalar of the gradients
with respect to every operand (all pairs), third derivatives, and dtypes (float32 stays float32).

Operands are drawn over each operation's whole domain (negative bases for integer powers, values
near zero where legal). Tolerances: see tests/reference.py, "How a tolerance is chosen".
"""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from operations import OPERATIONS, operands
from reference import assert_close_to_torch, floats
from tinypytorch import Variable, autograd, cuda
from tinypytorch import functions as F
from tinypytorch.autograd import engine

pytestmark = [pytest.mark.torch]


def drawn_operands(operation, data, dtype=np.float64):
    low, high = operation.domain
    return [data.draw(arrays(dtype, shape, elements=floats(low, high, width=64 if dtype == np.float64 else 32)))
            for shape in operation.shapes]


def leaves(values, dtype=np.float64):
    ours = [Variable(v.copy().astype(dtype)) for v in values]
    theirs = [torch.tensor(v.astype(dtype), requires_grad=True) for v in values]
    return ours, theirs


def weights(shape, seed, dtype=np.float64):
    """Fixed random weights: a scalar sum(w * y) weighs every element of y differently."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape).astype(dtype)


def derivatives(m, grad, output, inputs, order, seed):
    """[y, first derivatives, second, ..., up to `order`]: each level is the gradient, with respect to every
    input, of sum(w * g * g) over the previous level's g, w fixed random weights. The square makes the
    gradient flowing into each level depend on the inputs, so the backward of every backward method is
    exercised (with sum(w * g) it would receive constants only), and w makes no level a plain sum."""
    levels = [[output]]
    for k in range(order):
        current = [g for g in levels[-1] if g is not None and g.requires_grad]
        if not current:
            levels.append([None] * len(inputs))
            continue
        scalar = sum((g * g * m(weights(tuple(g.shape), seed + k * 10 + i, np.dtype(str(g.dtype).split(".")[-1]))))
                     .sum() for i, g in enumerate(current))
        levels.append(list(grad(scalar, inputs)))
    return levels


def ours_grad(y, xs):
    return autograd.grad(y, xs, create_graph=True, allow_unused=True)


def torch_grad(y, xs):
    return torch.autograd.grad(y, xs, create_graph=True, allow_unused=True)


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
@given(data=st.data())
def test_values_and_first_second_third_derivatives_equal_torch(operation, data):
    values = drawn_operands(operation, data)
    xs, ts = leaves(values)
    ours = derivatives(lambda w: Variable(w, requires_grad=False), ours_grad, operation.ours(*xs), xs, 3, seed=1)
    twin = operation.theirs_derivatives or operation.theirs
    theirs = derivatives(torch.tensor, torch_grad, twin(*ts), ts, 3, seed=1)
    for order, (level, level_t) in enumerate(zip(ours, theirs)):
        for i, (g, gt) in enumerate(zip(level, level_t)):
            where = f"{operation.name}: derivative of order {order}, operand {i}"
            if _zero_in_torch(g, gt, where, g.data if g is not None else None):
                continue
            assert g is not None, where
            if order and np.all(g.data == 0) and _cancellation_noise(gt, theirs[order - 1]):
                continue  # zero by structure here (cross is bilinear); torch's terms cancel to within rounding
            assert_close_to_torch(g.data, gt.detach().numpy(), where)


def _zero_in_torch(g, gt, where, ours):
    """Where torch's derivative is None or zeros, check ours (array `ours`, or None) and say so. None: nothing
    depends on the operand, and ours must be None or exact zeros too (relu's second derivative). Zeros: ours
    None, or zeros within the comparison's tolerance, since torch's zeros may be rounding that cancels exactly
    (the variance of a row of equal elements: torch's per-row sums give 0, the package's mean rounds, and 1e-106
    remains)."""
    if gt is None:
        assert g is None or np.all(ours == 0), where
        return True
    if float(gt.detach().abs().max()) != 0.0:
        return False
    if g is not None:
        assert_close_to_torch(ours, gt.detach().numpy(), where)
    return True


def _cancellation_noise(gt, lower):
    """Whether torch's derivative is rounding noise around zero: within the test's relative tolerance (1e-10) of
    the derivatives one order lower, whose terms cancelled."""
    scale = max([float(t.detach().abs().max()) for t in lower if t is not None and t.numel()] + [1.0])
    return float(gt.detach().abs().max()) <= 1e-10 * scale


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_every_operation_on_each_backend_equals_torch(operation, xp):
    """The table on each backend of the xp fixture: NumPy, the strict stand-in for CuPy (so every operation's
    device path runs in CI) and CuPy on a GPU. Values and derivatives to the third order equal torch's, and
    every result stays on the backend it was computed on."""
    values = operands(operation)
    xs = [Variable(xp.asarray(v)) for v in values]
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    theirs_fn = operation.theirs if xp is np or operation.theirs_on_device is None else operation.theirs_on_device
    theirs_fn = operation.theirs_derivatives or theirs_fn
    ours = derivatives(lambda w: Variable(xp.asarray(w), requires_grad=False), ours_grad, operation.ours(*xs), xs, 3,
                       seed=1)
    theirs = derivatives(torch.tensor, torch_grad, theirs_fn(*ts), ts, 3, seed=1)
    for order, (level, level_t) in enumerate(zip(ours, theirs)):
        for i, (g, gt) in enumerate(zip(level, level_t)):
            where = f"{operation.name} on {xp.__name__}: derivative of order {order}, operand {i}"
            if g is not None:
                assert cuda.get_array_module(g.data) is xp, where
            if _zero_in_torch(g, gt, where, None if g is None else cuda.as_numpy(g.data)):
                continue
            assert g is not None, where
            assert_close_to_torch(cuda.as_numpy(g.data), gt.detach().numpy(), where)


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_float32_operands_give_float32_values_and_gradients_as_in_torch(operation, monkeypatch):
    # Every backward must compute in float32 itself, as torch's do: the engine's cast of a gradient to its
    # input's dtype (step 43) is for inputs that met float64, and would hide a backward that promotes.
    casts = []
    monkeypatch.setattr(engine, "astype", lambda g, dtype: casts.append((g.dtype, dtype)) or F.astype(g, dtype))
    values = [v.astype(np.float32) for v in
              [np.random.default_rng(0).uniform(*operation.domain, shape) for shape in operation.shapes]]
    xs, ts = leaves(values, np.float32)
    y, yt = operation.ours(*xs), operation.theirs(*ts)
    assert y.dtype == np.float32 and yt.dtype == torch.float32
    gs = autograd.grad((y * Variable(weights(y.shape, 0, np.float32), requires_grad=False)).sum(), xs,
                       create_graph=True, allow_unused=True)
    gts = torch.autograd.grad((yt * torch.tensor(weights(tuple(yt.shape), 0, np.float32))).sum(), ts,
                              create_graph=True, allow_unused=True)
    for g, gt in zip(gs, gts):
        if gt is None:
            continue
        assert g.dtype == np.float32, operation.name
        np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=2e-5, atol=2e-5, err_msg=operation.name)
    assert casts == [], f"{operation.name}: a backward returned {casts[0][0]} for a {casts[0][1]} input"


def test_a_float32_input_that_met_float64_gets_a_float32_gradient_like_torch():
    # float32 * float64 array is float64 in both; the engine casts the gradient back to the input's dtype
    x, c = Variable(np.array([1.5, -2.0], dtype=np.float32)), np.array([0.25, 4.0])
    xt = torch.tensor([1.5, -2.0], dtype=torch.float32, requires_grad=True)
    (x * c).sum().backward()
    (xt * torch.tensor(c)).sum().backward()
    assert x.grad.dtype == np.float32 and xt.grad.dtype == torch.float32
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
