"""Three places where tinypytorch now does what PyTorch does, each against torch:

- DataLoader batches samples by torch's default_collate rules (lists of pairs, Python numbers, nested tuples, dicts);
- gradcheck evaluates the function in the caller's grad mode, so a function that registers a hook passes;
- what a saved_tensors_hooks unpack hook returns counts its own in-place changes unless it is the saved tensor."""
import collections

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.autograd.gradcheck import GradcheckError as TorchGradcheckError

import tinypytorch
from tinypytorch import Variable, autograd, cuda, no_grad
from tinypytorch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.utils.data import DataLoader, default_collate
from reference import floats

pytestmark = pytest.mark.torch

MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


# ----- default_collate -------------------------------------------------------------------------------------------

Point = collections.namedtuple("Point", "x y")

SAMPLES = {  # each a function of the framework: its own arrays (NumPy for both) or tensors (a Variable, a tensor)
    "(array, int) pairs": lambda m: [(np.full(3, i, np.float64), i) for i in range(5)],
    "(float32 Variable, int) pairs": lambda m: [(_vector(m, i), i) for i in range(5)],
    "(list of floats, int)": lambda m: [([0.5 * i, 1.5 * i], i % 2) for i in range(5)],
    "Python floats": lambda m: [0.25 * i for i in range(5)],
    "Python ints": lambda m: list(range(5)),
    "bools": lambda m: [i % 2 == 0 for i in range(5)],
    "ints then a float": lambda m: [1, 2, 3.5, 4, 5],
    "NumPy scalars": lambda m: [(np.float32(i), np.int32(i), np.bool_(i % 2)) for i in range(5)],
    "nested tuples": lambda m: [((np.ones(2) * i, 1.5 * i), i % 2 == 0) for i in range(5)],
    "dicts": lambda m: [{"image": np.eye(2) * i, "label": i, "weight": 0.5} for i in range(5)],
    "namedtuples": lambda m: [Point(np.arange(3.0) + i, i) for i in range(5)],
    "a list per sample": lambda m: [[i, 2.0 * i, np.full(2, i)] for i in range(5)],
    "strings beside numbers": lambda m: [(f"sample {i}", i) for i in range(5)],
    "0-d arrays": lambda m: [np.array(i, np.float16) for i in range(5)],
    "one-field tuples": lambda m: [(np.arange(2) + i,) for i in range(5)],
}


def _vector(m, i):
    values = np.full(3, float(i), np.float32)
    return torch.from_numpy(values) if m is torch else Variable(values, requires_grad=False)


def described(batch):
    """A batch as nested plain data: containers by kind, tensors as (dtype, shape, values)."""
    if isinstance(batch, (Variable, torch.Tensor)):
        array = batch.data if isinstance(batch, Variable) else batch.numpy()
        return "tensor", str(array.dtype), tuple(array.shape), array.tolist()
    if isinstance(batch, dict):
        return type(batch).__name__, {key: described(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch).__name__, [described(b) for b in batch]
    return batch


@pytest.mark.parametrize("batch_size", [1, 2, 5])
@pytest.mark.parametrize("samples", SAMPLES.values(), ids=SAMPLES.keys())
def test_loader_batches_are_torchs_for_the_same_samples(samples, batch_size):
    ours = [described(b) for b in DataLoader(samples(tinypytorch), batch_size=batch_size)]
    theirs = [described(b) for b in torch.utils.data.DataLoader(samples(torch), batch_size=batch_size)]
    assert ours == theirs


@pytest.mark.parametrize("samples", SAMPLES.values(), ids=SAMPLES.keys())
def test_default_collate_is_torchs(samples):
    assert described(default_collate(samples(tinypytorch))) == described(
        torch.utils.data.default_collate(samples(torch)))


def test_collated_arrays_need_no_gradient_and_a_pair_unpacks_into_inputs_and_targets():
    x, t = next(iter(DataLoader([(np.ones(2), 1), (np.zeros(2), 0)], batch_size=2)))
    assert isinstance(x, Variable) and not x.requires_grad and x.dtype == np.float64
    assert t.dtype == np.int64 and t.data.tolist() == [1, 0]


def test_samples_that_require_grad_are_stacked_into_the_graph_like_torch():
    values = [np.array([1.0, 2.0]), np.array([3.0, -1.0])]
    leaves = [Variable(v.copy()) for v in values]
    leaves_t = [torch.tensor(v, requires_grad=True) for v in values]
    batch, batch_t = default_collate(leaves), torch.utils.data.default_collate(leaves_t)
    assert batch.requires_grad and batch_t.requires_grad
    weights = np.array([[1.0, 2.0], [3.0, 4.0]])
    (batch * weights).sum().backward()
    (batch_t * torch.from_numpy(weights)).sum().backward()
    for leaf, leaf_t in zip(leaves, leaves_t):
        np.testing.assert_array_equal(leaf.grad.data, leaf_t.grad.numpy())
    with no_grad():  # in no_grad mode it records nothing, as torch.stack
        assert not default_collate(leaves).requires_grad


@pytest.mark.parametrize("samples, error, message, torch_message", [
    ([([1, 2], 0), ([3], 1)], RuntimeError, "^each element in list of batch should be of equal size$",
     "each element in list of batch should be of equal size"),
    ([(np.ones(2), 0), (np.ones(3), 1)], RuntimeError,
     r"^stack expects each tensor to be equal size, but got \[2\] at entry 0 and \[3\] at entry 1$",
     r"^stack expects each tensor to be equal size, but got \[2\] at entry 0 and \[3\] at entry 1$"),
    ([None, None], TypeError, "default_collate: batch must contain arrays, Variables, numbers, dicts or lists; "
                              "found NoneType", "default_collate: batch must contain tensors"),
    ([{1}, {2}], TypeError, "found set", "found <class 'set'>"),
    ([np.array(["a"]), np.array(["b"])], TypeError, "found an array of dtype <U1", "found <U1"),
    ([1, "a"], TypeError, "default_collate: could not infer dtype of str", "invalid data type 'str'"),
])
def test_batches_torch_cannot_make_are_refused_with_torchs_reason(samples, error, message, torch_message):
    with pytest.raises(error, match=message):
        next(iter(DataLoader(samples, batch_size=2)))
    with pytest.raises((RuntimeError, TypeError), match=torch_message):
        next(iter(torch.utils.data.DataLoader(samples, batch_size=2)))


def test_a_dict_and_list_batch_lands_on_the_loaders_device(xp):
    device = "cpu" if xp is np else "cuda"
    samples = [{"x": np.ones(2) * i, "pair": (i, 0.5 * i), "name": f"s{i}"} for i in range(4)]
    batch = next(iter(DataLoader(samples, batch_size=4, device=device)))
    for v in (batch["x"], *batch["pair"]):
        assert cuda.get_array_module(v.data) is xp
    assert batch["name"] == ["s0", "s1", "s2", "s3"]  # torch: a field of strings stays as it was collected


# ----- gradcheck runs the function in the caller's grad mode ---------------------------------------------------------

def hooked(m):
    """x -> (2x)^2, with a hook on the intermediate 2x that looks at its gradient and returns nothing."""
    def fn(x):
        h = x * 2.0
        h.register_hook(lambda g: None)
        return h * h
    return fn


def retaining(m):
    """x -> sin(3x), keeping the intermediate's gradient (retain_grad needs it to require grad)."""
    def fn(x):
        h = x * 3.0
        h.retain_grad()
        return m.sin(h)
    return fn


def hook_scaling_back(m):
    """x -> x * y with y = 2x, a hook on y that doubles y's gradient: what backward computes is not f's gradient."""
    def fn(x):
        y = x * 2.0
        y.register_hook(lambda g: g * 2.0)
        return x * y
    return fn


@pytest.mark.parametrize("make", [hooked, retaining])
def test_a_function_that_registers_a_hook_or_retains_a_grad_passes_gradcheck_in_both(make):
    x0 = np.array([0.3, -1.2, 2.0])
    assert torch.autograd.gradcheck(make(torch), (torch.tensor(x0, requires_grad=True),))
    assert gradcheck(make(tinypytorch), (Variable(x0.copy()),))
    assert torch.autograd.gradgradcheck(make(torch), (torch.tensor(x0, requires_grad=True),))
    assert gradgradcheck(make(tinypytorch), (Variable(x0.copy()),))


def test_a_hook_that_changes_the_gradient_fails_gradcheck_in_both_with_the_jacobian_error():
    x0 = np.array([0.3, -1.2])
    with pytest.raises(TorchGradcheckError, match="Jacobian mismatch"):
        torch.autograd.gradcheck(hook_scaling_back(torch), (torch.tensor(x0, requires_grad=True),))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck(hook_scaling_back(tinypytorch), (Variable(x0.copy()),))


def test_the_inputs_are_left_as_they_were():
    x = Variable(np.array([0.3, -1.2, 2.0]))
    before = x.data.copy()
    gradcheck(hooked(tinypytorch), (x,))
    np.testing.assert_array_equal(x.data, before)
    assert x.grad is None and x.is_leaf


# ----- unpack hooks: a copy counts its own versions -------------------------------------------------------------------

def second_derivative_after_changing_x(m, pack, unpack, x0):
    """y = sum x^3 under the hooks; g = dy/dx with create_graph (its graph saves what unpack gave); then x += 1
    in place, under no_grad; then d(sum g)/dx: the gradient (6x, x as it was) or the error."""
    x = torch.tensor(x0, requires_grad=True) if m is torch else Variable(x0.copy())
    hooks = torch.autograd.graph.saved_tensors_hooks if m is torch else saved_tensors_hooks
    with hooks(pack, unpack):
        y = (x**3).sum()
    (g,) = (torch.autograd if m is torch else autograd).grad(y, x, create_graph=True)
    with torch.no_grad() if m is torch else no_grad():
        x.add_(1.0)
    try:
        (gg,) = (torch.autograd if m is torch else autograd).grad(g.sum(), x)
    except RuntimeError as error:
        return error
    return gg.numpy() if m is torch else gg.data


COPYING = {  # (torch's pack, unpack), (ours), the x that backward sees
    "a copy made when packing": ((lambda t: t.clone(), lambda t: t), (lambda v: v.data.copy(), lambda a: a),
                                 lambda x0: x0),
    "a copy made when packing, as a Variable": ((lambda t: t.clone(), lambda t: t),
                                                (lambda v: Variable(v.data.copy(), requires_grad=False),
                                                 lambda v: v), lambda x0: x0),
    "a copy made when unpacking": ((lambda t: t, lambda t: t.clone()), (lambda v: v, lambda v: v.data.copy()),
                                   lambda x0: x0),
    "float16 compression": ((lambda t: t.to(torch.float16), lambda t: t.to(torch.float64)),
                            (lambda v: v.data.astype(np.float16), lambda a: a.astype(np.float64)),
                            lambda x0: x0.astype(np.float16).astype(np.float64)),
}
SHARING = {  # what unpack returns is the saved tensor, or shares its counter: the in-place change is seen
    "identity hooks": ((lambda t: t, lambda t: t), (lambda v: v, lambda v: v)),
    "a detached alias": ((lambda t: t.detach(), lambda t: t), (lambda v: v.detach(), lambda v: v)),
}

x_values = st.lists(floats(-3.0, 3.0), min_size=1, max_size=4).map(np.array)


@pytest.mark.parametrize("hooks", COPYING.values(), ids=COPYING.keys())
@given(x0=x_values)
def test_an_unpacked_copy_keeps_its_own_version_so_a_later_change_of_the_original_is_fine_like_torch(hooks, x0):
    (pack_t, unpack_t), (pack, unpack), seen = hooks
    theirs = second_derivative_after_changing_x(torch, pack_t, unpack_t, x0)
    ours = second_derivative_after_changing_x(tinypytorch, pack, unpack, x0)
    assert not isinstance(theirs, Exception) and not isinstance(ours, Exception), (theirs, ours)
    np.testing.assert_allclose(ours, theirs, rtol=1e-15)
    np.testing.assert_allclose(ours, 6 * seen(x0), rtol=1e-15)  # d^2(x^3)/dx^2 at the graph's own x, not x + 1


@pytest.mark.parametrize("hooks", SHARING.values(), ids=SHARING.keys())
def test_an_unpacked_alias_of_the_saved_tensor_sees_the_change_and_raises_like_torch(hooks):
    (pack_t, unpack_t), (pack, unpack) = hooks
    x0 = np.array([1.0, 2.0])
    theirs = second_derivative_after_changing_x(torch, pack_t, unpack_t, x0)
    ours = second_derivative_after_changing_x(tinypytorch, pack, unpack, x0)
    assert isinstance(theirs, RuntimeError) and str(theirs).startswith(MODIFIED)
    assert isinstance(ours, RuntimeError) and str(ours).startswith(MODIFIED)


def test_the_unpacked_copy_has_a_counter_of_its_own_and_the_saved_tensor_shares_the_originals():
    x = Variable(np.array([1.0, 2.0]))
    with saved_tensors_hooks(lambda v: v.data.copy(), lambda a: a):
        copied = tinypytorch.exp(x * x)
    with saved_tensors_hooks(lambda v: v, lambda v: v):
        shared = tinypytorch.exp(x * x)
    product = copied.creator.edges[0][0]  # the Mul node, which saved x twice
    kept = shared.creator.edges[0][0]
    assert all(t.version_counter is not x.version_counter for t in product.saved_tensors)
    assert all(t.version_counter is x.version_counter for t in kept.saved_tensors)
