"""Forward over reverse (step 65): a forward-mode pass through a backward pass. Saved tensors keep their tangents
and backward formulas run on Variables under a dual level, so that jacfwd(jacrev(f)), hessian and a jvp of a
gradient give PyTorch's second derivatives, where they used to give zeros. And forward mode's edges: a dual of a
dual refused, unpack_dual handing back the tangent it was given, a tangent keeping its own dtype."""
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwAD
from hypothesis import given
from hypothesis.extra.numpy import arrays

import tinypytorch as tp
from reference import assert_close_to_torch, floats
from tinypytorch import func
from tinypytorch.autograd import forward_ad as fwAD

# torch 2.13's forward AD loads its rules with the deprecated torch.jit.script: torch's warning, not the test's
pytestmark = [pytest.mark.step65, pytest.mark.torch, pytest.mark.filterwarnings("ignore::DeprecationWarning:torch")]

# Functions written once for both frameworks: `fw` is tinypytorch or torch.
FUNCTIONS = {
    "sum of sin": lambda fw, x: fw.sin(x).sum(),
    "x sin x": lambda fw, x: (fw.sin(x) * x).sum(),
    "exp of a product": lambda fw, x: fw.exp(x * x[0]).sum(),
    "tanh and a quotient": lambda fw, x: (fw.tanh(x) / (1.0 + x * x)).sum(),
    "softmax entropy": lambda fw, x: -(fw.softmax(x, 0) * fw.log_softmax(x, 0)).sum(),
    "a matrix product": lambda fw, x: (fw.tanh(x.reshape(1, -1) @ fw.ones(x.shape[0], 2, dtype=fw.float64))).sum(),
    "sqrt of a norm": lambda fw, x: fw.sqrt((x * x).sum() + 1.0),
    "pow with a tensor exponent": lambda fw, x: (fw.abs(x) + 0.5).pow(x).sum(),
}

values = arrays(np.float64, 3, elements=floats(-1.5, 1.5))


def ours(f):
    return lambda x: f(tp, x)


def theirs(f):
    return lambda x: f(torch, x)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@given(x=values)
def test_jacfwd_of_jacrev_is_torchs_hessian(name, x):
    f = FUNCTIONS[name]
    got = func.jacfwd(func.jacrev(ours(f)))(tp.tensor(x, dtype=tp.float64))
    expected = torch.func.jacfwd(torch.func.jacrev(theirs(f)))(torch.tensor(x))
    assert_close_to_torch(got.data, expected.numpy(), name)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_hessian_is_forward_over_reverse_and_equals_reverse_over_reverse(name):
    f, x = FUNCTIONS[name], np.array([0.3, -0.7, 1.1])
    forward = func.hessian(ours(f))(tp.tensor(x, dtype=tp.float64)).data
    reverse = func.jacrev(func.jacrev(ours(f)))(tp.tensor(x, dtype=tp.float64)).data
    assert_close_to_torch(forward, torch.func.hessian(theirs(f))(torch.tensor(x)).numpy(), name)
    assert_close_to_torch(forward, reverse, name)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_jvp_of_a_gradient_is_a_hessian_vector_product(name):
    f, x, v = FUNCTIONS[name], np.array([0.3, -0.7, 1.1]), np.array([1.0, -2.0, 0.5])

    def gradient(a):
        return tp.autograd.grad(f(tp, a), a)[0]

    def gradient_t(a):
        return torch.autograd.grad(f(torch, a), a, create_graph=True)[0]

    with fwAD.dual_level():
        leaf = tp.tensor(x, dtype=tp.float64, requires_grad=True)
        g = gradient(fwAD.make_dual(leaf, tp.tensor(v, dtype=tp.float64)))
        hv = fwAD.unpack_dual(g).tangent
    with tfwAD.dual_level():
        leaf_t = torch.tensor(x, requires_grad=True)
        hv_t = tfwAD.unpack_dual(gradient_t(tfwAD.make_dual(leaf_t, torch.tensor(v)))).tangent
    assert hv is not None, name  # it used to be None: a zero Hessian-vector product
    assert_close_to_torch(hv.data, hv_t.detach().numpy(), name)


def test_the_tangent_survives_a_saved_output_whose_variable_is_gone():
    """exp saves its output; here the output Variable dies before backward, and its tangent must live on in the
    saved tensor, or the second derivative through it is lost."""
    x = np.array([0.5, -1.0])
    with fwAD.dual_level():
        leaf = tp.tensor(x, dtype=tp.float64, requires_grad=True)
        loss = tp.exp(fwAD.make_dual(leaf, tp.ones(2, dtype=tp.float64)) * 2.0).sum()  # exp's output: gone
        g = tp.autograd.grad(loss, leaf)[0]
        hv = fwAD.unpack_dual(g).tangent
    np.testing.assert_allclose(hv.data, 4.0 * np.exp(2.0 * x), rtol=1e-14)  # d/dx 2 exp(2x) = 4 exp(2x)


def test_a_dual_tangent_is_refused_in_torchs_words():
    for fw, forward_ad in ((tp, fwAD), (torch, tfwAD)):
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(fw.ones(3), fw.ones(3))
            with pytest.raises(RuntimeError, match="Setting a forward grad that itself has a forward gradient at "
                                                   "the same level0 is not supported"):
                forward_ad.make_dual(fw.ones(3), dual)


def test_unpack_dual_hands_back_the_tangent_it_was_given_and_the_same_one_twice():
    for fw, forward_ad in ((tp, fwAD), (torch, tfwAD)):
        with forward_ad.dual_level():
            tangent = fw.ones(3)
            dual = forward_ad.make_dual(fw.ones(3), tangent)
            assert forward_ad.unpack_dual(dual).tangent is tangent
            y = dual * 2.0
            assert forward_ad.unpack_dual(y).tangent is forward_ad.unpack_dual(y).tangent


@pytest.mark.parametrize("primal, tangent", [("float32", "float64"), ("float64", "float32"), ("float32", "float32")])
def test_a_tangent_keeps_its_dtype_through_the_operations_as_torchs(primal, tangent):
    for fw, forward_ad in ((tp, fwAD), (torch, tfwAD)):
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(fw.ones(3, dtype=getattr(fw, primal)), fw.ones(3, dtype=getattr(fw, tangent)))
            dtypes = [str(forward_ad.unpack_dual(y).tangent.dtype)
                      for y in (dual, dual * 2.0, fw.exp(dual), dual.to(fw.float16))]
        if fw is tp:
            ours_dtypes = dtypes
    assert ours_dtypes == dtypes
