"""Gradients that send 0 to a part of an operand (relu, clamp, maximum, where, max, an in-place overwrite, ...), with
infinite incoming gradients, NaN inputs and ties: the gradients, their second derivatives and the forward-mode
derivatives are torch's, run here on the same program.

torch selects (where, masked_fill) in most of these backwards, so an infinite gradient gives 0 where the mask is 0,
not inf * 0 = NaN; it multiplies in x.amax(dim) and abs, which keep that NaN. NaN inputs follow torch's comparisons:
relu passes the gradient at NaN, maximum and minimum send it to both operands, x.max() to the NaNs, abs gives 0.
"""
import math

import numpy as np
import pytest
import torch

import tinypytorch
import tinypytorch.func

pytestmark = pytest.mark.torch

inf, nan = math.inf, math.nan


def _setitem(fw, x, v):
    y = x * 1
    y[0] = v
    return y


def _copy(fw, x, v):
    y = x * 1
    y.copy_(v)
    return y


def _zero(fw, x):
    y = x * 1
    y.zero_()
    return y


def _view_add(fw, x):
    y = x * 1
    y[1:].add_(1.0)
    return y


def _view_setitem(fw, x, v):
    y = x * 1
    y[1:][0] = v
    return y


def _view_copy(fw, x, v):
    y = x * 1
    y[1:].copy_(v)
    return y


def _view_zero(fw, x):
    y = x * 1
    y[1:].zero_()
    return y


ROW = [-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, nan, inf, -inf]
A = [1.0, 2.0, 3.0, nan, nan, 1.0, inf, -inf, 0.0]
B = [2.0, 2.0, 1.0, 1.0, nan, nan, inf, inf, 0.0]
CONDITION = [True, False, True, False, True, False, True, False, True]
# (name, the program on either framework, its operands): the incoming gradients are drawn by GRADIENTS
CASES = [
    ("relu", lambda fw, x: fw.relu(x), [ROW]),
    ("clamp", lambda fw, x: fw.clamp(x, -1.0, 1.0), [ROW]),
    ("clamp(min)", lambda fw, x: x.clamp(min=0.5), [ROW]),
    ("clamp(max)", lambda fw, x: x.clamp(max=0.5), [ROW]),
    ("clamp(min > max)", lambda fw, x: x.clamp(1.0, -1.0), [ROW]),
    ("abs", lambda fw, x: x.abs(), [ROW]),
    ("maximum", lambda fw, a, b: fw.maximum(a, b), [A, B]),
    ("minimum", lambda fw, a, b: fw.minimum(a, b), [A, B]),
    ("maximum, broadcast", lambda fw, a, b: fw.maximum(a, b), [A, 1.0]),
    ("minimum of a NaN, broadcast", lambda fw, a, b: fw.minimum(a, b), [A, [nan]]),
    ("where", lambda fw, a, b: fw.where(fw.tensor(CONDITION, device=a.device), a, b), [A, B]),
    ("where, broadcast", lambda fw, a, b: fw.where(fw.tensor(CONDITION, device=a.device), a, b), [A, 4.0]),
    ("max()", lambda fw, x: x.max(), [[1.0, 3.0, 3.0, 2.0]]),
    ("max() of NaNs", lambda fw, x: x.max(), [[1.0, nan, 3.0, nan]]),
    ("min()", lambda fw, x: fw.min(x), [[[1.0, -1.0], [-1.0, 2.0]]]),
    ("min() of a NaN", lambda fw, x: x.min(), [[1.0, -inf, nan]]),
    ("max() of a 0-d", lambda fw, x: x.max(), [2.0]),
    ("amax()", lambda fw, x: x.amax(), [[1.0, 3.0, 3.0, 2.0]]),
    ("amax(-1)", lambda fw, x: x.amax(-1), [[[1.0, 3.0, 3.0], [1.0, nan, 2.0], [-inf, -inf, -inf]]]),
    ("amin(0)", lambda fw, x: x.amin(0), [[[1.0, 3.0], [1.0, nan], [2.0, -1.0]]]),
    ("max(dim)", lambda fw, x: x.max(-1).values, [[[1.0, 3.0, 3.0], [1.0, nan, 2.0]]]),
    ("x[0] = v", lambda fw, x, v: _setitem(fw, x, v), [[1.0, 2.0, 3.0], 7.0]),
    ("copy_", lambda fw, x, v: _copy(fw, x, v), [[1.0, 2.0, 3.0], [7.0, 8.0, 9.0]]),
    ("zero_", lambda fw, x: _zero(fw, x), [[1.0, 2.0, 3.0]]),
    ("a view's add_", lambda fw, x: _view_add(fw, x), [[1.0, 2.0, 3.0]]),
    ("a view's v[0] = v", lambda fw, x, v: _view_setitem(fw, x, v), [[1.0, 2.0, 3.0], 5.0]),
    ("a view's copy_", lambda fw, x, v: _view_copy(fw, x, v), [[1.0, 2.0, 3.0], [5.0, 6.0]]),
    ("a view's zero_", lambda fw, x: _view_zero(fw, x), [[1.0, 2.0, 3.0]]),
]
GRADIENTS = {"ones": lambda n: [1.0] * n, "inf": lambda n: [inf] * n,
             "mixed": lambda n: [[inf, -1.5, 0.5, -inf, 2.0][i % 5] for i in range(n)]}


def _run(fw, case, dtype, gradient, create_graph, device=None):
    """Gradients of case's program with the incoming gradient drawn by `gradient`; with create_graph, also the
    second derivatives of a weighted sum of them with respect to the operands and the incoming gradient."""
    _, program, operands = case
    dtype = getattr(fw, dtype)
    leaves = [fw.tensor(x, dtype=dtype, device=device, requires_grad=True) for x in operands]
    y = program(fw, *leaves)
    gy = fw.tensor(GRADIENTS[gradient](y.numel()), dtype=dtype, device=device).reshape(y.shape)
    gy.requires_grad_(create_graph)
    grads = fw.autograd.grad(y, leaves, gy, create_graph=create_graph, allow_unused=True)
    if not create_graph:
        return grads, ()
    total = sum((g * fw.arange(1.0, g.numel() + 1.0).reshape(g.shape)).sum() for g in grads if g is not None)
    if not isinstance(total, (fw.Tensor if fw is torch else tinypytorch.Variable)) or not total.requires_grad:
        return grads, None  # no second derivative at all, in both (see the comparison)
    return grads, fw.autograd.grad(total, [*leaves, gy], allow_unused=True)


def _assert_same(ours, theirs, what, none_is_zero=False):
    if none_is_zero and ours is None and theirs is not None and not theirs.any():
        return
    assert (ours is None) == (theirs is None), what
    if theirs is not None:
        ours = np.asarray(tinypytorch.cuda.as_numpy(ours.data))
        assert ours.dtype == theirs.detach().numpy().dtype, what
        np.testing.assert_array_equal(ours, theirs.detach().numpy(), err_msg=what)  # NaN where torch's is NaN


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_gradients_are_torchs_with_infinite_gradients_nan_and_ties(case, gradient, dtype):
    ours, _ = _run(tinypytorch, case, dtype, gradient, create_graph=False)
    theirs, _ = _run(torch, case, dtype, gradient, create_graph=False)
    for i, (g, gt) in enumerate(zip(ours, theirs)):
        _assert_same(g, gt, f"{case[0]}: the gradient of operand {i}")


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_gradients_on_the_device_backend_are_torchs_on_its_cpu(case, xp):
    """The same formulas on CuPy's arrays (the strict stand-in, or a GPU): torch's CPU values. (On its GPU torch's
    x.max() multiplies by its mask, where its CPU selects: an infinite gradient gives NaN off the maximum there.)"""
    if xp is np:
        pytest.skip("the device backends only")
    ours, _ = _run(tinypytorch, case, "float32", "mixed", create_graph=False, device="cuda")
    theirs, _ = _run(torch, case, "float32", "mixed", create_graph=False)
    for i, (g, gt) in enumerate(zip(ours, theirs)):
        assert g is None or tinypytorch.cuda.get_array_module(g.data) is xp
        _assert_same(g, gt, f"{case[0]}: the gradient of operand {i}")


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_second_derivatives_are_torchs(case, gradient):
    ours, ours2 = _run(tinypytorch, case, "float64", gradient, create_graph=True)
    theirs, theirs2 = _run(torch, case, "float64", gradient, create_graph=True)
    for i, (g, gt) in enumerate(zip(ours, theirs)):
        _assert_same(g, gt, f"{case[0]}: the gradient of operand {i}")
    assert (ours2 is None) == (theirs2 is None)
    # left out: the second derivative of relu and abs with respect to their input is None here, zeros in torch
    # (its formulas read the input or the result as tensors of the graph, whose derivative there is 0)
    for i, (g, gt) in enumerate(zip(ours2 or (), theirs2 or ())):
        _assert_same(g, gt, f"{case[0]}: the second derivative with respect to input {i} (the last: the gradient)",
                     none_is_zero=case[0] in ("relu", "abs"))


JVP_CASES = [case for case in CASES if case[0] in (
    "relu", "clamp", "clamp(min)", "abs", "maximum", "minimum", "where", "max()", "max() of NaNs", "min() of a NaN",
    "amax()", "amax(-1)", "amin(0)")]


@pytest.mark.parametrize("gradient", sorted(GRADIENTS))
@pytest.mark.parametrize("case", JVP_CASES, ids=[case[0] for case in JVP_CASES])
def test_forward_mode_derivatives_are_torchs(case, gradient):
    """jvp, whose tangents play the incoming gradients' part: torch's amax selects there and its max(x) multiplies,
    the other way round from their backwards."""
    name, program, operands = case
    if name in ("maximum", "minimum") and gradient != "ones":
        # left out: torch's tangent of maximum is t1 + share * (t0 - t1), NaN for two equal infinite tangents where
        # the operands tie (inf - inf) where the package's share0 * t0 + share1 * t1 gives inf: finite tangents only
        pytest.skip("infinite tangents of maximum and minimum")
    results = []
    for fw, func in ((tinypytorch, tinypytorch.func), (torch, torch.func)):
        primals = tuple(fw.tensor(x, dtype=fw.float64) for x in operands)
        tangents = tuple(fw.tensor(GRADIENTS[gradient](p.numel()), dtype=fw.float64).reshape(p.shape)
                         for p in primals)
        results.append(func.jvp(lambda *xs, fw=fw: program(fw, *xs), primals, tangents)[1])
    _assert_same(*results, f"{name}: the tangent")
