"""nn.functional.layer_norm against torch.nn.functional.layer_norm (float64): values, the gradients with respect to
input, weight and bias, second derivatives (create_graph), gradcheck and gradgradcheck, and PyTorch's refusals.

Tolerance: rtol 1e-12 and atol 1e-13 times the largest expected magnitude. PyTorch sums the mean and variance in
another order (a cascade of partial sums) than NumPy's pairwise sum, and each gradient element is a difference of
terms as large as the largest one (g - mean(g) - x_hat * mean(g x_hat)), so an element that cancels to near zero
carries an absolute error of a few ulps of its terms, not of itself: an atol on the scale, not a looser rtol.
Where a slice's values are nearly equal (one element, say: x_hat is exactly 0, torch's of order 1e-13), an ulp of
x in the mean is amplified by rstd = 1/sqrt(var + eps), up to 1/sqrt(eps) ~ 316: the random cases take
max(rstd) times the largest of |x|, |dL/dy|, |weight| as the scale of every comparison.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch
from tinypytorch import Variable, cuda
from tinypytorch.autograd import grad, gradcheck, gradgradcheck
from tinypytorch.nn import functional as NF

pytestmark = [pytest.mark.torch]


def assert_close(actual, expected, what, scale=1.0):
    expected = np.asarray(expected)
    scale = max(scale, float(np.abs(expected).max())) if expected.size else scale
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-12, atol=1e-13 * scale, err_msg=what)


def arrays(shape, normalized_shape, seed):
    rng = np.random.default_rng(seed)
    return (3.0 * rng.normal(size=shape) + 1.0, rng.normal(size=normalized_shape), rng.normal(size=normalized_shape),
            rng.normal(size=shape))


def ours(x, w, b, gy, normalized_shape, eps):
    xs = [Variable(a.copy()) if a is not None else None for a in (x, w, b)]
    y = NF.layer_norm(xs[0], normalized_shape, xs[1], xs[2], eps)
    (y * Variable(gy, requires_grad=False)).sum().backward()
    return y.data, [None if v is None else v.grad.data for v in xs]


def theirs(x, w, b, gy, normalized_shape, eps):
    ts = [torch.tensor(a, requires_grad=True) if a is not None else None for a in (x, w, b)]
    y = TF.layer_norm(ts[0], list(normalized_shape), ts[1], ts[2], eps)
    (y * torch.tensor(gy)).sum().backward()
    return y.detach().numpy(), [None if t is None else t.grad.numpy() for t in ts]


CASES = [((6, 5), (5,)), ((3, 4, 5), (4, 5)), ((2, 3, 4), (4,)), ((7,), (7,)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("affine", ["none", "weight and bias", "weight", "bias"])
@pytest.mark.parametrize(("shape", "normalized_shape"), CASES)
def test_values_and_gradients_equal_torchs(shape, normalized_shape, affine):
    x, w, b, gy = arrays(shape, normalized_shape, seed=len(shape) + len(normalized_shape))
    w = w if "weight" in affine else None
    b = b if "bias" in affine else None
    (y, grads), (yt, grads_t) = (f(x, w, b, gy, normalized_shape, 1e-5) for f in (ours, theirs))
    assert_close(y, yt, "output")
    for name, g, gt in zip(("input", "weight", "bias"), grads, grads_t, strict=True):
        assert (g is None) == (gt is None), name
        if g is not None:
            assert_close(g, gt, f"gradient with respect to {name}")


@settings(max_examples=30, deadline=None)
@given(lead=st.lists(st.integers(1, 4), max_size=2), normalized=st.lists(st.integers(1, 5), min_size=1, max_size=2),
       seed=st.integers(0, 2**16), eps=st.sampled_from([1e-5, 1e-3, 0.5]))
def test_random_shapes_equal_torchs(lead, normalized, seed, eps):
    normalized_shape = tuple(normalized)
    x, w, b, gy = arrays(tuple(lead) + normalized_shape, normalized_shape, seed)
    (y, grads), (yt, grads_t) = (f(x, w, b, gy, normalized_shape, eps) for f in (ours, theirs))
    rstd = 1 / np.sqrt(x.var(axis=tuple(range(len(lead), x.ndim))) + eps)
    scale = rstd.max() * max(1.0, *(float(np.abs(a).max()) for a in (x, gy, w)))
    assert_close(y, yt, "output", scale=scale)
    for g, gt in zip(grads, grads_t, strict=True):
        assert_close(g, gt, "gradient", scale=scale)


def test_list_normalized_shape_and_array_input():
    x, w, b, _ = arrays((3, 4), (4,), seed=1)
    expected = TF.layer_norm(torch.tensor(x), [4], torch.tensor(w), torch.tensor(b)).numpy()
    assert_close(NF.layer_norm(x, [4], Variable(w), Variable(b)).data, expected, "array input, list shape")


def test_the_graph_is_one_node_named_as_torchs():
    x, w, b, _ = arrays((3, 4), (4,), seed=2)
    y = NF.layer_norm(Variable(x), (4,), Variable(w), Variable(b))
    yt = TF.layer_norm(torch.tensor(x, requires_grad=True), (4,), torch.tensor(w), torch.tensor(b))
    assert y.creator.name() == yt.grad_fn.name() == "NativeLayerNormBackward0"


@pytest.mark.parametrize("affine", [True, False])
def test_second_derivatives_equal_torchs(affine):
    """d/d(x, w) of <dL/dx, v>, through create_graph: the backward formula is differentiable."""
    x, w, b, gy = arrays((3, 4), (4,), seed=3)
    v = np.random.default_rng(4).normal(size=(3, 4))
    xs = [Variable(a.copy()) for a in (x, w, b)]
    y = NF.layer_norm(xs[0], (4,), *(xs[1:] if affine else (None, None)))
    (gx,) = grad([(y * Variable(gy, requires_grad=False)).sum()], [xs[0]], create_graph=True)
    (gx * Variable(v, requires_grad=False)).sum().backward()
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    yt = TF.layer_norm(ts[0], (4,), *(ts[1:] if affine else (None, None)))
    (gxt,) = torch.autograd.grad((yt * torch.tensor(gy)).sum(), ts[0], create_graph=True)
    (gxt * torch.tensor(v)).sum().backward()
    assert_close(gx.data, gxt.detach().numpy(), "first derivative")
    assert_close(xs[0].grad.data, ts[0].grad.numpy(), "second derivative with respect to input")
    if affine:
        assert_close(xs[1].grad.data, ts[1].grad.numpy(), "second derivative with respect to weight")
        assert xs[2].grad is None and ts[2].grad is None  # dL/dx does not depend on the bias


@pytest.mark.parametrize(("shape", "normalized_shape"), [((3, 4), (4,)), ((2, 2, 3), (2, 3))])
def test_gradcheck_and_gradgradcheck(shape, normalized_shape):
    x, w, b, _ = arrays(shape, normalized_shape, seed=5)
    for inputs, fn in (
        ((Variable(x), Variable(w), Variable(b)), lambda x, w, b: NF.layer_norm(x, normalized_shape, w, b)),
        ((Variable(x),), lambda x: NF.layer_norm(x, normalized_shape, eps=0.1)),
        ((Variable(x), Variable(w)), lambda x, w: NF.layer_norm(x, normalized_shape, weight=w)),
    ):
        assert gradcheck(fn, inputs)
        assert gradgradcheck(fn, inputs)


def test_bad_input_as_torch_refuses_it():
    """Torch raises RuntimeError for each; a wrong shape is a ValueError in the package (ARCHITECTURE.md)."""
    x = Variable(np.zeros((2, 4)))
    cases = [
        (((3,),), r"layer_norm: given normalized_shape=\[3\], expected input with shape \[\*, 3\], "
                  r"but got input of size\[2, 4\]"),
        (((2, 4, 1),), r"expected input with shape \[\*, 2, 4, 1\]"),
        (((),), "expected normalized_shape to be at least 1-dimensional"),
        (((4,), Variable(np.ones(3))), r"expected weight to be of same shape as normalized_shape, but got weight of "
                                       r"shape \[3\] and normalized_shape = \[4\]"),
        (((4,), None, Variable(np.ones(3))), r"expected bias to be of same shape as normalized_shape"),
    ]
    for args, message in cases:
        with pytest.raises(RuntimeError):  # what torch does with the same call
            TF.layer_norm(torch.zeros(2, 4, dtype=torch.float64), *[torch.tensor(a.data) if isinstance(a, Variable)
                                                                    else a for a in args])
        with pytest.raises(ValueError, match=message):
            NF.layer_norm(x, *args)
    with pytest.raises(TypeError):  # torch: "argument 'normalized_shape' must be tuple of ints, not int"
        TF.layer_norm(torch.zeros(2, 4), 4)
    with pytest.raises(TypeError, match="layer_norm: normalized_shape must be a tuple or list of ints, got 4"):
        NF.layer_norm(x, 4)


def test_on_every_backend(xp):
    """The same values and gradients where the data lives (strict: the CuPy stand-in), as torch's on the CPU."""
    x, w, b, gy = arrays((3, 4), (4,), seed=6)
    xs = [Variable(xp.asarray(a)) for a in (x, w, b)]
    y = NF.layer_norm(xs[0], (4,), xs[1], xs[2])
    (y * Variable(xp.asarray(gy), requires_grad=False)).sum().backward()
    yt, grads_t = theirs(x, w, b, gy, (4,), 1e-5)
    assert cuda.get_array_module(y.data) is xp
    assert_close(cuda.as_numpy(y.data), yt, "output")
    for v, gt in zip(xs, grads_t, strict=True):
        assert_close(cuda.as_numpy(v.grad.data), gt, "gradient")


DTYPES = ["float16", "float32", "float64"]


@pytest.mark.parametrize("parameter_dtype", DTYPES)
@pytest.mark.parametrize("input_dtype", DTYPES)
def test_dtypes_of_input_and_parameters_as_torchs_cpu_rule(input_dtype, parameter_dtype):
    # the parameters have the input's dtype, or the input is float16 and they are float32; otherwise torch's error
    x, w, b, gy = arrays((2, 3), (3,), seed=4)
    results = []
    for fw, layer_norm in ((torch, TF.layer_norm), (tinypytorch, NF.layer_norm)):
        xs = [fw.tensor(a, dtype=getattr(fw, d), requires_grad=True)
              for a, d in ((x, input_dtype), (w, parameter_dtype), (b, parameter_dtype))]
        try:
            y = layer_norm(xs[0], [3], xs[1], xs[2])
        except RuntimeError as error:
            results.append(str(error))
            continue
        (y * fw.tensor(gy, dtype=y.dtype)).sum().backward()
        results.append([(str(t.dtype), np.array(t.tolist())) for t in [y.detach()] + [
            v.grad for v in xs]])
    expected, actual = results
    if isinstance(expected, str):
        assert actual == expected
        return
    for (dtype, e), (our_dtype, a) in zip(expected, actual):
        assert our_dtype == dtype
        # float16 is computed in float32 in both and rounded once to float16: a float16 ulp or two apart, where
        # torch's backward of float16 parameters accumulates their gradients in float16; a float32 gradient of a
        # float16 input carries float16's rounding too
        tolerance = {"torch.float16": 4e-3, "torch.float32": 1e-5, "torch.float64": 1e-12}[
            "torch.float16" if "torch.float16" in (dtype, f"torch.{input_dtype}") else dtype]
        np.testing.assert_allclose(a, e, rtol=tolerance, atol=tolerance * max(1.0, float(np.abs(e).max())))


def test_float16_is_computed_in_float32_and_rounded_once():
    # the exact gradient (float64) rounded once to float16 is what float16 input and float32 parameters give
    x, w, b, gy = arrays((4, 5), (5,), seed=5)
    x16 = x.astype(np.float16)
    exact = ours(x16.astype(np.float64), w, b, gy, (5,), 1e-5)
    xs = [tinypytorch.tensor(x16, requires_grad=True), tinypytorch.tensor(w, dtype=tinypytorch.float32,
                                                                          requires_grad=True)]
    y = NF.layer_norm(xs[0], (5,), xs[1], tinypytorch.tensor(b, dtype=tinypytorch.float32))
    (y * tinypytorch.tensor(gy, dtype=tinypytorch.float16)).sum().backward()
    assert y.dtype == xs[0].grad.dtype == np.float16
    np.testing.assert_allclose(y.data, exact[0].astype(np.float16), rtol=1e-3, atol=2e-3)
    np.testing.assert_allclose(xs[0].grad.data, exact[1][0].astype(np.float16), rtol=1e-3, atol=4e-3)
