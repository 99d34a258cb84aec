"""Convolution and pooling (tinypytorch.convolution, nn.Conv2d and the pooling modules) against PyTorch.

Every operation against torch.nn.functional, in float64, on fixed cases and on shapes hypothesis draws: values, first
derivatives with respect to every operand, second derivatives (torch.autograd.grad with create_graph=True). Max
pooling on inputs with ties (the gradient goes where torch sends it), NaN and -inf; ceil_mode's windows; forward-mode
tangents against torch.autograd.forward_ad; the package's own gradcheck and gradgradcheck; each operation on every
backend of the xp fixture; every refusal with torch's exception type (and words where the package repeats them); the
modules' printouts, parameters, state-dict keys and initial values; and a small CNN with torch's weights, whose
outputs and gradients are torch's. Expected values come from torch, or from maths worked out here.
"""
import math

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwAD
import torch.nn.functional as TF
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch as tp
from reference import assert_close_to_torch, floats
from tinypytorch import Variable, autograd, cuda
from tinypytorch import nn
from tinypytorch.autograd import forward_ad as fwAD
from tinypytorch.nn import functional as F

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:Using padding='same'")]

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.normal(size=shape)


# ----- derivatives of both frameworks ------------------------------------------------------------------------------

def weights(shape, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape)


def levels(grad, make, output, inputs, order):
    """[[y], first derivatives, ..., derivatives of `order`]: each level the gradient, with respect to every input, of
    sum(w g g) over the level before (fixed random w), so that every level depends on the inputs, linear operations'
    too (tests/test_operations.py does the same)."""
    found = [[output]]
    for k in range(order):
        current = [g for g in found[-1] if g is not None and g.requires_grad]
        if not current:
            found.append([None] * len(inputs))
            continue
        scalar = sum((g * g * make(weights(tuple(g.shape), 10 * k + i))).sum() for i, g in enumerate(current))
        found.append(list(grad(scalar, inputs)))
    return found


def ours_levels(fn, arrays_, order=2, xp=np):
    xs = [Variable(xp.asarray(a)) for a in arrays_]
    y = fn(*xs)
    y = y[0] if isinstance(y, tuple) else y
    return levels(lambda s, v: autograd.grad(s, v, create_graph=True, allow_unused=True),
                  lambda w: Variable(xp.asarray(w), requires_grad=False), y, xs, order)


def torch_levels(fn, arrays_, order=2):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays_]
    y = fn(*ts)
    y = y[0] if isinstance(y, tuple) else y
    return levels(lambda s, v: torch.autograd.grad(s, v, create_graph=True, allow_unused=True), torch.tensor, y, ts,
                  order)


def assert_same_derivatives(ours_fn, theirs_fn, arrays_, what, order=2, xp=np):
    """Values and derivatives to `order` of ours_fn (on arrays of module xp) equal theirs_fn's (torch, float64)."""
    ours, theirs = ours_levels(ours_fn, arrays_, order, xp), torch_levels(theirs_fn, arrays_, order)
    assert ours[0][0].shape == tuple(theirs[0][0].shape), what
    for k, (level, level_t) in enumerate(zip(ours, theirs)):
        for i, (g, gt) in enumerate(zip(level, level_t)):
            where = f"{what}: derivative of order {k}, operand {i}"
            if g is not None:
                assert cuda.get_array_module(g.data) is xp, where
            if gt is None or not bool(gt.detach().any()):
                assert g is None or not np.any(cuda.as_numpy(g.data)), where
                continue
            assert g is not None, where
            assert_close_to_torch(cuda.as_numpy(g.data), gt.detach().numpy(), where)


# ----- unfold and fold ---------------------------------------------------------------------------------------------

UNFOLD_CASES = [  # (input shape, kernel_size, dilation, padding, stride)
    ((2, 3, 5, 6), 2, 1, 0, 1),
    ((2, 3, 5, 6), (2, 3), (1, 2), 1, (2, 1)),
    ((1, 2, 7, 4), (3, 1), 2, (2, 0), (1, 2)),
    ((2, 1, 4, 4), 4, 1, 0, 1),  # one window
    ((2, 2, 3, 3), 1, 1, 2, 3),  # a 1 x 1 kernel, wide padding
    ((3, 5, 6), (2, 2), 1, 1, 2),  # an image without a batch
    ((0, 2, 4, 4), 2, 1, 0, 1),  # an empty batch
]


@pytest.mark.parametrize("shape, kernel, dilation, padding, stride", UNFOLD_CASES)
def test_unfold_and_fold_equal_torchs_to_the_second_derivative(shape, kernel, dilation, padding, stride):
    args = {"kernel_size": kernel, "dilation": dilation, "padding": padding, "stride": stride}
    x = normal(*shape)
    assert_same_derivatives(lambda a: F.unfold(a, **args), lambda a: TF.unfold(a, **args), [x], f"unfold {args}")
    columns = normal(*TF.unfold(torch.tensor(x), **args).shape)
    size = shape[-2:]
    assert_same_derivatives(lambda c: F.fold(c, size, **args), lambda c: TF.fold(c, size, **args), [columns],
                            f"fold {args}")


@st.composite
def unfold_cases(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    assume(all(size[i] + 2 * padding[i] >= dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1)))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + size
    x = draw(arrays(np.float64, shape, elements=floats(-2.0, 2.0)))
    return x, {"kernel_size": kernel, "dilation": dilation, "padding": padding, "stride": stride}


@given(unfold_cases())
def test_unfold_and_fold_of_drawn_shapes_equal_torchs(case):
    x, args = case
    assert_same_derivatives(lambda a: F.unfold(a, **args), lambda a: TF.unfold(a, **args), [x], f"unfold {args}")
    columns = TF.unfold(torch.tensor(x), **args).numpy() * 0.5 - 0.25
    assert_same_derivatives(lambda c: F.fold(c, x.shape[-2:], **args), lambda c: TF.fold(c, x.shape[-2:], **args),
                            [columns], f"fold {args}")


def test_fold_of_unfold_counts_the_windows_over_each_element():
    """Maths: fold(unfold(x)) is x times the number of windows that cover each element (PyTorch's docs), counted
    here window by window."""
    x = Variable(normal(2, 3, 5, 6))
    args = {"kernel_size": (2, 3), "padding": 1, "stride": (1, 2)}
    covers = np.zeros((5 + 2, 6 + 2))  # the padded image
    for top in range(0, 7 - 2 + 1, 1):
        for left in range(0, 8 - 3 + 1, 2):
            covers[top:top + 2, left:left + 3] += 1
    covers = covers[1:-1, 1:-1]
    np.testing.assert_allclose(F.fold(F.unfold(x, **args), (5, 6), **args).data, x.data * covers, rtol=1e-15)


# ----- conv2d ------------------------------------------------------------------------------------------------------

CONV_CASES = [  # (input shape, weight shape, bias, stride, padding, dilation, groups)
    ((2, 3, 6, 7), (4, 3, 3, 3), True, 1, 0, 1, 1),
    ((2, 3, 6, 7), (4, 3, 3, 2), True, (2, 1), (1, 2), (1, 2), 1),
    ((2, 4, 5, 6), (6, 2, 3, 2), True, 2, 1, 1, 2),
    ((1, 6, 5, 5), (6, 1, 3, 3), False, 1, 1, 1, 6),  # depthwise
    ((2, 4, 5, 6), (4, 4, 1, 1), True, 1, 0, 1, 1),  # a 1 x 1 convolution: a matrix product per pixel
    ((2, 3, 6, 7), (4, 3, 3, 3), True, 1, "same", 1, 1),
    ((2, 4, 6, 7), (6, 2, 2, 3), False, 1, "same", (2, 1), 2),  # "same" with an odd total: one cell more behind
    ((2, 3, 6, 7), (4, 3, 3, 3), True, (1, 2), "valid", 1, 1),
    ((3, 6, 7), (4, 3, 2, 2), True, 1, 1, 1, 1),  # an image without a batch
    ((0, 3, 6, 7), (4, 3, 2, 2), True, 1, 0, 1, 1),  # an empty batch
    ((2, 3, 3, 3), (2, 3, 5, 5), True, 1, 1, 1, 1),  # the kernel as large as the padded input: one output
]


@pytest.mark.parametrize("x_shape, w_shape, bias, stride, padding, dilation, groups", CONV_CASES)
def test_conv2d_equals_torchs_to_the_second_derivative(x_shape, w_shape, bias, stride, padding, dilation, groups):
    args = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    values = [normal(*x_shape), normal(*w_shape)] + ([normal(w_shape[0])] if bias else [])
    assert_same_derivatives(lambda *v: F.conv2d(*v, **args), lambda *v: TF.conv2d(*v, **args), values,
                            f"conv2d {x_shape} {w_shape} {args}")


@st.composite
def conv_cases(draw):
    groups = draw(st.integers(1, 3))
    in_channels, out_channels = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = draw(st.one_of(st.integers(0, 2), st.tuples(st.integers(0, 2), st.integers(0, 2)),
                             st.sampled_from(["same", "valid"])))
    stride = 1 if padding == "same" else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    pads = (0, 0) if isinstance(padding, str) else (padding, padding) if isinstance(padding, int) else padding
    assume(padding == "same" or all(size[i] + 2 * pads[i] >= dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1)))
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    shapes = [batch + (in_channels,) + size, (out_channels, in_channels // groups) + kernel]
    if draw(st.booleans()):
        shapes.append((out_channels,))
    values = [draw(arrays(np.float64, shape, elements=floats(-2.0, 2.0))) for shape in shapes]
    return values, {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


@given(conv_cases())
def test_conv2d_of_drawn_shapes_equals_torchs(case):
    values, args = case
    assert_same_derivatives(lambda *v: F.conv2d(*v, **args), lambda *v: TF.conv2d(*v, **args), values,
                            f"conv2d {[v.shape for v in values]} {args}")


def test_conv2d_is_a_matrix_product_over_unfolded_patches():
    """What the page will teach, checked on its own: W as a matrix times unfold(x) is conv2d, reshaped."""
    x, w = normal(2, 3, 6, 7), normal(4, 3, 3, 2)
    columns = F.unfold(Variable(x), (3, 2), padding=1)  # (2, 3*3*2, L)
    y = tp.matmul(Variable(w.reshape(4, -1)), columns).data.reshape(2, 4, 6, 8)
    assert_close_to_torch(y, TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy())
    assert_close_to_torch(F.conv2d(Variable(x), Variable(w), padding=1).data, y)


def test_conv2d_keeps_the_unfolded_input_for_backward():
    """The price of the matrix product: it keeps the unfolded input, kh*kw times the input's elements for a stride of
    1 (less the border), where torch's one convolution node keeps the input and unfolds again in its backward."""
    x, w = Variable(normal(2, 3, 8, 8)), Variable(normal(4, 3, 3, 3))
    y = F.conv2d(x, w, padding=1)
    product = y.creator.edges[0][0]  # the reshape's input is the matrix product
    saved = sorted(s.variable.data.shape if s.variable is not None else s.data.shape for s in product.saved)
    assert saved == [(2, 27, 64), (4, 27)]  # the columns (N, C*kh*kw, H*W) and the weight as a matrix
    assert math.prod(saved[0]) == 9 * x.data.size


def test_conv2d_of_integers_equals_torchs():
    x, w = RNG.integers(-3, 4, (2, 3, 5, 5)), RNG.integers(-3, 4, (4, 3, 2, 2))
    ours = F.conv2d(tp.tensor(x), tp.tensor(w), stride=2, padding=1)
    theirs = TF.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1)
    assert ours.dtype == np.int64 and theirs.dtype == torch.int64
    np.testing.assert_array_equal(ours.data, theirs.numpy())


# ----- conv_transpose2d --------------------------------------------------------------------------------------------

TRANSPOSED_CASES = [  # (input shape, weight shape, bias, stride, padding, output_padding, groups, dilation)
    ((2, 4, 3, 4), (4, 3, 3, 3), True, 1, 0, 0, 1, 1),
    ((2, 4, 3, 4), (4, 3, 3, 2), True, 2, 1, 1, 1, 1),
    ((2, 4, 3, 4), (4, 3, 3, 2), False, (2, 3), (1, 0), (1, 2), 1, 1),
    ((2, 4, 3, 4), (4, 2, 2, 3), True, (1, 2), (0, 1), 0, 2, (2, 1)),
    ((1, 6, 3, 3), (6, 1, 3, 3), False, 2, 1, 1, 6, 1),  # depthwise
    ((2, 4, 3, 4), (4, 3, 2, 2), True, 1, 0, (1, 0), 1, 2),  # an output padding below the dilation, not the stride
    ((2, 3, 4, 4), (3, 2, 3, 3), True, 1, 2, 0, 1, 1),  # padding crops the output: 4 -> 2
    ((4, 3, 4), (4, 3, 2, 2), True, 2, 0, 0, 1, 1),  # an image without a batch
    ((0, 4, 3, 4), (4, 3, 2, 2), True, 2, 0, 0, 1, 1),  # an empty batch
    ((2, 3, 1, 1), (3, 2, 1, 1), True, 1, 0, 0, 1, 1),  # one pixel, a 1 x 1 kernel
]


@pytest.mark.parametrize("x_shape, w_shape, bias, stride, padding, output_padding, groups, dilation",
                         TRANSPOSED_CASES)
def test_conv_transpose2d_equals_torchs_to_the_second_derivative(x_shape, w_shape, bias, stride, padding,
                                                                  output_padding, groups, dilation):
    args = {"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
            "dilation": dilation}
    values = [normal(*x_shape), normal(*w_shape)] + ([normal(w_shape[1] * groups)] if bias else [])
    assert_same_derivatives(lambda *v: F.conv_transpose2d(*v, **args), lambda *v: TF.conv_transpose2d(*v, **args),
                            values, f"conv_transpose2d {x_shape} {w_shape} {args}")


@st.composite
def transposed_cases(draw):
    groups = draw(st.integers(1, 3))
    in_channels, out_channels = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    output_padding = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    size = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    out = [(size[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1
           for i in (0, 1)]
    assume(min(out) >= 1)
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    shapes = [batch + (in_channels,) + size, (in_channels, out_channels // groups) + kernel]
    if draw(st.booleans()):
        shapes.append((out_channels,))
    values = [draw(arrays(np.float64, shape, elements=floats(-2.0, 2.0))) for shape in shapes]
    return values, {"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
                    "dilation": dilation}


@given(transposed_cases())
def test_conv_transpose2d_of_drawn_shapes_equals_torchs(case):
    values, args = case
    assert_same_derivatives(lambda *v: F.conv_transpose2d(*v, **args), lambda *v: TF.conv_transpose2d(*v, **args),
                            values, f"conv_transpose2d {[v.shape for v in values]} {args}")


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation, groups", [
    ((2, 3, 7, 8), (4, 3, 3, 2), 2, 1, 1, 1), ((2, 4, 9, 7), (6, 2, 3, 3), (3, 2), (0, 1), (1, 2), 2),
    ((1, 2, 6, 6), (2, 2, 2, 2), 1, 0, 2, 1)])
def test_conv_transpose2d_is_conv2ds_gradient_with_respect_to_its_input(x_shape, w_shape, stride, padding, dilation,
                                                                        groups):
    """What it is for: the input gradient of torch's conv2d, output_padding picking the input's size back among the
    sizes the stride makes equal."""
    x, w = torch.tensor(normal(*x_shape), requires_grad=True), torch.tensor(normal(*w_shape))
    y = TF.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = normal(*y.shape)
    (x_grad,) = torch.autograd.grad(y, x, torch.tensor(g))
    size = F.conv_transpose2d(Variable(g), Variable(w.numpy()), stride=stride, padding=padding, dilation=dilation,
                              groups=groups).shape[-2:]
    output_padding = tuple(x_shape[2 + i] - size[i] for i in (0, 1))
    ours = F.conv_transpose2d(Variable(g), Variable(w.numpy()), stride=stride, padding=padding,
                              output_padding=output_padding, dilation=dilation, groups=groups)
    assert_close_to_torch(ours.data, x_grad.numpy())


def test_conv_transpose2d_takes_torchs_positional_arguments_at_the_top_level_too():
    x, w, b = normal(2, 4, 3, 3), normal(4, 3, 2, 2), normal(6)
    args = (2, 1, 1, 2, (1, 2))  # stride, padding, output_padding, groups, dilation: torch's order
    ours = tp.conv_transpose2d(Variable(x), Variable(w), Variable(b), *args)
    theirs = torch.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), *args)
    assert_close_to_torch(ours.data, theirs.numpy())
    assert tp.conv_transpose2d is F.conv_transpose2d and "conv_transpose2d" in tp.__all__ + F.__all__


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.complex64, np.complex128], ids=str)
def test_conv_transpose2d_of_each_dtype_torch_takes_gives_its_dtype_and_values(dtype):
    x, w, b = [(normal(*s) * 3).astype(dtype) for s in ((2, 4, 5, 6), (4, 3, 3, 2), (6,))]
    ours = F.conv_transpose2d(tp.tensor(x), tp.tensor(w), tp.tensor(b), stride=2, padding=1, groups=2)
    theirs = TF.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1, groups=2)
    assert str(ours.dtype) == str(theirs.dtype)
    tolerance = {np.float32: 1e-5, np.complex64: 1e-5, np.float16: 1e-2}.get(dtype, 1e-12)
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=tolerance, atol=tolerance * 30)


BIAS_DTYPES = [(np.float64, np.float32), (np.float64, np.int64), (np.float64, np.bool_), (np.float16, np.float64),
               (np.int64, np.int32), (np.int64, np.float32), (np.float32, np.float64), (np.float32, np.float16),
               (np.float32, np.int64)]


@pytest.mark.parametrize("x_dtype, bias_dtype", BIAS_DTYPES, ids=str)
def test_a_bias_of_another_dtype_is_taken_or_refused_as_torch_takes_or_refuses_it(x_dtype, bias_dtype):
    """torch's CPU kernel adds the bias in place: a dtype the output can hold is cast (a float32 bias of float64
    images: its gradient comes back float32), one it cannot is refused; float32 images want a float32 bias."""
    x, w, b = normal(2, 4, 3, 3).astype(x_dtype), normal(4, 3, 2, 2).astype(x_dtype), np.ones(3).astype(bias_dtype)

    def run(fw, f):
        return f.conv_transpose2d(fw.tensor(x), fw.tensor(w), fw.tensor(b))

    theirs = _raised_or(lambda: run(torch, TF))
    ours = _raised_or(lambda: run(tp, F))
    if isinstance(theirs, Exception):
        assert type(ours) is type(theirs) and str(ours) == str(theirs).split("\n")[0]
        return
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-2 if x_dtype == np.float16 else 1e-12)
    if x_dtype == np.float64 and bias_dtype == np.float32:
        bv, bt = Variable(b), torch.tensor(b, requires_grad=True)
        F.conv_transpose2d(Variable(x), Variable(w), bv).sum().backward()
        TF.conv_transpose2d(torch.tensor(x), torch.tensor(w), bt).sum().backward()
        assert bv.grad.dtype == np.float32 and bt.grad.dtype == torch.float32
        np.testing.assert_array_equal(bv.grad.data, bt.grad.numpy())


def _raised_or(call):
    try:
        return call()
    except Exception as error:  # noqa: BLE001 (compared with torch's)
        return error


# ----- max pooling -------------------------------------------------------------------------------------------------

MAX_POOL_CASES = [  # (input shape, kernel_size, stride, padding, dilation, ceil_mode)
    ((2, 3, 6, 6), 2, None, 0, 1, False),
    ((2, 3, 5, 7), 3, 2, 1, 1, False),
    ((2, 3, 5, 7), 3, 2, 1, 1, True),
    ((2, 2, 5, 6), (3, 2), (2, 3), (1, 1), (2, 1), True),
    ((1, 2, 5, 5), 2, 3, 1, 1, True),  # ceil_mode: the window that would start in the padding behind is dropped
    ((1, 2, 6, 6), 2, 1, 1, 2, False),
    ((1, 1, 5, 6), 6, None, 0, 1, True),  # ceil_mode: one window, larger than the image's height
    ((3, 5, 5), 2, 2, 0, 1, True),  # an image without a batch
    ((0, 3, 4, 4), 2, None, 0, 1, False),  # an empty batch
]


def with_ties(shape):
    """Small integers: most windows hold several equal largest values."""
    return RNG.integers(-1, 2, shape).astype(np.float64)


@pytest.mark.parametrize("values", [lambda shape: normal(*shape), with_ties, np.zeros],
                         ids=["distinct", "ties", "zeros"])
@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil_mode", MAX_POOL_CASES)
def test_max_pool2d_equals_torchs_and_sends_the_gradient_where_torch_does(shape, kernel, stride, padding, dilation,
                                                                           ceil_mode, values):
    args = {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    x = values(shape)
    assert_same_derivatives(lambda a: F.max_pool2d(a, **args), lambda a: TF.max_pool2d(a, **args), [x],
                            f"max_pool2d {args}")
    ours = F.max_pool2d(Variable(x), **args, return_indices=True)[1]
    theirs = TF.max_pool2d(torch.tensor(x), **args, return_indices=True)[1]
    assert ours.dtype == np.int64 and not ours.requires_grad
    np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_the_first_largest_value_of_a_window_wins_row_by_row_as_in_torch():
    """Worked out: in a window of equal values the gradient goes to its first element, the padding never wins."""
    x = Variable(np.zeros((1, 1, 4, 4)))
    y, indices = F.max_pool2d(x, 3, stride=1, padding=1, return_indices=True)
    np.testing.assert_array_equal(indices.data[0, 0], [[0, 0, 1, 2], [0, 0, 1, 2], [4, 4, 5, 6], [8, 8, 9, 10]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.data[0, 0], [[4, 2, 2, 0], [2, 1, 1, 0], [2, 1, 1, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("row", [[1.0, math.nan, 2.0, math.nan], [math.nan, 3.0, 3.0, 1.0], [-math.inf] * 4,
                                 [-math.inf, 2.0, math.inf, math.inf], [math.nan] * 4])
def test_nan_and_infinities_pick_the_element_torch_picks(row):
    """A NaN wins over every number, the last NaN over the others; -inf everywhere: the first real element."""
    x = np.array(row).reshape(1, 1, 1, 4)
    for args in ({"kernel_size": (1, 4)}, {"kernel_size": (1, 3), "stride": 1, "padding": (0, 1)}):
        ours = F.max_pool2d(Variable(x.copy()), **args, return_indices=True)
        theirs = TF.max_pool2d(torch.tensor(x), **args, return_indices=True)
        np.testing.assert_array_equal(ours[0].data, theirs[0].numpy())
        np.testing.assert_array_equal(ours[1].data, theirs[1].numpy())
    ours = F.adaptive_max_pool2d(Variable(x.copy()), (1, 2), return_indices=True)
    theirs = TF.adaptive_max_pool2d(torch.tensor(x), (1, 2), return_indices=True)
    np.testing.assert_array_equal(ours[1].data, theirs[1].numpy())


@st.composite
def pool_cases(draw, dilation=True):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    ceil_mode = draw(st.booleans())
    size = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    assume(all(size[i] + 2 * padding[i] >= dilations[i] * (kernel[i] - 1) + 1 for i in (0, 1)))
    shape = draw(st.sampled_from([(), (1,), (2,)])) + (draw(st.integers(1, 3)),) + size
    x = draw(arrays(np.float64, shape, elements=st.integers(-2, 2).map(float)))  # ties everywhere
    args = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    if dilation:
        args["dilation"] = dilations
        # a window of padding alone (-inf, as the elements are finite): torch's gradient for it is not defined (its
        # kernel writes past the window's row, into other elements); test_a_window_of_padding_alone_has_no_winner
        assume(not np.isneginf(TF.max_pool2d(torch.tensor(x), **args).numpy()).any())
    return x, args


def test_a_window_of_padding_alone_has_no_winner():
    # dilation 2 and padding 1 fit a window of width 2 on the padding on both sides of a one-pixel-wide image: its
    # maximum is -inf and its index torch's (the window's first position not before the image), and it depends on no
    # element, so it sends no gradient (torch's kernel adds it past the row, into the next row or the next image)
    x = np.random.default_rng(0).normal(size=(2, 1, 2, 1))
    args = {"kernel_size": (1, 2), "stride": None, "padding": (0, 1), "dilation": (1, 2), "return_indices": True}
    y, indices = F.max_pool2d(Variable(x.copy()), **args)
    y_t, indices_t = TF.max_pool2d(torch.tensor(x), **args)
    np.testing.assert_array_equal(y.data, y_t.numpy())
    np.testing.assert_array_equal(indices.data, indices_t.numpy())
    assert np.isneginf(y.data).all()
    xv = Variable(x.copy())
    F.max_pool2d(xv, (1, 2), None, (0, 1), (1, 2)).sum().backward()
    np.testing.assert_array_equal(xv.grad.data, np.zeros_like(x))


@given(pool_cases())
def test_max_pool2d_of_drawn_shapes_with_ties_equals_torchs(case):
    x, args = case
    assert_same_derivatives(lambda a: F.max_pool2d(a, **args), lambda a: TF.max_pool2d(a, **args), [x],
                            f"max_pool2d {x.shape} {args}")


def test_max_pool2d_of_integers_equals_torchs():
    x = RNG.integers(-5, 5, (2, 3, 5, 5))
    ours = F.max_pool2d(tp.tensor(x), 3, 2, 1, return_indices=True)
    theirs = TF.max_pool2d(torch.tensor(x), 3, 2, 1, return_indices=True)
    assert ours[0].dtype == np.int64
    np.testing.assert_array_equal(ours[0].data, theirs[0].numpy())
    np.testing.assert_array_equal(ours[1].data, theirs[1].numpy())


# ----- average pooling ---------------------------------------------------------------------------------------------

AVG_POOL_CASES = [  # (input shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    ((2, 3, 6, 6), 2, None, 0, False, True, None),
    ((2, 3, 5, 7), 3, 2, 1, False, True, None),
    ((2, 3, 5, 7), 3, 2, 1, False, False, None),
    ((2, 3, 5, 7), 3, 2, 1, True, True, None),  # the last window reaches past the padding: not counted
    ((2, 3, 5, 7), 3, 2, 1, True, False, None),
    ((1, 2, 5, 5), 2, 3, 1, True, True, None),
    ((1, 2, 5, 6), (3, 2), (2, 1), (1, 1), True, False, None),
    ((1, 2, 5, 6), (3, 2), (2, 1), (1, 1), True, True, 5),
    ((1, 2, 5, 6), 2, 2, 1, False, True, -3),  # torch takes any divisor but zero
    ((3, 5, 5), 2, 2, 0, True, True, None),  # an image without a batch
    ((0, 3, 4, 4), 2, None, 0, False, True, None),  # an empty batch
]


@pytest.mark.parametrize("shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor", AVG_POOL_CASES)
def test_avg_pool2d_equals_torchs_to_the_second_derivative(shape, kernel, stride, padding, ceil_mode,
                                                          count_include_pad, divisor):
    args = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
            "count_include_pad": count_include_pad, "divisor_override": divisor}
    assert_same_derivatives(lambda a: F.avg_pool2d(a, **args), lambda a: TF.avg_pool2d(a, **args), [normal(*shape)],
                            f"avg_pool2d {args}")


@given(pool_cases(dilation=False), st.booleans())
def test_avg_pool2d_of_drawn_shapes_equals_torchs(case, count_include_pad):
    x, args = case
    args = {**args, "count_include_pad": count_include_pad}
    assert_same_derivatives(lambda a: F.avg_pool2d(a, **args), lambda a: TF.avg_pool2d(a, **args), [x],
                            f"avg_pool2d {x.shape} {args}")


def test_avg_pool2d_divisors_worked_out_for_ceil_mode_and_padding():
    """A 5 x 5 image of ones, 2 x 2 windows moved 2, ceil_mode: the last row and column of windows hang over the edge.
    Counting the padding or not, the sums are 4, 2 (half inside) and 1; the divisors are what lies inside the padded
    image (here the image itself: no padding), so every average is 1, as torch's."""
    x = Variable(np.ones((1, 1, 5, 5)))
    for count in (True, False):
        np.testing.assert_array_equal(F.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=count).data,
                                      np.ones((1, 1, 3, 3)))
    # with a padding of 1 counted, the corner window holds one element of the image and three of padding
    y = F.avg_pool2d(x, 2, padding=1, ceil_mode=True).data[0, 0]
    np.testing.assert_array_equal(y, TF.avg_pool2d(torch.ones(1, 1, 5, 5, dtype=torch.float64), 2, padding=1,
                                                   ceil_mode=True).numpy()[0, 0])
    assert y[0, 0] == 0.25 and y[1, 1] == 1.0


def test_avg_pool2d_of_integers_divides_toward_zero_as_torch():
    x = RNG.integers(-9, 9, (2, 3, 5, 5))
    for divisor in (None, 3, -4):
        ours = F.avg_pool2d(tp.tensor(x), 2, 2, 1, ceil_mode=True, divisor_override=divisor)
        theirs = TF.avg_pool2d(torch.tensor(x), 2, 2, 1, ceil_mode=True, divisor_override=divisor)
        assert ours.dtype == np.int64
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_avg_pool2d_of_float16_adds_in_float32_as_torch():
    x = (RNG.normal(size=(2, 3, 6, 6)) * 100).astype(np.float16)
    ours = F.avg_pool2d(tp.tensor(x), 3, 1)
    theirs = TF.avg_pool2d(torch.tensor(x), 3, 1)
    assert ours.dtype == np.float16
    np.testing.assert_array_equal(ours.data, theirs.numpy())


# ----- adaptive pooling --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 2, 6, 6), (3, 4, 9)], ids=str)
@pytest.mark.parametrize("output_size", [1, 2, (3, 4), (None, 3), (2, None), (5, 7), (8, 11), (4, 1)], ids=str)
def test_adaptive_pooling_equals_torchs(shape, output_size):
    assert_same_derivatives(lambda a: F.adaptive_avg_pool2d(a, output_size),
                            lambda a: TF.adaptive_avg_pool2d(a, output_size), [normal(*shape)],
                            f"adaptive_avg_pool2d {output_size}")
    for x in (normal(*shape), with_ties(shape)):
        assert_same_derivatives(lambda a: F.adaptive_max_pool2d(a, output_size),
                                lambda a: TF.adaptive_max_pool2d(a, output_size), [x],
                                f"adaptive_max_pool2d {output_size}")
        ours = F.adaptive_max_pool2d(Variable(x), output_size, return_indices=True)[1]
        np.testing.assert_array_equal(ours.data, TF.adaptive_max_pool2d(torch.tensor(x), output_size, True)[1])


def test_adaptive_windows_are_torchs_worked_out():
    """Window i of 3 over 5 positions covers [floor(5i/3), ceil(5(i+1)/3)): [0, 2), [1, 4), [3, 5)."""
    x = Variable(np.arange(5.0).reshape(1, 1, 1, 5))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(x, (1, 3)).data[0, 0, 0], [0.5, 2.0, 3.5], rtol=1e-15)
    np.testing.assert_array_equal(F.adaptive_max_pool2d(x, (1, 3)).data[0, 0, 0], [1.0, 3.0, 4.0])
    assert F.adaptive_avg_pool2d(x, (1, 0)).shape == (1, 1, 1, 0)  # torch's too


# ----- forward mode, gradcheck, nodes ------------------------------------------------------------------------------

JVP_CASES = {  # name: (ours, theirs, shapes)
    "unfold": (lambda a: F.unfold(a, (2, 3), padding=1, stride=(1, 2)),
               lambda a: TF.unfold(a, (2, 3), padding=1, stride=(1, 2)), [(2, 3, 5, 6)]),
    "fold": (lambda a: F.fold(a, (5, 6), (2, 3), padding=1, stride=(1, 2)),
             lambda a: TF.fold(a, (5, 6), (2, 3), padding=1, stride=(1, 2)), [(2, 18, 18)]),
    "conv2d": (lambda a, w, b: F.conv2d(a, w, b, stride=(1, 2), padding=1, dilation=(2, 1), groups=2),
               lambda a, w, b: TF.conv2d(a, w, b, stride=(1, 2), padding=1, dilation=(2, 1), groups=2),
               [(2, 4, 6, 7), (6, 2, 3, 2), (6,)]),
    "conv_transpose2d": (lambda a, w, b: F.conv_transpose2d(a, w, b, 2, 1, (1, 0), 2, (1, 2)),
                         lambda a, w, b: TF.conv_transpose2d(a, w, b, 2, 1, (1, 0), 2, (1, 2)),
                         [(2, 4, 3, 4), (4, 3, 3, 2), (6,)]),
    "conv2d, same": (lambda a, w: F.conv2d(a, w, padding="same"), lambda a, w: TF.conv2d(a, w, padding="same"),
                     [(3, 6, 7), (4, 3, 2, 3)]),
    "max_pool2d": (lambda a: F.max_pool2d(a, 3, 2, 1, ceil_mode=True),
                   lambda a: TF.max_pool2d(a, 3, 2, 1, ceil_mode=True), [(2, 3, 6, 7)]),
    "avg_pool2d": (lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                   lambda a: TF.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), [(2, 3, 6, 7)]),
    "adaptive_avg_pool2d": (lambda a: F.adaptive_avg_pool2d(a, (2, 3)), lambda a: TF.adaptive_avg_pool2d(a, (2, 3)),
                            [(2, 3, 5, 7)]),
    "adaptive_max_pool2d": (lambda a: F.adaptive_max_pool2d(a, (2, 3)), lambda a: TF.adaptive_max_pool2d(a, (2, 3)),
                            [(2, 3, 5, 7)]),
}


@pytest.mark.parametrize("name", JVP_CASES)
def test_forward_mode_tangents_equal_torchs(name):
    ours_fn, theirs_fn, shapes = JVP_CASES[name]
    values, tangents = [normal(*s) for s in shapes], [normal(*s) for s in shapes]
    with fwAD.dual_level():
        y = ours_fn(*[fwAD.make_dual(Variable(v.copy()), t) for v, t in zip(values, tangents)])
        ours = fwAD.unpack_dual(y).tangent.data
    with tfwAD.dual_level():
        yt = theirs_fn(*[tfwAD.make_dual(torch.tensor(v), torch.tensor(t)) for v, t in zip(values, tangents)])
        theirs = tfwAD.unpack_dual(yt).tangent.numpy()
    assert_close_to_torch(ours, theirs, name)


@pytest.mark.parametrize("name", JVP_CASES)
def test_gradcheck_and_gradgradcheck_pass(name):
    ours_fn, _, shapes = JVP_CASES[name]
    values = [Variable(normal(*s)) for s in shapes]
    assert autograd.gradcheck(ours_fn, values, check_forward_ad=True)
    assert autograd.gradgradcheck(ours_fn, values)


@pytest.mark.parametrize("call, node", [
    (lambda f, x: f.unfold(x, 2), "Im2ColBackward0"),
    (lambda f, x: f.fold(f.unfold(x, 2), (5, 6), 2), "Col2ImBackward0"),
    (lambda f, x: f.max_pool2d(x, 2), "MaxPool2DWithIndicesBackward0"),
    (lambda f, x: f.avg_pool2d(x, 2), "AvgPool2DBackward0"),
    (lambda f, x: f.adaptive_avg_pool2d(x, 2), "AdaptiveAvgPool2DBackward0"),
    (lambda f, x: f.adaptive_max_pool2d(x, 2), "AdaptiveMaxPool2DBackward0"),
])
def test_the_output_nodes_have_torchs_names(call, node):
    x = normal(2, 3, 5, 6)
    assert call(F, Variable(x)).grad_fn.name() == node
    assert type(call(TF, torch.tensor(x, requires_grad=True)).grad_fn).__name__ == node


# ----- every backend -----------------------------------------------------------------------------------------------

BACKEND_CASES = {
    "unfold": (lambda a: F.unfold(a, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
               lambda a: TF.unfold(a, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [(2, 2, 5, 6)]),
    "fold": (lambda a: F.fold(a, (5, 6), 2, padding=1), lambda a: TF.fold(a, (5, 6), 2, padding=1), [(2, 8, 42)]),
    "conv2d": (lambda a, w, b: F.conv2d(a, w, b, padding="same", groups=2),
               lambda a, w, b: TF.conv2d(a, w, b, padding="same", groups=2), [(2, 4, 5, 6), (6, 2, 2, 3), (6,)]),
    "conv_transpose2d": (lambda a, w, b: F.conv_transpose2d(a, w, b, stride=2, padding=1, output_padding=1, groups=2),
                         lambda a, w, b: TF.conv_transpose2d(a, w, b, stride=2, padding=1, output_padding=1, groups=2),
                         [(2, 4, 3, 4), (4, 3, 3, 2), (6,)]),
    "conv2d, unbatched, strided": (lambda a, w: F.conv2d(a, w, stride=2, padding=1),
                                   lambda a, w: TF.conv2d(a, w, stride=2, padding=1), [(3, 5, 6), (2, 3, 3, 3)]),
    "max_pool2d": (lambda a: F.max_pool2d(a, 3, 2, 1, (1, 2), True), lambda a: TF.max_pool2d(a, 3, 2, 1, (1, 2), True),
                   [(2, 3, 5, 7)]),
    "avg_pool2d": (lambda a: F.avg_pool2d(a, 3, 2, 1, True, False), lambda a: TF.avg_pool2d(a, 3, 2, 1, True, False),
                   [(2, 3, 5, 7)]),
    "adaptive_avg_pool2d": (lambda a: F.adaptive_avg_pool2d(a, (3, 4)), lambda a: TF.adaptive_avg_pool2d(a, (3, 4)),
                            [(2, 3, 5, 7)]),
    "adaptive_max_pool2d": (lambda a: F.adaptive_max_pool2d(a, (3, 4)), lambda a: TF.adaptive_max_pool2d(a, (3, 4)),
                            [(2, 3, 5, 7)]),
}


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_each_operation_on_each_backend_equals_torch(name, xp):
    """NumPy, the strict stand-in for CuPy (no implicit conversion, no NumPy array in a device operation) and CuPy on a
    GPU: values and derivatives to the second order equal torch's, and stay on the backend."""
    ours_fn, theirs_fn, shapes = BACKEND_CASES[name]
    values = [normal(*s) for s in shapes]
    if "max" in name:
        values = [with_ties(s) for s in shapes]
    assert_same_derivatives(ours_fn, theirs_fn, values, f"{name} on {xp.__name__}", xp=xp)


def test_max_pool2d_with_nan_and_integers_on_each_backend(xp):
    x = np.array([1.0, math.nan, 2.0, math.nan, 0.0, 0.0]).reshape(1, 1, 2, 3)
    y, indices = F.max_pool2d(Variable(xp.asarray(x)), 2, 1, return_indices=True)
    yt, it = TF.max_pool2d(torch.tensor(x), 2, 1, return_indices=True)
    np.testing.assert_array_equal(cuda.as_numpy(y.data), yt.numpy())
    np.testing.assert_array_equal(cuda.as_numpy(indices.data), it.numpy())
    n = RNG.integers(-9, 9, (1, 2, 5, 5))
    for ours, theirs in [
            (F.max_pool2d(Variable(xp.asarray(n)), 2, 2, 1), TF.max_pool2d(torch.tensor(n), 2, 2, 1)),
            (F.avg_pool2d(Variable(xp.asarray(n)), 3, 2, 1, True), TF.avg_pool2d(torch.tensor(n), 3, 2, 1, True))]:
        assert cuda.get_array_module(ours.data) is xp
        np.testing.assert_array_equal(cuda.as_numpy(ours.data), theirs.numpy())


def test_a_cnn_trains_on_each_backend_as_on_the_cpu(xp):
    """The small CNN below, moved to the backend with Module.to: the same loss and gradients as torch's."""
    ours, theirs = twin_cnns(head="max")
    if xp is not np:
        ours.to("cuda")
    x, target = normal(4, 1, 10, 10), np.array([0, 2, 1, 2])
    loss = F.cross_entropy(ours(Variable(xp.asarray(x))), xp.asarray(target))
    loss.backward()
    loss_t = TF.cross_entropy(theirs(torch.tensor(x)), torch.tensor(target))
    loss_t.backward()
    assert_close_to_torch(cuda.as_numpy(loss.data), loss_t.item())
    for (name, p), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert cuda.get_array_module(p.grad.data) is xp
        assert_close_to_torch(cuda.as_numpy(p.grad.data), pt.grad.numpy(), name)


# ----- refusals ----------------------------------------------------------------------------------------------------

def _t(fw, shape, dtype=None):
    a = np.arange(math.prod(shape), dtype=np.float64).reshape(shape) / 7.0
    t = fw.from_numpy(a if dtype is None else a.astype(dtype))
    return t


X, W = (2, 4, 5, 6), (6, 2, 3, 2)
XW = (4, 3, 3, 2)  # conv_transpose2d's weight for X: (in_channels, out_channels / groups, kh, kw)
# (name, the call on (framework, its functional), whether the package repeats torch's words exactly)
REFUSALS = [
    ("conv2d: wrong channels", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W)), True),
    ("conv2d: groups not dividing out_channels",
     lambda fw, f: f.conv2d(_t(fw, X), _t(fw, (5, 2, 3, 2)), groups=2), True),
    ("conv2d: groups not dividing in_channels",
     lambda fw, f: f.conv2d(_t(fw, (2, 5, 5, 6)), _t(fw, W), groups=2), True),
    ("conv2d: groups 0", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), groups=0), True),
    ("conv2d: kernel larger than the input", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, (6, 4, 7, 2))), True),
    ("conv2d: dilated kernel larger than the input", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, (6, 4, 3, 2)),
                                                                           dilation=(3, 1)), True),
    ("conv2d: float32 input, float64 weight",
     lambda fw, f: f.conv2d(_t(fw, X, np.float32), _t(fw, W), groups=2), False),
    ("conv2d: float64 input, float32 weight",
     lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W, np.float32), groups=2), False),
    ("conv2d: float32 bias", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), _t(fw, (6,), np.float32), groups=2), True),
    ("conv2d: same with a stride", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), padding="same", stride=2, groups=2),
     True),
    ("conv2d: a padding string", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), padding="full", groups=2), True),
    ("conv2d: 2-D input", lambda fw, f: f.conv2d(_t(fw, (5, 6)), _t(fw, W)), True),
    ("conv2d: 5-D input", lambda fw, f: f.conv2d(_t(fw, (1,) + X), _t(fw, W)), True),
    ("conv2d: 3-D weight", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W[1:]), groups=2), False),
    ("conv2d: bias of the wrong length", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), _t(fw, (3,)), groups=2), True),
    ("conv2d: negative padding", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), padding=(1, -1), groups=2), True),
    ("conv2d: stride 0", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), stride=0, groups=2), True),
    ("conv2d: three strides", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), stride=(1, 2, 3), groups=2), True),
    ("conv2d: a float stride", lambda fw, f: f.conv2d(_t(fw, X), _t(fw, W), stride=1.5, groups=2), False),
    ("conv2d: bool", lambda fw, f: f.conv2d(_t(fw, X).bool(), _t(fw, W).bool(), groups=2), True),
    ("conv_transpose2d: wrong channels", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, (3, 3, 3, 2))), True),
    ("conv_transpose2d: groups not dividing in_channels",
     lambda fw, f: f.conv_transpose2d(_t(fw, (2, 5, 5, 6)), _t(fw, (5, 3, 3, 2)), groups=2), True),
    ("conv_transpose2d: groups 0", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), groups=0), True),
    ("conv_transpose2d: a float groups", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), groups=2.0), True),
    ("conv_transpose2d: a weight of no input channels",
     lambda fw, f: f.conv_transpose2d(_t(fw, (2, 0, 5, 6)), _t(fw, (0, 3, 3, 2))), True),
    ("conv_transpose2d: bias of the wrong length",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), _t(fw, (4,))), True),
    ("conv_transpose2d: bias of the wrong length, groups",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), _t(fw, (3,)), groups=2), True),
    ("conv_transpose2d: output padding as large as the stride",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), stride=2, output_padding=2), True),
    ("conv_transpose2d: output padding at stride 1", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW),
                                                                                      output_padding=(0, 1)), True),
    ("conv_transpose2d: output too small", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), padding=4), True),
    ("conv_transpose2d: output empty", lambda fw, f: f.conv_transpose2d(_t(fw, (2, 4, 2, 2)), _t(fw, (4, 3, 1, 1)),
                                                                       padding=1), True),
    ("conv_transpose2d: stride 0", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), stride=0), True),
    ("conv_transpose2d: negative padding", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), padding=-1), True),
    ("conv_transpose2d: negative output padding",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), output_padding=(0, -1)), True),
    ("conv_transpose2d: dilation 0", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), dilation=0), True),
    ("conv_transpose2d: a padding string", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), padding="same"),
     True),
    ("conv_transpose2d: a float stride", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), stride=1.5), True),
    ("conv_transpose2d: three strides", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), stride=(1, 2, 3)),
     True),
    ("conv_transpose2d: three output paddings",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW), output_padding=(0, 0, 0)), True),
    ("conv_transpose2d: 2-D input", lambda fw, f: f.conv_transpose2d(_t(fw, (5, 6)), _t(fw, XW)), True),
    ("conv_transpose2d: 5-D input", lambda fw, f: f.conv_transpose2d(_t(fw, (1,) + X), _t(fw, XW)), True),
    ("conv_transpose2d: 3-D weight", lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW[1:])), False),
    ("conv_transpose2d: float32 input, float64 weight",
     lambda fw, f: f.conv_transpose2d(_t(fw, X, np.float32), _t(fw, XW)), False),
    ("conv_transpose2d: float64 input, float32 weight",
     lambda fw, f: f.conv_transpose2d(_t(fw, X), _t(fw, XW, np.float32)), False),
    ("conv_transpose2d: int32", lambda fw, f: f.conv_transpose2d(_t(fw, X).int(), _t(fw, XW).int()), True),
    ("conv_transpose2d: bool", lambda fw, f: f.conv_transpose2d(_t(fw, X).bool(), _t(fw, XW).bool()), True),
    ("unfold: 2-D input", lambda fw, f: f.unfold(_t(fw, (5, 6)), 2), False),
    ("unfold: 1-D input", lambda fw, f: f.unfold(_t(fw, (6,)), 2), False),
    ("fold: 1-D input", lambda fw, f: f.fold(_t(fw, (6,)), (5, 6), 2), True),
    ("unfold: 5-D input", lambda fw, f: f.unfold(_t(fw, (1,) + X), 2), True),
    ("unfold: no channels", lambda fw, f: f.unfold(_t(fw, (2, 0, 5, 6)), 2), True),
    ("unfold: kernel too large", lambda fw, f: f.unfold(_t(fw, X), 7), True),
    ("unfold: kernel 0", lambda fw, f: f.unfold(_t(fw, X), 0), True),
    ("unfold: stride 0", lambda fw, f: f.unfold(_t(fw, X), 2, stride=0), True),
    ("unfold: dilation 0", lambda fw, f: f.unfold(_t(fw, X), 2, dilation=0), True),
    ("unfold: negative padding", lambda fw, f: f.unfold(_t(fw, X), 2, padding=(1, -1)), True),
    ("unfold: three kernel sides", lambda fw, f: f.unfold(_t(fw, X), (1, 2, 3)), True),
    ("unfold: integers", lambda fw, f: f.unfold(_t(fw, X).long(), 2), True),
    ("unfold: a float kernel", lambda fw, f: f.unfold(_t(fw, X), 2.0), False),
    ("fold: 4-D input", lambda fw, f: f.fold(_t(fw, (1, 2, 12, 20)), (5, 6), 2), True),
    ("fold: channels not a multiple", lambda fw, f: f.fold(_t(fw, (2, 7, 20)), (5, 6), 2), True),
    ("fold: wrong number of windows", lambda fw, f: f.fold(_t(fw, (2, 12, 20)), (5, 7), 2), True),
    ("fold: three output sides", lambda fw, f: f.fold(_t(fw, (2, 12, 20)), (5, 6, 7), 2), True),
    ("fold: integers", lambda fw, f: f.fold(_t(fw, (2, 12, 20)).long(), (5, 6), 2), True),
    ("max_pool2d: 2-D input", lambda fw, f: f.max_pool2d(_t(fw, (5, 6)), 2), True),
    ("max_pool2d: 5-D input", lambda fw, f: f.max_pool2d(_t(fw, (1,) + X), 2), True),
    ("max_pool2d: no channels", lambda fw, f: f.max_pool2d(_t(fw, (2, 0, 5, 6)), 2), True),
    ("max_pool2d: padding over half the kernel", lambda fw, f: f.max_pool2d(_t(fw, X), 2, padding=2), True),
    ("max_pool2d: padding over half the kernel, a tuple", lambda fw, f: f.max_pool2d(_t(fw, X), (2, 4), padding=(0, 3)),
     True),
    ("max_pool2d: padding over half the undilated kernel",
     lambda fw, f: f.max_pool2d(_t(fw, X), 3, padding=(2, 1), dilation=(2, 1)), True),
    ("max_pool2d: negative padding", lambda fw, f: f.max_pool2d(_t(fw, X), 2, padding=(1, -1)), True),
    ("max_pool2d: kernel 0", lambda fw, f: f.max_pool2d(_t(fw, X), 0), True),
    ("max_pool2d: kernel 0, stride 1", lambda fw, f: f.max_pool2d(_t(fw, X), (0, 2), stride=1), True),
    ("max_pool2d: negative kernel", lambda fw, f: f.max_pool2d(_t(fw, X), -2, stride=1), True),
    ("max_pool2d: stride 0", lambda fw, f: f.max_pool2d(_t(fw, X), 2, stride=(0, 1)), True),
    ("max_pool2d: negative stride", lambda fw, f: f.max_pool2d(_t(fw, X), 2, stride=-1), True),
    ("max_pool2d: dilation 0", lambda fw, f: f.max_pool2d(_t(fw, X), 2, dilation=(0, 1)), True),
    ("max_pool2d: output too small", lambda fw, f: f.max_pool2d(_t(fw, X), 7), True),
    ("max_pool2d: three kernel sides", lambda fw, f: f.max_pool2d(_t(fw, X), (1, 2, 3)), True),
    ("max_pool2d: three strides", lambda fw, f: f.max_pool2d(_t(fw, X), 2, stride=(1, 1, 1)), True),
    ("max_pool2d: three paddings", lambda fw, f: f.max_pool2d(_t(fw, X), 2, padding=(1, 1, 1)), True),
    ("max_pool2d: three dilations", lambda fw, f: f.max_pool2d(_t(fw, X), 2, dilation=(1, 1, 1)), True),
    ("max_pool2d: a float kernel", lambda fw, f: f.max_pool2d(_t(fw, X), 2.0), False),
    ("max_pool2d: bool", lambda fw, f: f.max_pool2d(_t(fw, X).bool(), 2), True),
    ("avg_pool2d: 5-D input", lambda fw, f: f.avg_pool2d(_t(fw, (1,) + X), 2), True),
    ("avg_pool2d: 2-D input", lambda fw, f: f.avg_pool2d(_t(fw, (5, 6)), 2), False),
    ("avg_pool2d: no channels", lambda fw, f: f.avg_pool2d(_t(fw, (2, 0, 5, 6)), 2), True),
    ("avg_pool2d: padding over half the kernel", lambda fw, f: f.avg_pool2d(_t(fw, X), 2, padding=2), True),
    ("avg_pool2d: divisor 0", lambda fw, f: f.avg_pool2d(_t(fw, X), 2, divisor_override=0), True),
    ("avg_pool2d: output too small", lambda fw, f: f.avg_pool2d(_t(fw, X), 7), True),
    ("avg_pool2d: stride 0", lambda fw, f: f.avg_pool2d(_t(fw, X), 2, stride=0), True),
    ("avg_pool2d: negative padding", lambda fw, f: f.avg_pool2d(_t(fw, X), 2, padding=(1, -1)), True),
    ("avg_pool2d: three kernel sides", lambda fw, f: f.avg_pool2d(_t(fw, X), (1, 2, 3)), True),
    ("avg_pool2d: bool", lambda fw, f: f.avg_pool2d(_t(fw, X).bool(), 2), True),
    ("adaptive_avg_pool2d: 2-D input", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, (5, 6)), 2), True),
    ("adaptive_avg_pool2d: 2-D input, a pair", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, (5, 6)), (2, 2)), True),
    ("adaptive_max_pool2d: 1-D input, a pair", lambda fw, f: f.adaptive_max_pool2d(_t(fw, (6,)), (2, 2)), True),
    ("adaptive_avg_pool2d: 5-D input", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, (1,) + X), 2), True),
    ("adaptive_avg_pool2d: an empty side", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, (2, 3, 0, 6)), 2), True),
    ("adaptive_avg_pool2d: three sides", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, X), (1, 2, 3)), True),
    ("adaptive_avg_pool2d: negative", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, X), -1), True),
    ("adaptive_avg_pool2d: integers", lambda fw, f: f.adaptive_avg_pool2d(_t(fw, X).long(), 2), True),
    ("adaptive_max_pool2d: 2-D input", lambda fw, f: f.adaptive_max_pool2d(_t(fw, (5, 6)), 2), True),
    ("adaptive_max_pool2d: an empty side", lambda fw, f: f.adaptive_max_pool2d(_t(fw, (2, 3, 0, 6)), 2), True),
    ("adaptive_max_pool2d: three sides", lambda fw, f: f.adaptive_max_pool2d(_t(fw, X), (1, 2, 3)), True),
    ("adaptive_max_pool2d: negative", lambda fw, f: f.adaptive_max_pool2d(_t(fw, X), -1), True),
    ("adaptive_max_pool2d: integers", lambda fw, f: f.adaptive_max_pool2d(_t(fw, X).long(), 2), True),
]


def _raised(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 (whatever it is, it is compared with torch's)
        return error
    raise AssertionError("no exception")


@pytest.mark.parametrize("name, call, same_words", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_refusal_raises_torchs_exception_type(name, call, same_words):
    ours, theirs = _raised(lambda: call(tp, F)), _raised(lambda: call(torch, TF))
    assert type(ours) is type(theirs), (ours, theirs)
    if same_words:
        assert str(ours) == str(theirs).split("\n")[0]
    else:  # the package's own words, which still name the operation or what was wrong
        assert str(ours)


def test_a_mixed_dtype_convolution_says_which_types_differ():
    with pytest.raises(RuntimeError, match=r"Input type \(torch.FloatTensor\) and weight type \(torch.DoubleTensor\) "
                                           "should be the same"):
        F.conv2d(_t(tp, X, np.float32), _t(tp, W), groups=2)
    with pytest.raises(RuntimeError, match=r"expected a 4-D weight .* got weight of size \[2, 3, 2\]"):
        F.conv2d(_t(tp, X), _t(tp, (2, 3, 2)))


# ----- modules -----------------------------------------------------------------------------------------------------

MODULES = [
    "Conv2d(1, 6, 5)", "Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=(1, 2), groups=2, bias=False)",
    "Conv2d(4, 6, 3, padding='same')", "Conv2d(4, 6, 3, padding='valid')", "Conv2d(4, 6, 3, padding=(0, 1))",
    "Conv2d(4, 6, [3, 1], stride=[1, 2])", "Conv2d(4, 6, 3, stride=(1, 1), dilation=1, groups=1)",
    "MaxPool2d(2)", "MaxPool2d((2, 3), stride=1, padding=1, dilation=2, ceil_mode=True, return_indices=True)",
    "AvgPool2d(2)", ("AvgPool2d((2, 3), stride=(1, 2), padding=1, ceil_mode=True, count_include_pad=False, "
                     "divisor_override=3)"),
    "AdaptiveAvgPool2d(1)", "AdaptiveAvgPool2d((None, 3))", "AdaptiveMaxPool2d((2, 3))",
    "AdaptiveMaxPool2d(2, return_indices=True)", "Flatten()", "Flatten(0, 2)", "Unflatten(1, (2, 5))",
    "Unflatten(1, [2, 5])", "Softmax(dim=1)", "Softmax()", "LogSoftmax(1)", "Identity()", "Identity(3, a=4)",
]


@pytest.mark.parametrize("text", MODULES)
def test_modules_print_as_torchs_and_have_its_parameters_and_state_dict_keys(text):
    ours, theirs = eval("nn." + text), eval("torch.nn." + text)  # noqa: S307 (the table above)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert [(k, p.shape, p.dtype) for k, p in ours.named_parameters()] == \
        [(k, tuple(p.shape), np.float32) for k, p in theirs.named_parameters()]


def test_conv2d_keeps_torchs_attributes():
    ours, theirs = nn.Conv2d(4, 6, (3, 2), groups=2), torch.nn.Conv2d(4, 6, (3, 2), groups=2)
    for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
                 "padding_mode", "transposed", "output_padding"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert nn.Conv2d(4, 6, 3, padding="same").padding == torch.nn.Conv2d(4, 6, 3, padding="same").padding == "same"
    for pool, twin, names in [
            (nn.MaxPool2d(3), torch.nn.MaxPool2d(3),
             ("kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode")),
            (nn.AvgPool2d(3, 1), torch.nn.AvgPool2d(3, 1),
             ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"))]:
        for name in names:
            assert getattr(pool, name) == getattr(twin, name), name


@pytest.mark.parametrize("args", [(16, 32, 3), (8, 12, (5, 2), 1, 0, 1, 4), (3, 64, 7)])
def test_conv2d_starts_uniform_within_torchs_bounds(args):
    """kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bias from the same interval: torch's
    parameters lie there too; drawn from the framework's generator, so a seed repeats them."""
    tp.manual_seed(3)
    ours, theirs = nn.Conv2d(*args), torch.nn.Conv2d(*args)
    fan_in = math.prod(theirs.weight.shape[1:])
    bound = 1 / math.sqrt(fan_in)
    for p, pt in [(ours.weight, theirs.weight), (ours.bias, theirs.bias)]:
        for values in (p.data, pt.detach().numpy()):
            assert values.dtype == np.float32
            assert np.abs(values).max() <= bound * (1 + 1e-6)
        n = p.data.size  # the largest of n uniform draws misses the bound by about bound / n
        assert np.abs(p.data).max() > bound * (1 - 10 / n)
        assert abs(p.data.mean()) < 4 * bound / math.sqrt(3 * n)
    tp.manual_seed(3)
    np.testing.assert_array_equal(nn.Conv2d(*args).weight.data, ours.weight.data)


def test_conv2d_dtype_and_device():
    conv = nn.Conv2d(2, 3, 2, dtype=tp.float64, device="cpu")
    assert conv.weight.dtype == conv.bias.dtype == np.float64 and conv.weight.device == tp.device("cpu")
    tp.set_default_dtype(tp.float64)
    assert nn.Conv2d(2, 3, 2).weight.dtype == np.float64


MODULE_REFUSALS = [  # (the call on a framework's nn, whether the package repeats torch's words exactly)
    (lambda n: n.Conv2d(5, 6, 3, groups=2), True),
    (lambda n: n.Conv2d(4, 5, 3, groups=2), True),
    (lambda n: n.Conv2d(4, 6, 3, groups=0), True),
    (lambda n: n.Conv2d(4, 6, 3, padding_mode="foo"), False),  # torch prints a set, in any order
    (lambda n: n.Conv2d(4, 6, 3, padding="same", stride=2), True),
    (lambda n: n.Unflatten(1, 5), True),
    (lambda n: n.Unflatten(1, (2, 5.0)), True),
]


@pytest.mark.parametrize("call, same_words", MODULE_REFUSALS)
def test_module_refusals_raise_torchs_exception_types(call, same_words):
    ours, theirs = _raised(lambda: call(nn)), _raised(lambda: call(torch.nn))
    assert type(ours) is type(theirs), (ours, theirs)
    assert str(ours) == str(theirs) or not same_words


def test_conv2d_refuses_a_padding_string_and_an_integer_dtype():
    """torch prints the padding strings as a set, in an order that changes from run to run; the package in one order.
    An integer dtype is a TypeError as for every module of the package (torch's RuntimeError comes from asking an
    integer weight to require grad)."""
    with pytest.raises(ValueError, match="Invalid padding string 'foo', should be one of {'same', 'valid'}"):
        nn.Conv2d(4, 6, 3, padding="foo")
    with pytest.raises(ValueError, match="Invalid padding string 'foo'"):
        torch.nn.Conv2d(4, 6, 3, padding="foo")
    with pytest.raises(TypeError, match="must be floating point"):
        nn.Conv2d(4, 6, 3, dtype=tp.int64)


def test_conv2d_padding_modes_other_than_zeros_are_not_implemented_and_say_so():
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(NotImplementedError, match=f"padding_mode='{mode}' is not implemented"):
            nn.Conv2d(4, 6, 3, padding_mode=mode)


MODULE_CALLS = [
    ("Conv2d(4, 6, 3, padding=1, groups=2)", (2, 4, 5, 6)),
    ("MaxPool2d(2)", (2, 3, 5, 6)), ("MaxPool2d(3, 2, 1, ceil_mode=True)", (3, 5, 6)),
    ("AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)", (2, 3, 5, 6)),
    ("AdaptiveAvgPool2d((2, None))", (2, 3, 5, 6)), ("AdaptiveMaxPool2d(2)", (2, 3, 5, 6)),
    ("Flatten()", (2, 3, 4, 5)), ("Flatten(0, -2)", (2, 3, 4, 5)), ("Unflatten(1, (2, 5))", (3, 10)),
    ("Unflatten(-1, (-1, 2))", (3, 10)), ("Softmax(dim=1)", (3, 4)), ("LogSoftmax(-1)", (3, 4)), ("Identity()", (2, 3)),
]


@pytest.mark.parametrize("text, shape", MODULE_CALLS)
def test_modules_compute_as_torchs(text, shape):
    ours, theirs = eval("nn." + text), eval("torch.nn." + text)  # noqa: S307
    theirs.double(), ours.double()
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = normal(*shape)
    assert_same_derivatives(lambda a: ours(a), lambda a: theirs(a), [x], text)


def test_pooling_modules_return_indices_when_asked():
    x = with_ties((2, 3, 6, 6))
    for ours, theirs in [(nn.MaxPool2d(2, return_indices=True), torch.nn.MaxPool2d(2, return_indices=True)),
                         (nn.AdaptiveMaxPool2d(4, True), torch.nn.AdaptiveMaxPool2d(4, True))]:
        (y, i), (yt, it) = ours(Variable(x)), theirs(torch.tensor(x))
        np.testing.assert_array_equal(y.data, yt.numpy())
        np.testing.assert_array_equal(i.data, it.numpy())


def test_unflatten_refuses_sizes_that_do_not_multiply_up_as_torch():
    with pytest.raises(RuntimeError, match=r"unflatten: Provided sizes \[3, 5\] don't multiply up to the size of dim 1 "
                                           r"\(10\) in the input tensor"):
        nn.Unflatten(1, (3, 5))(Variable(normal(3, 10)))
    with pytest.raises(RuntimeError):
        torch.nn.Unflatten(1, (3, 5))(torch.zeros(3, 10))
    with pytest.raises(IndexError):
        nn.Flatten()(Variable(normal(3)))
    with pytest.raises(IndexError):
        torch.nn.Flatten()(torch.zeros(3))


def test_softmax_without_a_dim_refuses_to_guess():
    """PyTorch guesses a dim for nn.Softmax() with a deprecation warning; the package's softmax asks for one."""
    with pytest.raises(TypeError, match="softmax: missing the dim"):
        nn.Softmax()(Variable(normal(3, 4)))


# ----- a small CNN with torch's weights ----------------------------------------------------------------------------

def twin_cnns(head):
    """Conv2d, ReLU, MaxPool2d, Conv2d, ReLU, then AdaptiveAvgPool2d or MaxPool2d, Flatten, Linear: torch's, and the
    package's with torch's weights copied in (float64)."""
    def build(fw):
        last = fw.nn.AdaptiveAvgPool2d((2, 2)) if head == "adaptive" else fw.nn.MaxPool2d(2, ceil_mode=True)
        return fw.nn.Sequential(fw.nn.Conv2d(1, 4, 3, padding=1), fw.nn.ReLU(), fw.nn.MaxPool2d(2),
                                fw.nn.Conv2d(4, 6, 3, padding="same", groups=2), fw.nn.ReLU(), last, fw.nn.Flatten(),
                                fw.nn.Linear(24 if head == "adaptive" else 54, 3))
    torch.manual_seed(0)
    theirs = build(torch).double()
    ours = build(tp).double()
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("head", ["adaptive", "max"])
def test_a_small_cnn_with_torchs_weights_gives_torchs_outputs_and_gradients(head):
    ours, theirs = twin_cnns(head)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x, target = normal(5, 1, 10, 10), np.array([0, 2, 1, 2, 0])
    xv, xt = Variable(x.copy()), torch.tensor(x, requires_grad=True)
    scores, scores_t = ours(xv), theirs(xt)
    assert_close_to_torch(scores.data, scores_t.detach().numpy(), "scores")
    loss, loss_t = F.cross_entropy(scores, target), TF.cross_entropy(scores_t, torch.tensor(target))
    loss.backward()
    loss_t.backward()
    assert_close_to_torch(loss.data, loss_t.item(), "loss")
    assert_close_to_torch(xv.grad.data, xt.grad.numpy(), "input's gradient")
    for (name, p), (name_t, pt) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert name == name_t
        assert_close_to_torch(p.grad.data, pt.grad.numpy(), name)


def test_a_small_cnn_takes_the_same_sgd_steps_as_torchs():
    ours, theirs = twin_cnns("adaptive")
    opt, opt_t = tp.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(theirs.parameters(), lr=0.1,
                                                                                         momentum=0.9)
    x, target = normal(6, 1, 10, 10), np.array([0, 1, 2, 0, 1, 2])
    for _ in range(3):
        opt.zero_grad()
        opt_t.zero_grad()
        F.cross_entropy(ours(Variable(x)), target).backward()
        TF.cross_entropy(theirs(torch.tensor(x)), torch.tensor(target)).backward()
        opt.step()
        opt_t.step()
    for (name, p), (_, pt) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert_close_to_torch(p.data, pt.detach().numpy(), name)


# ----- autocast ----------------------------------------------------------------------------------------------------

AUTOCAST_CASES = {  # name: (input, weight and bias shapes, keyword arguments)
    "conv2d": (((2, 4, 6, 6), (6, 2, 3, 3), (6,)), {"padding": 1, "groups": 2}),
    "conv_transpose2d": (((2, 4, 3, 3), (4, 3, 3, 3), (6,)), {"stride": 2, "groups": 2}),
}


@pytest.mark.parametrize("name", AUTOCAST_CASES)
def test_under_cpu_autocast_a_convolution_runs_in_float16_as_torchs_and_gradients_come_back_float32(name):
    shapes, kwargs = AUTOCAST_CASES[name]
    x, w, b = [a.astype(np.float32) for a in (normal(*shapes[0]), normal(*shapes[1]) * 0.3, normal(*shapes[2]))]
    xv, wv, bv = Variable(x), Variable(w), Variable(b)
    with tp.autocast("cpu", dtype=tp.float16):
        y = getattr(F, name)(xv, wv, bv, **kwargs)
    with torch.autocast("cpu", dtype=torch.float16):
        yt = getattr(TF, name)(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kwargs)
    assert y.dtype == np.float16 and yt.dtype == torch.float16
    np.testing.assert_allclose(y.data.astype(np.float64), yt.double().numpy(), rtol=1e-2, atol=2e-2)
    y.sum().backward()
    assert wv.grad.dtype == bv.grad.dtype == xv.grad.dtype == np.float32


def test_under_cpu_autocast_conv2d_of_float64_stays_float64_as_torchs():
    x, w = normal(2, 4, 6, 6), normal(6, 2, 3, 3)
    with tp.autocast("cpu", dtype=tp.float16):  # float64 is never cast, as in torch
        assert F.conv2d(Variable(x), Variable(w), groups=2).dtype == np.float64
    with torch.autocast("cpu", dtype=torch.float16):
        assert TF.conv2d(torch.tensor(x), torch.tensor(w), groups=2).dtype == torch.float64
