"""Step 64: forward-mode AD (tinypytorch.autograd.forward_ad) against torch.autograd.forward_ad.

Every operation of tests/operations.py: the JVP for random tangents on every operand equals torch's. The rows
without a rule are listed (UNCOVERED) and must raise a NotImplementedError naming the operation, never give a
silently wrong or zero tangent. Then the API's behaviour and its errors, with torch's messages.
"""
import contextlib

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwAD

import tinypytorch
from operations import OPERATIONS, operands
from steploader import load_step
from tinypytorch import Variable, autograd
from tinypytorch.autograd import forward_ad as fwAD

pytestmark = [pytest.mark.step64, pytest.mark.torch]

# the in-place rows: their Functions (tinypytorch.inplace) have no jvp rule yet
UNCOVERED = {"zero_ of a non-leaf": "zero_", "mul_ of a view": "mul_",
             "x[0] = w of a non-leaf": "setitem"}


def tangents_for(operation, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in operation.shapes]


def jvp_ours(operation, values, tangents):
    with fwAD.dual_level():
        duals = [fwAD.make_dual(Variable(v.copy()), t) for v, t in zip(values, tangents)]
        y = operation.ours(*duals)
        return y.data.copy(), fwAD.unpack_dual(y).tangent.data


def jvp_torch(operation, values, tangents):
    with tfwAD.dual_level():
        duals = [tfwAD.make_dual(torch.tensor(v), torch.tensor(t)) for v, t in zip(values, tangents)]
        y = operation.theirs(*duals)
        return y.detach().numpy(), tfwAD.unpack_dual(y).tangent.numpy()


@pytest.mark.parametrize("operation", [op for op in OPERATIONS if op.name not in UNCOVERED], ids=lambda op: op.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_jvp_equals_torch(operation, seed):
    values, tangents = operands(operation, seed), tangents_for(operation, seed + 10)
    (y, t), (y_torch, t_torch) = jvp_ours(operation, values, tangents), jvp_torch(operation, values, tangents)
    np.testing.assert_allclose(y, y_torch, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(t, t_torch, rtol=1e-10, atol=1e-12)
    assert np.any(t_torch != 0)  # a tangent that could be wrong


@pytest.mark.parametrize("name", sorted(UNCOVERED))
def test_uncovered_rows_raise(name):
    operation = next(op for op in OPERATIONS if op.name == name)
    with pytest.raises(NotImplementedError, match=f"forward AD with {UNCOVERED[name]}.*not been implemented yet"):
        jvp_ours(operation, operands(operation), tangents_for(operation))


def test_the_uncovered_list_is_the_gap():
    """The count the page prints: every row outside UNCOVERED has a rule, and UNCOVERED is the three in-place rows."""
    covered = [op for op in OPERATIONS if op.name not in UNCOVERED]
    assert len(covered) == len(OPERATIONS) - 3 and len(UNCOVERED) == 3


def test_an_operation_on_tensors_without_tangents_gets_none():
    with fwAD.dual_level():
        y = tinypytorch.sin(Variable(np.ones(3)))
        assert fwAD.unpack_dual(y).tangent is None


def test_a_missing_tangent_counts_as_zero():
    x, w = np.random.default_rng(0).standard_normal((2, 3)), np.random.default_rng(1).standard_normal((3, 2))
    with fwAD.dual_level():
        y = fwAD.make_dual(Variable(x), np.ones((2, 3))) @ Variable(w)
        np.testing.assert_allclose(fwAD.unpack_dual(y).tangent.data, np.ones((2, 3)) @ w, rtol=1e-14)


@pytest.mark.parametrize("other", [[0.5, -1.0, 2.0], 2.0], ids=["float64 vector", "float64 0-d"])
def test_an_operand_promoted_to_another_dtype_keeps_its_tangent(other):
    # float32 x times a float64 tensor: x is promoted (a vector) or not (a 0-d tensor does not promote it); either
    # way its tangent reaches the product, in the product's dtype
    results = []
    for fw, ad in ((torch, tfwAD), (tinypytorch, fwAD)):
        with ad.dual_level():
            x = ad.make_dual(fw.tensor([1.0, 2.0, 3.0]), fw.ones(3))
            tangent = ad.unpack_dual(x * fw.tensor(other, dtype=fw.float64)).tangent
            results.append((np.asarray(tangent.tolist()), str(tangent.dtype)))
    (expected, expected_dtype), (actual, actual_dtype) = results
    np.testing.assert_array_equal(actual, expected)
    assert actual_dtype == expected_dtype


def test_unpack_dual_is_a_namedtuple_and_the_tangent_is_gone_after_the_level():
    x = Variable(np.array([1.0, 2.0]))
    with fwAD.dual_level():
        d = fwAD.make_dual(x, np.array([3.0, 4.0]))
        primal, tangent = fwAD.unpack_dual(d)
        assert fwAD.unpack_dual(d).primal is primal or np.array_equal(fwAD.unpack_dual(d).primal.data, x.data)
        np.testing.assert_array_equal(tangent.data, [3.0, 4.0])
        assert fwAD.unpack_dual(primal).tangent is None  # the primal view carries none
        assert fwAD.unpack_dual(d.detach()).tangent is None  # detach drops the tangent, as in PyTorch
    assert fwAD.unpack_dual(d).tangent is None
    assert fwAD.unpack_dual(d, level=0).tangent is None


def test_make_dual_shares_memory_and_lets_gradients_through():
    x = Variable(np.array([1.0, 2.0]))
    with fwAD.dual_level():
        d = fwAD.make_dual(x, np.ones(2))
        (d * d).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [2.0, 4.0])
    assert np.shares_memory(d.data, x.data)


def test_inference_mode_carries_no_tangent_no_grad_does():
    with fwAD.dual_level():
        d = fwAD.make_dual(Variable(np.ones(3)), np.ones(3))
        with tinypytorch.inference_mode():
            assert fwAD.unpack_dual(d * 2.0).tangent is None
        with tinypytorch.no_grad():
            np.testing.assert_array_equal(fwAD.unpack_dual(d * 2.0).tangent.data, [2.0, 2.0, 2.0])
    with tfwAD.dual_level():  # the same in torch
        d = tfwAD.make_dual(torch.ones(3), torch.ones(3))
        with torch.inference_mode():
            assert tfwAD.unpack_dual(d * 2.0).tangent is None


# ----- bad input, torch's messages --------------------------------------------------------------------------

def torch_message(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


MAKE_DUAL_ERRORS = {  # (inside a level?, torch's call, ours)
    "outside a level": (False, lambda: tfwAD.make_dual(torch.ones(3), torch.ones(3)),
                        lambda: fwAD.make_dual(Variable(np.ones(3)), np.ones(3))),
    "of an integer tensor": (True, lambda: tfwAD.make_dual(torch.arange(3), torch.ones(3)),
                             lambda: fwAD.make_dual(Variable(np.arange(3)), np.ones(3))),
    "a tangent of the wrong shape": (True, lambda: tfwAD.make_dual(torch.ones(3), torch.ones(4)),
                                     lambda: fwAD.make_dual(Variable(np.ones(3)), np.ones(4))),
}


@pytest.mark.parametrize("case", list(MAKE_DUAL_ERRORS))
def test_make_dual_refuses_as_torch(case):
    in_level, theirs, ours = MAKE_DUAL_ERRORS[case]
    with tfwAD.dual_level() if in_level else contextlib.nullcontext():
        kind, message = torch_message(theirs)
    with fwAD.dual_level() if in_level else contextlib.nullcontext(), pytest.raises(kind) as info:
        ours()
    assert str(info.value) == message


def test_nesting_levels_is_refused():
    def nest(module):
        with module.dual_level(), module.dual_level():
            pass
    kind, message = torch_message(lambda: nest(tfwAD))
    with pytest.raises(kind) as info:
        nest(fwAD)
    assert str(info.value) == message
    with fwAD.dual_level():  # the outer level closed cleanly: a new one opens
        pass


def test_make_dual_of_a_dual_tensor():
    with tfwAD.dual_level():
        d = tfwAD.make_dual(torch.ones(3), torch.ones(3))
        kind, message = torch_message(lambda: tfwAD.make_dual(d, torch.ones(3)))
    with fwAD.dual_level(), pytest.raises(kind) as info:
        fwAD.make_dual(fwAD.make_dual(Variable(np.ones(3)), np.ones(3)), np.ones(3))
    assert str(info.value) == message


# ----- custom Functions (step 49) ---------------------------------------------------------------------------

def custom_pair(module, with_jvp):
    class Cube(module.autograd.Function if module is torch else autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            return 3 * ctx.x ** 2 * g

    if with_jvp:
        Cube.jvp = staticmethod(lambda ctx, t: 3 * ctx.x ** 2 * t)
    return Cube


def test_a_custom_function_with_jvp_equals_torch():
    x, t = np.array([0.5, -1.5, 2.0]), np.array([1.0, 2.0, -3.0])
    with fwAD.dual_level():
        ours = fwAD.unpack_dual(custom_pair(tinypytorch, True).apply(fwAD.make_dual(Variable(x), t))).tangent
        ours = ours.data
    with tfwAD.dual_level():
        d = tfwAD.make_dual(torch.tensor(x), torch.tensor(t))
        theirs = tfwAD.unpack_dual(custom_pair(torch, True).apply(d)).tangent.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-14)


def test_a_custom_function_without_jvp():
    with tfwAD.dual_level():
        d = tfwAD.make_dual(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
        kind, message = torch_message(lambda: custom_pair(torch, False).apply(d))
    with fwAD.dual_level(), pytest.raises(kind) as info:
        custom_pair(tinypytorch, False).apply(fwAD.make_dual(Variable(np.ones(3)), np.ones(3)))
    assert str(info.value) == message


# ----- gradcheck(check_forward_ad=True) ---------------------------------------------------------------------

def test_gradcheck_checks_forward_mode():
    x = Variable(np.random.default_rng(0).uniform(0.5, 2.0, (2, 3)))
    assert autograd.gradcheck(lambda a: tinypytorch.sin(a) * a, (x,), check_forward_ad=True)
    assert torch.autograd.gradcheck(lambda a: torch.sin(a) * a, (torch.tensor(x.data, requires_grad=True),),
                                    check_forward_ad=True)


def test_gradcheck_catches_a_wrong_jvp():
    class Wrong(load_step(64).Cube):  # the page's x ** 3, its backward right, its jvp wrong
        @staticmethod
        def jvp(ctx, t):
            return 2 * ctx.x ** 2 * t  # 2, not 3

    x = Variable(np.array([0.5, 1.5]))
    assert autograd.gradcheck(Wrong.apply, (x,))  # backward is right
    with pytest.raises(autograd.GradcheckError, match="forward mode mismatch"):
        autograd.gradcheck(Wrong.apply, (x,), check_forward_ad=True, check_backward_ad=False)
    assert not autograd.gradcheck(Wrong.apply, (x,), check_forward_ad=True, raise_exception=False)


@pytest.mark.parametrize("change", [lambda x, d: x.mul_(d), lambda x, d: x.add_(d), lambda x, d: x.copy_(d),
                                    lambda x, d: x.__setitem__(0, d[0]), lambda x, d: d.zero_()],
                         ids=["mul_", "add_", "copy_", "setitem", "zero_"])
def test_an_in_place_change_involving_a_tangent_is_refused_not_dropped(change):
    """torch gives x the tangent of x * d; the package has no in-place tangent rules yet: it must say so,
    never leave x with no tangent (a derivative of 0)."""
    x = tinypytorch.tensor([1.0, 2.0], dtype=tinypytorch.float64)
    with fwAD.dual_level():
        d = fwAD.make_dual(tinypytorch.tensor([3.0, 4.0], dtype=tinypytorch.float64),
                                 tinypytorch.tensor([1.0, 1.0], dtype=tinypytorch.float64))
        with pytest.raises(NotImplementedError, match="forward AD with .* not been implemented yet"):
            change(x, d)
        y = tinypytorch.tensor([1.0, 2.0], dtype=tinypytorch.float64)
        y.mul_(2.0)  # no tangent anywhere: in-place changes run as usual
        assert fwAD.unpack_dual(y).tangent is None
