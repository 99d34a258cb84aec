"""The deliberate differences the page for PyTorch users lists (book/pytorch_users.md), each shown on both
frameworks: what PyTorch does, and what the package does instead. One test per entry of the list; a difference
that is closed, or a new one, changes both the page and this file."""
import pathlib
import pickle

import numpy as np
import pytest
import torch

import tinypytorch as tp
from tinypytorch import Variable, nn
from tinypytorch.utils.data import DataLoader

pytestmark = pytest.mark.torch

PAGE = pathlib.Path(__file__).resolve().parents[1] / "book" / "pytorch_users.md"


def test_the_page_lists_the_differences_this_file_shows():
    listed = PAGE.read_text().split("## Deliberate differences")[1].split("## What is not there")[0]
    assert listed.count("\n- **") == 17


def test_a_variable_made_directly_requires_grad_the_factories_do_not():
    assert Variable(np.array(1.0)).requires_grad and tp.Tensor is Variable
    assert not torch.Tensor(np.array([1.0])).requires_grad and not torch.tensor(1.0).requires_grad
    assert not tp.tensor(1.0).requires_grad and not tp.ones(2).requires_grad


def test_data_is_an_array_sharing_memory_and_not_the_version_counter_in_both():
    x, t = tp.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    assert isinstance(x.data, np.ndarray) and isinstance(t.data, torch.Tensor)
    for v in (x, t):
        v.data[0] = 5.0  # through .data: the same memory, no version counted
        assert float(v[0]) == 5.0 and v._version == 0


def test_a_tensor_put_into_data_is_refused_by_name_at_the_next_operation():
    # PyTorch's `p.data -= lr * p.grad` updates p; here it stores a Variable where the array goes, and the next
    # operation on p says what happened instead of computing with it
    t = torch.nn.Parameter(torch.ones(3))
    p = tp.nn.Parameter(tp.ones(3))
    for v in (t, p):
        (v * v).sum().backward()
        v.data -= 0.5 * v.grad
    assert t.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(TypeError, match=r"`x.data` is the array inside a Variable.*no_grad"):
        p * 2
    with tp.no_grad():  # the package's way, PyTorch's too
        q = tp.nn.Parameter(tp.ones(3))
        q -= 0.5 * tp.full((3,), 2.0)
    assert q.tolist() == [0.0, 0.0, 0.0]


def test_repr_is_stable_and_names_the_package():
    assert repr(tp.tensor([1.0, 2.5])) == "variable([1.0000, 2.5000])"
    assert repr(torch.tensor([1.0, 2.5])) == "tensor([1.0000, 2.5000])"


def test_dezeros_names_are_kept_beside_pytorchs():
    x = Variable(np.array(2.0))
    (x * x).backward()
    x.cleargrad()
    assert x.grad is None and not hasattr(torch.Tensor, "cleargrad")
    assert tp.Function is not tp.autograd.Function and torch.autograd.Function.__module__.startswith("torch")


def test_max_with_axis_gives_the_values_and_with_dim_the_pair():
    x = np.array([[1.0, 3.0], [4.0, 2.0]])
    np.testing.assert_array_equal(tp.max(tp.from_numpy(x), axis=1).data, [3.0, 4.0])
    values, indices = tp.max(tp.from_numpy(x), 1)
    theirs = torch.max(torch.from_numpy(x), 1)
    np.testing.assert_array_equal(values.data, theirs.values.numpy())
    np.testing.assert_array_equal(indices.data, theirs.indices.numpy())
    assert len(torch.max(torch.from_numpy(x), axis=1)) == 2  # torch: the pair for axis= too


def test_the_same_seed_draws_other_numbers_from_the_frameworks_own_generator():
    tp.manual_seed(0)
    torch.manual_seed(0)
    ours, theirs = tp.rand(4, dtype=tp.float64).data, torch.rand(4, dtype=torch.float64).numpy()
    assert not np.allclose(ours, theirs)
    assert isinstance(tp.get_rng_state(), dict) and isinstance(torch.get_rng_state(), torch.Tensor)


def test_an_optimizers_state_dict_holds_copies_where_torchs_holds_the_live_tensors():
    p, q = nn.Parameter(tp.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt, opt_t = tp.optim.SGD([p], lr=0.1, momentum=0.9), torch.optim.SGD([q], lr=0.1, momentum=0.9)
    for param, optimizer in ((p, opt), (q, opt_t)):
        param.grad = type(param)(np.ones(2)) if param is p else torch.ones(2)
        optimizer.step()
    state, state_t = opt.state_dict()["state"][0], opt_t.state_dict()["state"][0]
    opt.step()
    opt_t.step()
    assert state["momentum_buffer"][0] == 1.0  # ours: a copy, as it was
    assert float(state_t["momentum_buffer"][0]) == pytest.approx(1.9)  # torch's: the live buffer, moved on


def test_float_defaults_follow_the_constructor():
    assert tp.tensor([1.0]).dtype == tp.float32 and torch.tensor([1.0]).dtype == torch.float32
    assert Variable(np.array(1.0)).dtype == np.float64 and torch.from_numpy(np.array(1.0)).dtype == torch.float64


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_a_dtype_also_equals_numpys_and_there_is_no_complex32():
    assert str(tp.tensor([1.0]).dtype) == str(torch.tensor([1.0]).dtype) == "torch.float32"  # printed alike
    assert tp.tensor([1.0]).dtype == np.float32 and torch.tensor([1.0]).dtype != np.float32
    half, complex_number = tp.ones(2, dtype=tp.float16), 1j
    assert (half * complex_number).dtype is tp.complex64
    assert (torch.ones(2, dtype=torch.float16) * complex_number).dtype == torch.complex32


def test_max_memory_allocated_is_a_context_manager_measuring_its_block():
    assert hasattr(tp.cuda.max_memory_allocated, "__wrapped__")  # a contextlib context manager
    assert callable(torch.cuda.max_memory_allocated)  # torch's: a function returning the peak since a reset


def test_a_dataloader_takes_a_device_where_torchs_takes_none():
    batch = next(iter(DataLoader([np.ones(2), np.ones(2)], batch_size=2, device="cpu")))
    assert batch.device == tp.device("cpu")
    with pytest.raises(TypeError):
        torch.utils.data.DataLoader([np.ones(2)], batch_size=1, device="cpu")


def test_layer_norm_refuses_a_wrong_shape_with_the_packages_type_for_shapes():
    with pytest.raises(ValueError):
        tp.nn.functional.layer_norm(tp.ones(2, 3), (4,))
    with pytest.raises(RuntimeError):
        torch.nn.functional.layer_norm(torch.ones(2, 3), (4,))


def test_weights_only_load_gives_back_numpy_arrays_that_torchs_refuses(tmp_path):
    obj = {"a": np.arange(3), "s": np.float32(1.5)}
    torch.save(obj, tmp_path / "theirs.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(tmp_path / "theirs.pt")  # weights_only=True: NumPy's globals are not allowed
    tp.save(obj, tmp_path / "ours.pt")
    loaded = tp.load(tmp_path / "ours.pt")  # a structure of arrays, never pickled
    assert loaded["a"].tolist() == [0, 1, 2] and loaded["s"].shape == () and loaded["s"].dtype == np.float32
    with pytest.raises(ValueError, match="mmap=True is not supported"):
        tp.load(tmp_path / "ours.pt", mmap=True)
    with pytest.raises(RuntimeError, match="was written by torch.save"):
        tp.load(tmp_path / "theirs.pt")


def test_buffers_are_arrays_where_torchs_are_tensors():
    ours, theirs = dict(nn.BatchNorm1d(2).named_buffers()), dict(torch.nn.BatchNorm1d(2).named_buffers())
    assert isinstance(ours["running_mean"], np.ndarray) and isinstance(theirs["running_mean"], torch.Tensor)


def test_loss_modules_take_reduction_as_a_keyword_only():
    with pytest.raises(TypeError):
        nn.MSELoss(None, None, "sum")  # PyTorch's positional size_average and reduce
    assert torch.nn.MSELoss(None, None, "sum").reduction == "sum"


def _saved_elements(framework, conv2d, x, w):
    """The elements each framework keeps for conv2d's backward, counted by a pack hook, and its nodes' names."""
    saved = []
    with framework.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        y = conv2d(x, w)
    names, todo = set(), [y.grad_fn]
    while todo:  # every node of the graph, by the name torch prints
        node = todo.pop()
        names.add(node.name())
        todo += [n for n, _ in node.next_functions if n is not None and "AccumulateGrad" not in n.name()]
    return sum(saved), names


def test_conv2d_is_three_nodes_that_keep_the_unfolded_input():
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = np.ones((4, 2, 3, 3), np.float32)
    ours, our_nodes = _saved_elements(tp, tp.conv2d, tp.tensor(x, requires_grad=True), tp.tensor(w, requires_grad=True))
    theirs, their_nodes = _saved_elements(torch, torch.conv2d, torch.tensor(x, requires_grad=True),
                                          torch.tensor(w, requires_grad=True))
    assert their_nodes == {"ConvolutionBackward0"} and theirs == x.size + w.size  # the input and the weight
    assert len(our_nodes) == 3 and "Im2ColBackward0" in our_nodes
    # the matrix product keeps the unfolded input (2 channels x 3 x 3 per window, 4 x 4 windows) and the weight
    assert ours == 2 * 3 * 3 * 4 * 4 + w.size


def test_linears_node_lists_the_weight_itself_where_torch_lists_the_transposes_node():
    x, t = tp.ones(2, 3, requires_grad=True) * 1.0, torch.ones(2, 3, requires_grad=True) * 1.0
    ours = tp.nn.functional.linear(x, tp.ones(4, 3, requires_grad=True), tp.ones(4, requires_grad=True))
    theirs = torch.nn.functional.linear(t, torch.ones(4, 3, requires_grad=True), torch.ones(4, requires_grad=True))
    assert repr(ours.grad_fn) == "<AddmmBackward0>" and type(theirs.grad_fn).__name__ == "AddmmBackward0"
    names = [[type(n).__name__ for n, _ in f.grad_fn.next_functions] for f in (theirs,)][0]
    assert names == ["AccumulateGrad", "MulBackward0", "TBackward0"]  # bias, input, weight.t()
    ours_names = [n.name() for n, _ in ours.grad_fn.next_functions]
    assert ours_names == ["AccumulateGrad", "MulBackward0", "AccumulateGrad"]  # bias, input, the weight itself
