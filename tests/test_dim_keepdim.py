"""PyTorch's spellings of the reductions, dim= and keepdim= (with NumPy's axis= and keepdims=, which steps 30
and 50 use), PyTorch's max and min (the named tuple of max(x, dim)), argmax, argmin and norm, against PyTorch
in float64. Every expected value comes from torch."""
import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from reference import assert_close_to_torch, floats
from tinypytorch import Variable
from tinypytorch import classification as C
from tinypytorch import functions as F

pytestmark = [pytest.mark.torch]

# Elements drawn often from a few values, so that maxima and minima tie, and slices of zeros occur
ELEMENTS = floats(-2.0, 2.0) | st.sampled_from([-1.0, 0.0, 1.0])
SHAPES = array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)


@st.composite
def dims(draw, ndim, single=False):
    """A dim argument for `ndim` dimensions, as PyTorch takes it: None, an int (negative allowed) or, unless
    `single`, a tuple of distinct dims (the empty tuple meaning every dim)."""
    n = max(ndim, 1)  # a 0-d variable has dims 0 and -1
    one = st.integers(-n, n - 1)
    if single:
        return draw(st.none() | one)
    several = st.lists(one, max_size=n, unique_by=lambda d: d % n).map(tuple)
    return draw(st.none() | one | several)


@st.composite
def cases(draw, single=False):
    """(array, dim, keepdim)"""
    x = draw(arrays(np.float64, SHAPES, elements=ELEMENTS))
    return x, draw(dims(x.ndim, single)), draw(st.booleans())


def torch_dims(dim, ndim):
    """`dim` for torch's functions that want dims listed: every dim for None or ()."""
    if dim is None or dim == ():
        return tuple(range(ndim)) or 0  # (a 0-d tensor: dim 0)
    return dim


def weighted_sum_grads(y, yt, xs, ts, seed=0):
    """Backpropagate sum(w * y) in both frameworks (w fixed random weights); the gradients, ours and torch's."""
    w = np.random.default_rng(seed).uniform(-1.0, 1.0, tuple(yt.shape))
    (y * Variable(w, requires_grad=False)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    return [(x.grad.data, t.grad.numpy()) for x, t in zip(xs, ts)]


# ----- reductions: dim= and keepdim=, and NumPy's spellings -----------------------------------------------------

REDUCTIONS = {  # name: (ours(x, dim, keepdim), torch's(t, dim, keepdim))
    "sum": (lambda x, d, k: F.sum(x, dim=d, keepdim=k), lambda t, d, k: torch.sum(t, dim=d, keepdim=k)),
    "mean": (lambda x, d, k: F.mean(x, dim=d, keepdim=k), lambda t, d, k: torch.mean(t, dim=d, keepdim=k)),
    "amax": (lambda x, d, k: F.amax(x, dim=d, keepdim=k), lambda t, d, k: torch.amax(t, torch_dims(d, t.ndim), k)),
    "amin": (lambda x, d, k: F.amin(x, dim=d, keepdim=k), lambda t, d, k: torch.amin(t, torch_dims(d, t.ndim), k)),
    "logsumexp": (lambda x, d, k: F.logsumexp(x, dim=d, keepdim=k),
                  lambda t, d, k: torch.logsumexp(t, torch_dims(d, t.ndim), k)),
    "norm": (lambda x, d, k: F.norm(x, dim=d, keepdim=k), lambda t, d, k: torch.norm(t, dim=d, keepdim=k)),
    "norm p=2": (lambda x, d, k: F.norm(x, p=2, dim=d, keepdim=k), lambda t, d, k: torch.norm(t, 2, d, k)),
    "norm p=1": (lambda x, d, k: F.norm(x, 1, d, k), lambda t, d, k: torch.norm(t, 1, torch_dims(d, t.ndim), k)),
}
NUMPY_SPELLING = {"sum": F.sum, "mean": F.mean, "amax": F.amax, "amin": F.amin, "logsumexp": F.logsumexp}


@pytest.mark.parametrize("name", REDUCTIONS)
@given(case=cases())
def test_reductions_with_dim_and_keepdim_give_torchs_values_and_gradients(name, case):
    values, dim, keepdim = case
    if name == "norm" and isinstance(dim, tuple) and len(dim) > 2:
        dim = dim[:2]  # the Frobenius norm (the default p) is of vectors and matrices, in both
    if name.startswith("norm"):
        # where x * x underflows torch is not consistent (a 0-d x over dim 0 has norm 0, over dim None |x|)
        assume(not np.any((values != 0) & (np.abs(values) < 1e-150)))
    ours, theirs = REDUCTIONS[name]
    x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = ours(x, dim, keepdim), theirs(t, dim, keepdim)
    assert y.shape == tuple(yt.shape), (dim, keepdim)
    assert_close_to_torch(y.data, yt.detach().numpy(), f"{name}, dim={dim}, keepdim={keepdim}")
    ((g, gt),) = weighted_sum_grads(y, yt, [x], [t])
    assert_close_to_torch(g, gt, f"{name} gradient, dim={dim}, keepdim={keepdim}")


@pytest.mark.parametrize("name", NUMPY_SPELLING)
@given(case=cases())
def test_numpys_axis_and_keepdims_mean_what_dim_and_keepdim_mean_where_both_have_the_same_meaning(name, case):
    values, dim, keepdim = case
    if values.ndim == 0 and dim is not None or dim == ():
        dim = None  # where they differ: NumPy's 0-d array has no axis 0, and axis=() reduces nothing
    ours, theirs = REDUCTIONS[name]
    x, t = Variable(values), torch.tensor(values)
    y, yt = NUMPY_SPELLING[name](x, axis=dim, keepdims=keepdim), theirs(t, dim, keepdim)
    assert y.shape == tuple(yt.shape)
    assert_close_to_torch(y.data, yt.numpy(), f"{name}(axis={dim}, keepdims={keepdim})")


def test_dim_may_be_given_by_position_as_in_torch_and_keepdim_too():
    values = np.arange(24.0).reshape(2, 3, 4) - 7.0
    x, t = Variable(values), torch.tensor(values)
    for ours, theirs in [(F.sum(x, 1), t.sum(1)), (F.sum(x, (0, 2), True), t.sum((0, 2), True)),
                         (F.mean(x, -1, True), t.mean(-1, True)), (F.amax(x, (1, -1)), t.amax((1, -1))),
                         (F.amin(x, 0, True), t.amin(0, True)), (F.logsumexp(x, 2), torch.logsumexp(t, 2)),
                         (F.norm(x, "fro", (0, 1)), torch.norm(t, "fro", (0, 1)))]:
        assert ours.shape == tuple(theirs.shape)
        assert_close_to_torch(ours.data, theirs.numpy())


def test_an_empty_dim_tuple_reduces_every_dim_as_in_torch_but_numpys_empty_axis_tuple_none():
    values = np.arange(6.0).reshape(2, 3)
    x, t = Variable(values), torch.tensor(values)
    np.testing.assert_array_equal(F.sum(x, dim=()).data, torch.sum(t, dim=()).numpy())
    np.testing.assert_array_equal(F.mean(x, ()).data, torch.mean(t, ()).numpy())
    np.testing.assert_array_equal(F.amax(x, ()).data, torch.amax(t, ()).numpy())
    np.testing.assert_array_equal(F.sum(x, axis=()).data, np.sum(values, axis=()))


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "logsumexp"])
def test_a_dim_out_of_range_is_an_index_error_and_a_repeated_dim_an_error_as_in_torch(op):
    ours, theirs = getattr(F, op), getattr(torch, op)
    x, t = Variable(np.ones((2, 3))), torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(IndexError, match="Dimension out of range"):
        theirs(t, 2)
    with pytest.raises(IndexError, match=rf"^{op}: dim 2 is out of range .*\[-2, 1\]"):
        ours(x, 2)
    with pytest.raises(IndexError, match=f"^{op}: dim -3 is out of range"):
        ours(x, (0, -3))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        theirs(t, (0, -2))
    with pytest.raises(ValueError, match=f"^{op}: dim 0 appears multiple times"):
        ours(x, (0, -2))
    with pytest.raises(TypeError, match=f"^{op}: dim must be an int or a tuple of ints"):
        ours(x, 1.0)
    # NumPy's spelling keeps NumPy's (and step 30's) error
    with pytest.raises(ValueError, match=f"^{op}: axis 2 is out of range"):
        ours(x, axis=2)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "logsumexp"])
def test_both_spellings_of_one_argument_is_a_type_error_naming_the_function(op):
    x = Variable(np.ones((2, 3)))
    with pytest.raises(TypeError, match=f"^{op}: got both dim and axis"):
        getattr(F, op)(x, dim=0, axis=0)
    with pytest.raises(TypeError, match=f"^{op}: got both dim and axis"):
        getattr(F, op)(x, 1, axis=1)
    with pytest.raises(TypeError, match=f"^{op}: got both keepdim and keepdims"):
        getattr(F, op)(x, axis=0, keepdim=True, keepdims=True)
    # torch refuses the two names at once too
    with pytest.raises(TypeError):
        torch.sum(torch.ones(2, 3), dim=0, axis=0)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_takes_dim_by_position_or_name_and_numpys_axis_and_refuses_both_or_none(op):
    values = np.random.default_rng(0).normal(size=(3, 4))
    x, t = Variable(values), torch.tensor(values)
    ours = getattr(C, op)
    for dim in (0, 1, -1):
        expected = getattr(torch, op)(t, dim).numpy()
        for y in (ours(x, dim), ours(x, dim=dim), ours(x, axis=dim)):
            assert_close_to_torch(y.data, expected, f"{op} dim {dim}")
    with pytest.raises(TypeError, match=f"^{op}: got both dim and axis"):
        ours(x, dim=1, axis=1)
    with pytest.raises(TypeError, match=f"^{op}: missing the dim"):
        ours(x)
    with pytest.raises(IndexError, match=f"^{op}: dim 2 is out of range"):
        ours(x, 2)
    with pytest.raises(IndexError):
        getattr(torch, op)(t, 2)


# ----- max and min as PyTorch's --------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["max", "min"])
@given(case=cases(single=True))
def test_max_and_min_over_a_dim_give_torchs_named_tuple_and_send_the_gradient_to_its_index(op, case):
    values, dim, keepdim = case
    if dim is None:
        dim = -1
    x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    result, expected = getattr(F, op)(x, dim, keepdim=keepdim), getattr(torch, op)(t, dim, keepdim=keepdim)
    values_, indices = result  # a tuple, as torch's
    assert type(result).__name__ == type(expected).__name__ == op
    assert result._fields == ("values", "indices") and values_ is result.values and indices is result.indices
    assert result.values.shape == tuple(expected.values.shape) and indices.shape == tuple(expected.indices.shape)
    np.testing.assert_array_equal(result.values.data, expected.values.detach().numpy())
    np.testing.assert_array_equal(indices.data, expected.indices.numpy())  # ties: the first, as torch picks
    assert indices.dtype == np.int64 and not indices.requires_grad and indices.creator is None
    ((g, gt),) = weighted_sum_grads(result.values, expected.values, [x], [t])
    np.testing.assert_array_equal(g, gt)  # all of each gradient to the one index


@pytest.mark.parametrize("op", ["max", "min"])
@given(values=arrays(np.float64, SHAPES, elements=ELEMENTS))
def test_max_and_min_of_every_element_split_the_gradient_evenly_among_ties_as_torch(op, values):
    x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = getattr(F, op)(x), getattr(torch, op)(t)
    assert y.shape == () and y.data == yt.item()
    y.backward()
    yt.backward()
    assert_close_to_torch(x.grad.data, t.grad.numpy(), op)


@pytest.mark.parametrize("op, twin", [("max", torch.amax), ("min", torch.amin)])
@given(case=cases())
def test_max_and_min_with_numpys_axis_give_the_values_only_as_amax_and_amin(op, twin, case):
    values, dim, keepdim = case
    if values.ndim == 0 or dim == ():
        dim = None
    x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = getattr(F, op)(x, axis=dim, keepdims=keepdim), twin(t, torch_dims(dim, t.ndim), keepdim)
    assert isinstance(y, Variable) and y.shape == tuple(yt.shape)
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    ((g, gt),) = weighted_sum_grads(y, yt, [x], [t])
    assert_close_to_torch(g, gt, f"{op}(axis={dim})")


def test_a_tie_goes_to_the_first_index_over_a_dim_and_is_shared_by_amax_as_in_torch():
    values = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    for reduce in (lambda v, m: m.max(v, 1).values, lambda v, m: m.amax(v, 1), lambda v, m: m.min(v, 1).values):
        x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
        reduce(x, F).sum().backward()
        reduce(t, torch).sum().backward()
        np.testing.assert_array_equal(x.grad.data, t.grad.numpy())
    assert np.array_equal(F.max(Variable(values), 1).indices.data, [1, 0])


def test_max_over_a_dim_of_a_0d_variable_and_its_errors_are_torchs():
    x, t = Variable(np.array(2.5)), torch.tensor(2.5, dtype=torch.float64)
    for dim in (0, -1):
        for keepdim in (False, True):
            ours, theirs = F.max(x, dim, keepdim), torch.max(t, dim, keepdim)
            assert ours.values.shape == tuple(theirs.values.shape) == ()
            assert ours.indices.data == theirs.indices.item() == 0
    with pytest.raises(IndexError, match="max: dim 2 is out of range"):
        F.max(Variable(np.ones((2, 3))), 2)
    with pytest.raises(TypeError, match="max: a dim must be an int"):
        F.max(Variable(np.ones((2, 3))), (0, 1))
    with pytest.raises(TypeError):
        torch.max(torch.ones(2, 3), (0, 1))
    with pytest.raises(TypeError, match="min: keepdim=True needs a dim"):
        F.min(Variable(np.ones((2, 3))), keepdim=True)
    with pytest.raises(TypeError):
        torch.min(torch.ones(2, 3), keepdim=True)
    for fw, x in ((torch, torch.ones(0, 3)), (F, Variable(np.ones((0, 3))))):
        with pytest.raises(IndexError, match=r"^max\(\): Expected reduction dim 0 to have non-zero size\.$"):
            fw.max(x, 0)
        with pytest.raises(IndexError, match=r"^amax\(\): Expected reduction dim -2 to have non-zero size\.$"):
            fw.amax(x, -2)
        with pytest.raises(RuntimeError, match=r"^min\(\): Expected reduction dim to be specified for input"):
            fw.min(x)


# ----- argmax and argmin -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["argmax", "argmin"])
@given(case=cases(single=True))
def test_argmax_and_argmin_give_torchs_int64_indices_ties_first_and_record_nothing(op, case):
    values, dim, keepdim = case
    x, t = Variable(values), torch.tensor(values, requires_grad=True)
    ours, theirs = getattr(F, op)(x, dim, keepdim), getattr(torch, op)(t, dim, keepdim)
    assert ours.shape == tuple(theirs.shape) and ours.dtype == np.int64
    np.testing.assert_array_equal(ours.data, theirs.numpy())
    assert not ours.requires_grad and ours.creator is None
    spelled = getattr(F, op)(x, dim=dim, keepdim=keepdim)
    np.testing.assert_array_equal(spelled.data, theirs.numpy())
    if values.ndim:  # NumPy's spelling, where NumPy has the same meaning
        np.testing.assert_array_equal(getattr(F, op)(x, axis=dim, keepdims=keepdim).data, theirs.numpy())


def test_argmax_of_an_empty_variable_is_refused_as_in_torch():
    for fw, x in ((torch, torch.ones(0, 3)), (F, Variable(np.ones((0, 3))))):
        with pytest.raises(IndexError, match=r"^argmax\(\): Expected reduction dim to be specified for input\.numel"):
            fw.argmax(x)
        with pytest.raises(IndexError, match=r"^argmin\(\): Expected reduction dim 0 to have non-zero size\.$"):
            fw.argmin(x, 0)
    np.testing.assert_array_equal(F.argmin(Variable(np.ones((0, 3))), 1).data, torch.argmin(torch.ones(0, 3), 1))


# ----- norm -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [1, 2, "fro"])
def test_the_norms_gradient_where_the_norm_is_zero_is_torchs_zero(p):
    values = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0]])
    for dim in (None, 1, (0, 1)):
        x, t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
        ((g, gt),) = weighted_sum_grads(F.norm(x, p, dim), torch.norm(t, p, dim), [x], [t])
        assert np.isfinite(g).all()
        assert_close_to_torch(g, gt, f"p={p}, dim={dim}")


def test_a_norm_other_than_1_2_or_fro_is_refused_and_so_is_fro_over_more_than_2_dims_as_in_torch():
    with pytest.raises(ValueError, match="norm: p=3 is not supported; p is 1, 2 or 'fro'"):
        F.norm(Variable(np.ones(3)), 3)
    with pytest.raises(ValueError, match="norm: p='fro' takes at most 2 dims"):
        F.norm(Variable(np.ones((2, 2, 2))), dim=(0, 1, 2))
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple"):
        torch.norm(torch.ones(2, 2, 2), dim=(0, 1, 2))
