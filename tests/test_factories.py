"""Tensor factories (tinypytorch.factories): tensor, zeros, ones, full, eye, arange, linspace, rand, randn, the *_like
forms, from_numpy and the dtype names, against PyTorch's dtype, shape and values; bad input where PyTorch refuses it."""
import inspect
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from tinypytorch import Variable, cuda
from tinypytorch import factories as F
from reference import floats

pytestmark = pytest.mark.torch

FACTORIES = [F.tensor, F.zeros, F.ones, F.full, F.eye, F.arange, F.linspace, F.rand, F.randn, F.zeros_like,
             F.ones_like, F.full_like, F.rand_like, F.randn_like, F.from_numpy]


def numpy_dtype(torch_dtype):
    return torch.empty(0, dtype=torch_dtype).numpy().dtype


def torch_dtype(dtype):
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def assert_like_torch(ours, theirs, exact=True):
    """Same dtype, shape and values (equal, NaN included; or within the dtype's rounding)."""
    assert isinstance(ours, Variable)
    assert ours.dtype == numpy_dtype(theirs.dtype), (ours.dtype, theirs.dtype)
    assert ours.shape == tuple(theirs.shape)
    if exact or ours.dtype.kind not in "fc":
        np.testing.assert_array_equal(ours.data, theirs.numpy())
    else:
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=4 * np.finfo(ours.dtype).eps)


# ----- tensor ----------------------------------------------------------------------------------------------------

TENSOR_DATA = {
    "ints": [1, 2, 3],
    "floats and ints": [[1.5, 2], [3, 4]],
    "bools": [True, False],
    "bools and ints": [True, 2],
    "a float": 2.5,
    "an int": 7,
    "a bool": True,
    "complex": [1 + 2j, 3],
    "a float that float32 rounds": [0.1, 1e40, -1e-50, float("nan")],
    "a NumPy float64 and an int": [np.float64(1.1), 2],
    "a NumPy int32 and an int": [np.int32(1), 2],
    "a NumPy int32 and a float": [np.int32(1), 2.5],
    "a NumPy float16 and an int": [np.float16(1.5), 2],
    "a NumPy float64 scalar": np.float64(1.5),
    "a NumPy bool scalar": np.bool_(True),
    "a float32 array": np.array([0.1, 0.2], np.float32),
    "an int32 array": np.arange(4, dtype=np.int32).reshape(2, 2),
    "a 0-d int16 array": np.array(3, np.int16),
    "a list of arrays": [np.array([1, 2], np.int32), np.array([3, 4], np.int32)],
    "empty": [],
    "empty rows": [[], []],
    "a range": range(4),
    "a tuple": (1, 2.5),
}


@pytest.mark.parametrize("data", TENSOR_DATA.values(), ids=TENSOR_DATA.keys())
def test_tensor_infers_torchs_dtype_and_copies_the_values(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that a list of arrays is slow
        theirs = torch.tensor(data)
    ours = F.tensor(data)
    assert_like_torch(ours, theirs)
    assert not ours.requires_grad and ours.is_leaf


@pytest.mark.parametrize("data, dtype", [
    ([1.7, -1.7], np.int64),  # truncated toward zero
    ([-1], np.uint8),  # wraps, as in torch
    ([1e5], np.float16),  # beyond float16: inf
    ([0.1], np.float64),  # rounded once, to float64
    ([2**53 + 1], np.float64),
    ([float("nan"), 0.0], np.bool_),
    ([1, 2], np.float32),
    (np.array([2.7, -2.7]), np.int64),
    (np.array([1, 2], np.int16), np.float64),
])
def test_tensor_with_a_dtype_converts_as_torch(data, dtype):
    assert_like_torch(F.tensor(data, dtype=dtype), torch.tensor(data, dtype=torch_dtype(dtype)))


def test_tensor_copies_arrays_and_lists_while_from_numpy_shares_memory_like_torch():
    array = np.array([1.0, 2.0])
    ours, theirs = F.tensor(array), torch.tensor(array)
    shared, shared_t = F.from_numpy(array), torch.from_numpy(array)
    array[0] = 5.0
    assert ours.data[0] == theirs[0].item() == 1.0
    assert shared.data[0] == shared_t[0].item() == 5.0
    shared.data[1] = 7.0
    assert array[1] == 7.0
    assert not shared.requires_grad and shared.dtype == np.float64


def test_tensor_of_a_variable_is_a_detached_copy_with_torchs_warning():
    x = Variable(np.array([1.0, 2.0]))
    xt = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    with pytest.warns(UserWarning, match="To copy construct from a Variable, it is recommended to use"):
        y = F.tensor(x)
    with pytest.warns(UserWarning, match="To copy construct from a tensor, it is recommended to use"):
        yt = torch.tensor(xt)
    assert_like_torch(y, yt)
    assert not y.requires_grad and y.is_leaf and not yt.requires_grad
    x.data[0] = 9.0
    assert y.data[0] == 1.0


def test_one_element_variables_in_a_list_are_numbers_like_torchs_tensors():
    ours = F.tensor([Variable(np.array(1.0)), Variable(np.array([2.0]))])
    theirs = torch.tensor([torch.tensor(1.0, dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64)])
    assert_like_torch(ours, theirs)
    with pytest.raises(ValueError, match="tensor: only one element tensors can be converted to Python scalars"):
        F.tensor([Variable(np.ones(2))])
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        torch.tensor([torch.ones(2)])


@pytest.mark.parametrize("data, error, message", [
    ([[1, 2], [3]], ValueError, r"tensor: expected sequence of length 2 at dim 1 \(got 1\)"),
    ([[1], [2, 3]], ValueError, r"tensor: expected sequence of length 1 at dim 1 \(got 2\)"),
    ([[1, 2], 3], TypeError, r"tensor: not a sequence at dim 1 \(got int\)"),
    ([1, [2]], TypeError, r"tensor: expected a number at dim 1 \(got a list\)"),
    ("abc", TypeError, "tensor: could not infer dtype of str"),
    (None, TypeError, "tensor: could not infer dtype of NoneType"),
    ([None], TypeError, "tensor: could not infer dtype of NoneType"),
    ({1: 2}, TypeError, "tensor: could not infer dtype of dict"),
    (np.array(["a"]), TypeError, "tensor: can't convert an array of dtype <U1"),
    (2**70, ValueError, "tensor: Overflow when unpacking long"),
])
def test_tensor_refuses_what_torch_refuses_naming_itself(data, error, message):
    with pytest.raises(error, match=message):
        F.tensor(data)
    with pytest.raises((TypeError, ValueError, RuntimeError)):
        torch.tensor(data)


@pytest.mark.parametrize("data, dtype, error, message", [
    ([2**40], np.int32, ValueError, "tensor: value cannot be converted to type int32 without overflow"),
    ([300], np.uint8, ValueError, "tensor: value cannot be converted to type uint8 without overflow"),
    ([float("nan")], np.int64, ValueError, "tensor: value cannot be converted to type int64 without overflow"),
    ([1e30], np.int64, ValueError, "tensor: value cannot be converted to type int64 without overflow"),
    ([1 + 2j], np.float32, TypeError, "tensor: can't convert complex to float32"),
])
def test_tensor_refuses_numbers_that_do_not_fit_the_dtype_like_torch(data, dtype, error, message):
    with pytest.raises(error, match=message):
        F.tensor(data, dtype=dtype)
    with pytest.raises((TypeError, RuntimeError)):
        torch.tensor(data, dtype=torch_dtype(dtype))


# Any float32 at all, infinities and subnormals included: tensor() copies them, and torch keeps them as they are.
@given(st.recursive(st.one_of(st.booleans(), st.integers(-2**40, 2**40),
                              floats(allow_nan=False, allow_subnormal=True, width=32)),
                    lambda children: st.lists(children, min_size=1, max_size=3), max_leaves=12))
def test_tensor_of_any_nested_data_agrees_with_torch_or_both_refuse(data):
    try:
        theirs = torch.tensor(data)
    except (TypeError, ValueError, RuntimeError):
        with pytest.raises((TypeError, ValueError)):
            F.tensor(data)
        return
    assert_like_torch(F.tensor(data), theirs)


# ----- requires_grad ---------------------------------------------------------------------------------------------

REQUIRES_FLOAT = "Only Tensors of floating point and complex dtype can require gradients"


@pytest.mark.parametrize("make", [
    lambda m: m.tensor([1, 2], requires_grad=True),
    lambda m: m.zeros(2, dtype=m.long, requires_grad=True),
    lambda m: m.ones(2, dtype=m.bool, requires_grad=True),
    lambda m: m.full((2,), 3, requires_grad=True),
    lambda m: m.eye(2, dtype=m.int32, requires_grad=True),
    lambda m: m.arange(3, requires_grad=True),
    lambda m: m.linspace(0, 4, 3, dtype=m.int64, requires_grad=True),
    lambda m: m.zeros_like(m.tensor([1, 2]), requires_grad=True),
])
def test_an_integer_tensor_cannot_require_grad_like_torch(make):
    with pytest.raises(RuntimeError, match=REQUIRES_FLOAT):
        make(F)
    with pytest.raises(RuntimeError, match=REQUIRES_FLOAT):
        make(torch)


def test_a_floating_point_factory_result_requires_grad_when_asked_and_is_a_leaf():
    for make in (lambda m: m.tensor([1.0], requires_grad=True), lambda m: m.ones(2, requires_grad=True),
                 lambda m: m.randn(2, 2, requires_grad=True), lambda m: m.linspace(0, 1, 3, requires_grad=True)):
        ours, theirs = make(F), make(torch)
        assert ours.requires_grad and ours.is_leaf and theirs.requires_grad and theirs.is_leaf
    (F.ones(3, dtype=F.float64, requires_grad=True) * 2.0).sum().backward()  # a leaf that gets its gradient


# ----- zeros, ones, full, eye --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["zeros", "ones"])
@pytest.mark.parametrize("size", [(2, 3), ((2, 3),), ([2],), ((),), ([],), (0, 4), (np.int64(2), 3)])
@pytest.mark.parametrize("dtype", [None, np.float64, np.int64, np.bool_, np.float16])
def test_zeros_and_ones_take_both_spellings_of_size_and_default_to_float32_like_torch(name, size, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    assert_like_torch(getattr(F, name)(*size, **kwargs), getattr(torch, name)(*size, **kwargs_t))


@pytest.mark.parametrize("size, error, message", [
    ((), TypeError, 'zeros\\(\\) missing 1 required positional arguments: "size"'),
    ((2.5,), TypeError, "zeros\\(\\): argument 'size' must be tuple of ints, but found element of type float"),
    ((True,), TypeError, "zeros\\(\\): argument 'size' must be tuple of ints, but found element of type bool"),
    (("2",), TypeError, "zeros\\(\\): argument 'size' must be tuple of ints, but found element of type str"),
    ((((2,),),), TypeError, "found element of type tuple at pos 0"),
    (((2,), 3), TypeError, "found element of type tuple at pos 0"),
    ((-1,), ValueError, "zeros: Dimension size must be non-negative"),
    ((2, -3), ValueError, "zeros: Dimension size must be non-negative"),
])
def test_zeros_refuses_sizes_torch_refuses(size, error, message):
    with pytest.raises(error, match=message):
        F.zeros(*size)
    with pytest.raises((TypeError, RuntimeError)):
        torch.zeros(*size)


@pytest.mark.parametrize("fill_value", [1.5, 3, True, 1j, -0.0, np.float64(1.5), np.int32(2), np.bool_(False)])
def test_full_infers_its_dtype_from_the_value_like_torch(fill_value):
    assert_like_torch(F.full((2, 3), fill_value), torch.full((2, 3), fill_value))


@pytest.mark.parametrize("fill_value, dtype", [(2.5, np.int64), (-1, np.uint8), (3, np.float64), (0.1, np.float16),
                                               (1.5, np.bool_)])
def test_full_with_a_dtype_converts_the_value_like_torch(fill_value, dtype):
    assert_like_torch(F.full([4], fill_value, dtype=dtype), torch.full([4], fill_value, dtype=torch_dtype(dtype)))


@pytest.mark.parametrize("args, kwargs, error, message", [
    ((2, 1.5), {}, TypeError, "full\\(\\): argument 'size' must be tuple of ints, not int"),
    (((2,), "a"), {}, TypeError, "full\\(\\): argument 'fill_value' must be Number, not str"),
    (((2,), None), {}, TypeError, "full\\(\\): argument 'fill_value' must be Number, not NoneType"),
    (((2,), float("nan")), {"dtype": np.int64}, ValueError, "full: value cannot be converted to type int64"),
    (((2,), 300), {"dtype": np.uint8}, ValueError, "full: value cannot be converted to type uint8"),
])
def test_full_refuses_what_torch_refuses(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        F.full(*args, **kwargs)
    kwargs_t = {k: torch_dtype(v) for k, v in kwargs.items()}
    with pytest.raises((TypeError, RuntimeError)):
        torch.full(*args, **kwargs_t)


def test_a_numpy_complex_fill_value_is_refused_where_torch_drops_its_imaginary_part():
    with pytest.warns(np.exceptions.ComplexWarning):
        theirs = torch.full((2,), np.complex64(1 + 2j))
    assert theirs.dtype == torch.float32 and theirs.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="full: a NumPy complex fill_value loses its imaginary part"):
        F.full((2,), np.complex64(1 + 2j))
    assert_like_torch(F.full((2,), 1 + 2j), torch.full((2,), 1 + 2j))  # a Python complex is complex64 in both


@pytest.mark.parametrize("args", [(3,), (2, 3), (3, 2), (0,), (1, 0)])
@pytest.mark.parametrize("dtype", [None, np.float64, np.int64])
def test_eye_is_torchs(args, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    assert_like_torch(F.eye(*args, **kwargs), torch.eye(*args, **kwargs_t))


@pytest.mark.parametrize("args, error, message", [
    ((-1,), ValueError, "eye: n must be greater or equal to 0, got -1"),
    ((2, -1), ValueError, "eye: m must be greater or equal to 0, got -1"),
    ((2.0,), TypeError, "eye\\(\\): argument 'n' must be int, not float"),
])
def test_eye_refuses_what_torch_refuses(args, error, message):
    with pytest.raises(error, match=message):
        F.eye(*args)
    with pytest.raises((TypeError, RuntimeError)):
        torch.eye(*args)


# ----- arange and linspace ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, dtype", [
    ((5,), None), ((0,), None), ((2, 9), None), ((10, 0, -3), None), ((True,), None),
    ((0, 1, 0.1), None), ((1, 2.5), None), ((np.float64(3),), None), ((-1.5, 2.25, 0.25), np.float64),
    ((1, 10, 3), np.float32), ((0.5, 7.5, 2), np.int32), ((-7, 8, 2), np.int64), ((0, 1, 0.3), np.float16),
])
def test_arange_is_torchs_int64_for_integers_float32_for_a_float(args, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    assert_like_torch(F.arange(*args, **kwargs), torch.arange(*args, **kwargs_t), exact=False)


@given(st.integers(-50, 50), st.integers(-50, 50), st.integers(-7, 7).filter(bool))
def test_arange_of_integers_equals_torchs(start, end, step):
    if (end - start) * step < 0:
        with pytest.raises(ValueError, match="arange: upper bound and lower bound inconsistent with step sign"):
            F.arange(start, end, step)
        return
    assert_like_torch(F.arange(start, end, step), torch.arange(start, end, step))


@given(floats(-100, 100), floats(-100, 100), floats(0.01, 10), st.booleans())
def test_arange_of_floats_has_torchs_count_and_values(start, end, step, down):
    step = -step if down else step
    if (end - start) * step < 0:
        return
    for dtype in (np.float32, np.float64):
        ours, theirs = F.arange(start, end, step, dtype=dtype), torch.arange(start, end, step, dtype=torch_dtype(dtype))
        assert ours.dtype == dtype and ours.shape == tuple(theirs.shape)
        scale = max(abs(start), abs(end), 1.0)  # torch adds the steps up blockwise: a few roundings of this size
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=0, atol=4 * np.finfo(dtype).eps * scale)


@pytest.mark.parametrize("args, error, message", [
    ((0, 1, 0), ValueError, "arange: step must be nonzero"),
    ((0, 1, -1), ValueError, "arange: upper bound and lower bound inconsistent with step sign"),
    ((float("nan"),), ValueError, "arange: unsupported range: 0 -> nan"),
    ((float("inf"),), ValueError, "arange: unsupported range: 0 -> inf"),
    (("3",), TypeError, "arange\\(\\): argument 'end' must be Number, not str"),
])
def test_arange_refuses_what_torch_refuses(args, error, message):
    with pytest.raises(error, match=message):
        F.arange(*args)
    with pytest.raises((TypeError, RuntimeError)):
        torch.arange(*args)


def test_arange_casts_its_bounds_to_an_integer_dtype_first_like_torch():
    with pytest.raises(ValueError, match="arange: step must be nonzero"):  # step 0.5 becomes 0
        F.arange(0, 2.5, 0.5, dtype=F.int64)
    with pytest.raises(ValueError, match="step must be nonzero"):
        torch.arange(0, 2.5, 0.5, dtype=torch.int64)


@pytest.mark.parametrize("args, dtype", [
    ((0, 1, 5), None), ((0, 1, 0), None), ((3, 1, 1), None), ((0, 10, 5), None), ((0, 10, 5), np.int64),
    ((0.5, 10.7, 7), np.int64), ((0, 1j, 3), None), ((-3.3, 7.7, 11), np.float64), ((0, 1, 9), np.float16),
    ((-3.3, 7.7, 100), None), ((2, -5, 1000), np.float64),
])
def test_linspace_is_torchs_with_both_ends_exact(args, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    ours, theirs = F.linspace(*args, **kwargs), torch.linspace(*args, **kwargs_t)
    assert ours.dtype == numpy_dtype(theirs.dtype) and ours.shape == tuple(theirs.shape)
    if ours.dtype.kind in "iuc" or ours.data.size < 2:
        np.testing.assert_array_equal(ours.data, theirs.numpy())
        return
    scale = max(abs(args[0]), abs(args[1]))  # torch's vectorised loop rounds blockwise, off by a few ulps of this
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=0, atol=4 * np.finfo(ours.dtype).eps * scale)
    assert ours.data[0] == ours.dtype.type(args[0]) and ours.data[-1] == ours.dtype.type(args[1])


@pytest.mark.parametrize("args, error, message", [
    ((0, 1, -1), ValueError, "linspace: number of steps must be non-negative"),
    ((0, 1, 2.5), TypeError, "linspace\\(\\): argument 'steps' must be int, not float"),
    ((0, "1", 3), TypeError, "linspace\\(\\): argument 'end' must be Number, not str"),
])
def test_linspace_refuses_what_torch_refuses(args, error, message):
    with pytest.raises(error, match=message):
        F.linspace(*args)
    with pytest.raises((TypeError, RuntimeError)):
        torch.linspace(*args)


# ----- rand and randn ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rand", "randn"])
@pytest.mark.parametrize("size", [(2, 3), ((2, 3),), ((),), (0,)])
@pytest.mark.parametrize("dtype", [None, np.float64, np.float16])
def test_rand_and_randn_have_torchs_shape_and_dtype(name, size, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    ours, theirs = getattr(F, name)(*size, **kwargs), getattr(torch, name)(*size, **kwargs_t)
    assert ours.dtype == numpy_dtype(theirs.dtype) and ours.shape == tuple(theirs.shape)
    assert isinstance(ours.data, np.ndarray) and not ours.requires_grad


@pytest.mark.parametrize("name", ["rand", "randn"])
def test_manual_seed_makes_rand_and_randn_reproducible(name):
    tinypytorch.manual_seed(7)
    first = [getattr(F, name)(4, 3).data for _ in range(2)]
    tinypytorch.manual_seed(7)
    again = [getattr(F, name)(4, 3).data for _ in range(2)]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])  # the stream moves on


def test_the_numbers_are_the_frameworks_generators():
    tinypytorch.manual_seed(3)
    u, z = F.rand(5, dtype=F.float64), F.randn(5, dtype=F.float64)
    reference = np.random.Generator(np.random.PCG64(3))  # the default generator, started afresh from seed 3
    np.testing.assert_array_equal(u.data, reference.random(5))
    np.testing.assert_array_equal(z.data, reference.standard_normal(5))
    tinypytorch.manual_seed(3)
    u32 = F.rand(5)
    np.testing.assert_array_equal(u32.data, np.floor(np.random.Generator(np.random.PCG64(3)).random(5) * 2**24) / 2**24)


def test_rand_stays_below_one_in_every_dtype():
    largest = np.array([1 - 2.0**-53])  # what rounding to nearest would turn into 1.0 in float32 and float16
    for dtype in (np.float16, np.float32, np.float64):
        assert F._below_one(np, largest, np.dtype(dtype))[0] < 1
    tinypytorch.manual_seed(0)
    u = F.rand(100_000, dtype=F.float16).data
    assert u.min() >= 0 and u.max() < 1


def test_rand_and_randn_have_the_moments_of_their_distributions():
    tinypytorch.manual_seed(1)
    u, z = F.rand(200_000, dtype=F.float64).data, F.randn(200_000, dtype=F.float64).data
    # uniform [0, 1): mean 1/2, variance 1/12; normal: 0 and 1 (5 standard errors of 200,000 draws)
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / 200_000) and abs(u.var() - 1 / 12) < 1e-3
    assert abs(z.mean()) < 5 / np.sqrt(200_000) and abs(z.std() - 1) < 5e-3


@pytest.mark.parametrize("make", [lambda m: m.rand(2, dtype=m.int64), lambda m: m.randn(2, dtype=m.bool),
                                  lambda m: m.rand_like(m.tensor([1, 2]))])
def test_rand_refuses_integer_dtypes_like_torch(make):
    with pytest.raises(TypeError, match="must be a floating point dtype"):
        make(F)
    with pytest.raises((NotImplementedError, RuntimeError)):
        make(torch)


# ----- *_like and dtype names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "rand_like", "randn_like"])
@pytest.mark.parametrize("dtype", [None, np.float64, np.float16])
def test_like_takes_shape_dtype_and_device_of_its_input_like_torch(name, dtype):
    kwargs, kwargs_t = ({}, {}) if dtype is None else ({"dtype": dtype}, {"dtype": torch_dtype(dtype)})
    x, xt = F.ones(2, 3, dtype=F.float32, requires_grad=True), torch.ones(2, 3, requires_grad=True)
    ours, theirs = getattr(F, name)(x, **kwargs), getattr(torch, name)(xt, **kwargs_t)
    assert ours.dtype == numpy_dtype(theirs.dtype) and ours.shape == tuple(theirs.shape) and ours.device == x.device
    assert not ours.requires_grad and not theirs.requires_grad  # not inherited from the input
    if name in ("zeros_like", "ones_like"):
        assert_like_torch(ours, theirs)


def test_full_like_converts_the_value_to_the_inputs_dtype_like_torch():
    assert_like_torch(F.full_like(F.tensor([1, 2]), 2.7), torch.full_like(torch.tensor([1, 2]), 2.7))
    assert_like_torch(F.full_like(F.zeros(3), 2.7, dtype=F.double),
                      torch.full_like(torch.zeros(3), 2.7, dtype=torch.double))


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "rand_like", "randn_like"])
def test_like_refuses_an_array_like_torch(name):
    with pytest.raises(TypeError, match=f"{name}\\(\\): argument 'input' must be a Variable, not ndarray"):
        getattr(F, name)(np.ones(2))
    with pytest.raises(TypeError, match="must be Tensor, not numpy.ndarray"):
        getattr(torch, name)(np.ones(2))


@pytest.mark.parametrize("array, error", [([1.0, 2.0], "from_numpy: expected np.ndarray \\(got list\\)"),
                                          (np.array(["a"]), "from_numpy: can't convert an array of dtype <U1")])
def test_from_numpy_refuses_what_torch_refuses(array, error):
    with pytest.raises(TypeError, match=error):
        F.from_numpy(array)
    with pytest.raises(TypeError):
        torch.from_numpy(array)


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "int32", "int64", "bool", "half", "float", "double",
                                  "long"])
def test_dtype_names_are_torchs_as_numpy_dtypes(name):
    assert np.dtype(getattr(F, name)) == numpy_dtype(getattr(torch, name))


def test_a_dtype_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="zeros: dtype must be a dtype such as tinypytorch.float32"):
        F.zeros(2, dtype="not a dtype")
    with pytest.raises(TypeError, match="tensor: dtype <U0? ?is not a dtype a tensor holds"):
        F.tensor([1], dtype=np.str_)


# ----- devices -----------------------------------------------------------------------------------------------------

MAKERS = {
    "tensor": lambda device: F.tensor([[1.0, 2.0]], device=device),
    "zeros": lambda device: F.zeros(2, 3, device=device),
    "ones": lambda device: F.ones((2,), dtype=F.int64, device=device),
    "full": lambda device: F.full((2,), 1.5, device=device),
    "eye": lambda device: F.eye(3, device=device),
    "arange": lambda device: F.arange(0, 1, 0.25, device=device),
    "linspace": lambda device: F.linspace(-1, 1, 5, device=device),
    "rand": lambda device: F.rand(4, device=device),
    "randn": lambda device: F.randn(4, device=device),
}


@pytest.mark.parametrize("name", MAKERS)
def test_factories_make_their_arrays_on_the_device_asked(name, xp):
    device = "cpu" if xp is np else "cuda"
    made = MAKERS[name](device)
    assert cuda.get_array_module(made.data) is xp and made.device.type == device
    if name not in ("rand", "randn"):  # the same values as on the CPU
        np.testing.assert_array_equal(cuda.as_numpy(made.data), MAKERS[name]("cpu").data)


def test_random_factories_on_a_device_draw_from_its_generator_and_manual_seed_fixes_them(xp):
    if xp is np:
        pytest.skip("the device's generator")
    tinypytorch.manual_seed(5)
    u, z = F.rand(1000, device="cuda"), F.randn(1000, device="cuda")
    tinypytorch.manual_seed(5)
    np.testing.assert_array_equal(cuda.as_numpy(F.rand(1000, device="cuda").data), cuda.as_numpy(u.data))
    u, z = cuda.as_numpy(u.data), cuda.as_numpy(z.data)
    assert u.min() >= 0 and u.max() < 1 and abs(z.mean()) < 0.2 and abs(z.std() - 1) < 0.1


@pytest.mark.parametrize("name", MAKERS)
def test_cuda_without_a_gpu_is_a_clear_error_naming_the_factory(name):
    if cuda.GPU:
        pytest.skip("a GPU is usable here")
    with pytest.raises(RuntimeError, match=f"^{name}: cannot make a tensor on cuda: "):
        MAKERS[name]("cuda")


def test_every_factory_has_torchs_name_and_keyword_only_options_as_torch():
    for factory in FACTORIES:
        assert hasattr(torch, factory.__name__)
        parameters = inspect.signature(factory).parameters
        for name in ("dtype", "device", "requires_grad"):
            if name in parameters:
                assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        torch.zeros(2, torch.float64)  # torch: dtype is keyword-only
    with pytest.raises(TypeError):
        F.zeros(2, F.float64)  # a dtype is not a size
