"""Step 35: saved tensors. What each operation keeps for backward (against PyTorch's pack hooks),
freeing after backward, retain_graph, no reference cycles, and the memory a forward pass holds."""
import gc
import math
import re
import tracemalloc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from operations import NOT_IN_THE_TABLE_YET, OPERATIONS, operands, package_functions
from tinypytorch import Function, Variable, autograd, utils
from tinypytorch.autograd.graph import BACKWARD_TWICE, SavedTensor
from tinypytorch.layers import MLP
from reference import floats

pytestmark = [pytest.mark.step35, pytest.mark.torch]


def test_every_function_of_the_package_is_in_the_table_of_operations():
    covered = {cls for operation in OPERATIONS for cls in operation.functions}
    missing = {cls.__name__ for cls in package_functions() - covered}
    assert not missing - NOT_IN_THE_TABLE_YET, f"add a row to tests/operations.py for: {sorted(missing)}"
    assert NOT_IN_THE_TABLE_YET <= missing, "a function of NOT_IN_THE_TABLE_YET has its row: take it off the list"


def graph_functions(outputs):
    found, todo = [], [y.creator for y in outputs]
    while todo:
        f = todo.pop()
        if isinstance(f, Function) and f not in found:
            found.append(f)
            todo.extend(node for node, _ in f.edges)
    return found


def saved_shapes_ours(operation, arrays, requires):
    y = operation.ours(*[Variable(a.copy(), requires_grad=r) for a, r in zip(arrays, requires)])
    saved = [s for f in graph_functions([y]) for s in f.saved if isinstance(s, SavedTensor)]
    return sorted(tuple((s.data if s.variable is None else s.variable.data).shape) for s in saved)


def saved_shapes_torch(operation, arrays, requires):
    shapes = []
    twin = operation.theirs_saved or operation.theirs
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        twin(*[torch.tensor(a, requires_grad=r) for a, r in zip(arrays, requires)])
    for unused in operation.torch_saves_unused:  # saved by torch for their size only (tests/operations.py)
        shapes.remove(unused)
    return sorted(tuple(reversed(s)) if s in operation.torch_saves_transposed else s for s in shapes)


def requires_grad_patterns(count):
    """Every input requiring grad, and each input alone."""
    patterns = [(True,) * count]
    if count > 1:
        patterns += [tuple(i == j for j in range(count)) for i in range(count)]
    return patterns


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_each_operation_saves_the_tensors_torch_saves(operation):
    arrays = operands(operation)
    for requires in requires_grad_patterns(len(arrays)):
        ours, theirs = saved_shapes_ours(operation, arrays, requires), saved_shapes_torch(operation, arrays, requires)
        if operation.theirs_saved is None:
            assert ours == theirs, requires
        else:  # the same composition in torch: as many elements, in other shapes and pieces (tests/operations.py)
            assert sum(math.prod(s) for s in ours) == sum(math.prod(s) for s in theirs), (requires, ours, theirs)


def test_a_python_number_is_not_saved_as_a_tensor_but_a_0d_array_is_as_in_torch():
    x = Variable(np.array([1.0, 2.0]))
    assert [s for s in (x * 2.0).creator.saved if isinstance(s, SavedTensor)] == []
    assert len([s for s in (x * np.array(2.0)).creator.saved if isinstance(s, SavedTensor)]) == 1
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(t.shape) or t, lambda t: t):
        xt = torch.tensor([1.0, 2.0], requires_grad=True)
        _ = xt * 2.0
        _ = xt * torch.tensor(2.0, dtype=torch.float64)
    assert len(shapes) == 1


def test_a_function_keeps_edges_not_inputs_so_intermediates_are_freed_and_gradients_still_flow():
    x = Variable(np.array([0.5, 1.0]))
    h = tinypytorch.exp(x)
    exp, alive = h.creator, weakref.ref(h)
    y = (h * 3.0).sum()
    del h
    assert alive() is None and exp.outputs[0]() is None
    assert y.creator.edges[0][0].edges[0] == (exp, 0)
    y.backward()
    np.testing.assert_allclose(x.grad.data, 3 * np.exp([0.5, 1.0]), rtol=1e-15)


def test_a_saved_input_is_the_variable_itself_and_a_saved_output_its_array_rebuilt_with_the_creator():
    x = Variable(np.array([0.5, 1.0]))
    y = tinypytorch.exp(x)
    (saved,) = y.creator.saved_tensors
    assert saved is not y and saved.data is y.data and saved.creator is y.creator and saved.output_nr == 0
    z = tinypytorch.sin(x)
    (saved_input,) = z.creator.saved_tensors
    assert saved_input is x


def test_a_saved_output_makes_no_reference_cycle():
    gc.collect()
    gc.disable()
    try:
        x = Variable(np.ones(3))
        for make in (tinypytorch.exp, tinypytorch.tanh, tinypytorch.sigmoid, tinypytorch.relu):
            y = make(x)
            function = weakref.ref(y.creator)
            del y
            assert function() is None, make.__name__
    finally:
        gc.enable()


@given(st.lists(floats(-2.0, 2.0), min_size=1, max_size=4))
def test_backward_twice_raises_torchs_error_and_retain_graph_doubles_the_gradients_as_in_torch(values):
    x, xt = Variable(np.array(values)), torch.tensor(values, dtype=torch.float64, requires_grad=True)
    y, yt = (tinypytorch.tanh(x) * x).sum(), (torch.tanh(xt) * xt).sum()
    y.backward(retain_graph=True)
    yt.backward(retain_graph=True)
    y.backward()
    yt.backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-13, atol=1e-15)
    with pytest.raises(RuntimeError, match="^" + re.escape(BACKWARD_TWICE) + "$"):
        y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        yt.backward()


def test_a_graph_that_saved_nothing_backpropagates_twice_as_in_torch():
    x, xt = Variable(np.array(1.5)), torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    y, yt = x + 1.0, xt + 1.0
    for _ in range(2):
        y.backward()
        yt.backward()
    assert x.grad.item() == xt.grad.item() == 2.0


def test_retain_graph_defaults_to_create_graph():
    x = Variable(np.array(0.7))
    y = tinypytorch.sin(x) * x
    y.backward(create_graph=True)
    y.backward()  # the graph was retained
    np.testing.assert_allclose(x.grad.data, 2 * (np.cos(0.7) * 0.7 + np.sin(0.7)), rtol=1e-14)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_autograd_grad_frees_the_same_way():
    x = Variable(np.array(0.7))
    y = tinypytorch.exp(x) * x
    autograd.grad(y, x, retain_graph=True)
    autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time"):
        autograd.grad(y, x)


def test_release_happens_per_function_as_the_pass_reaches_it():
    x = Variable(np.array([0.5, 1.5]))
    y = tinypytorch.exp(x)
    z = (y * y).sum()
    z.backward()
    assert all(s.freed for f in graph_functions([z]) for s in f.saved if isinstance(s, SavedTensor))
    assert utils.saved_tensors(z) and all(s.nbytes() == 0 for _, s in utils.saved_tensors(z))


def test_hooks_on_an_intermediate_that_no_longer_exists_still_run_as_in_torch():
    calls = []
    x, xt = Variable(np.array(2.0)), torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    for leaf in (x, xt):
        h = leaf * 2.0
        h.register_hook(lambda g: calls.append(float(g.item())) or g * 10.0)
        y = h * 3.0
        del h
        y.backward()
    assert calls == [3.0, 3.0] and x.grad.item() == xt.grad.item() == 60.0


def test_needs_input_grad_decides_what_linear_keeps():
    x = Variable(np.ones((4, 3)), requires_grad=False)
    W = Variable(np.full((2, 3), 0.5))
    y = tinypytorch.linear(x, W)
    assert y.creator.needs_input_grad == (False, True)
    (saved,) = [s for s in y.creator.saved if isinstance(s, SavedTensor)]
    assert saved.variable is x


def array_bytes():
    numpy_only = tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)
    return sum(t.size for t in tracemalloc.take_snapshot().filter_traces([numpy_only]).traces)


@pytest.mark.parametrize("depth, dtype", [(2, np.float64), (3, np.float32), (5, np.float64)])
def test_a_forward_pass_holds_exactly_the_saved_arrays_it_made_and_backward_frees_them(depth, dtype):
    model = MLP((64,) * (depth + 1), activation=tinypytorch.tanh, rng=np.random.default_rng(0))
    for p in model.params():
        p.data = p.data.astype(dtype)
    rng = np.random.default_rng(1)
    batch, target = rng.standard_normal((32, 64)).astype(dtype), rng.standard_normal((32, 64)).astype(dtype)
    tracemalloc.start()
    try:
        before = array_bytes()
        loss = tinypytorch.mean_squared_error(model(batch), target)
        held = array_bytes() - before - loss.data.nbytes
        activations = {id(s.data if s.variable is None else s.variable.data): s.nbytes()
                       for _, s in utils.saved_tensors(loss) if s.variable is None or s.variable.creator is not None}
        assert len(activations) == depth  # depth - 1 hidden tanh outputs and the network's output
        assert held == sum(activations.values()) == depth * 32 * 64 * np.dtype(dtype).itemsize
        loss.backward()
        gradients = sum(p.grad.data.nbytes for p in model.params())
        assert array_bytes() - before - loss.data.nbytes - gradients == 0
    finally:
        tracemalloc.stop()


@given(depth=st.integers(1, 4), width=st.integers(1, 6), batch=st.integers(1, 5),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
def test_an_mlp_saves_the_bytes_torch_saves(depth, width, batch, dtype, seed):
    model = MLP((width,) * (depth + 1), activation=tinypytorch.tanh, rng=np.random.default_rng(seed))
    linears = [torch.nn.Linear(width, width).to(torch.float64 if dtype == np.float64 else torch.float32)
               for _ in range(depth)]
    with torch.no_grad():
        for p, pt in zip(model.params(), [q for layer in linears for q in layer.parameters()], strict=True):
            p.data = p.data.astype(dtype)
            pt.copy_(torch.tensor(p.data))
    x = np.random.default_rng(seed).standard_normal((batch, width)).astype(dtype)
    counted = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: counted.append(t.nelement() * t.element_size()) or t,
                                                  lambda t: t):
        h = torch.tensor(x)
        for i, layer in enumerate(linears):
            h = layer(h) if i == 0 else layer(torch.tanh(h))
        torch.nn.functional.mse_loss(h, torch.zeros_like(h))
    loss = tinypytorch.mean_squared_error(model(x), np.zeros((batch, width), dtype=dtype))
    saved = utils.saved_tensors(loss)
    assert len(saved) == len(counted) and sum(s.nbytes() for _, s in saved) == sum(counted)


def test_show_saved_draws_each_saved_tensor_with_its_bytes_and_the_total_then_freed():
    x = Variable(np.array([0.5, 1.0, 2.0]), name="x")
    w = Variable(np.array([1.0, -1.0, 0.5]), name="w")
    y = tinypytorch.sigmoid(x * w).sum()
    text = utils.get_dot_graph(y, show_saved=True)
    assert 'graph [label="saved for backward: 3 tensors holding 72 bytes"' in text
    notes = re.findall(r'label="(saved[^"]*)", shape=note', text)
    assert sorted(notes) == ["saved output\\n(3,) float64\\n24 bytes", "saved w\\n(3,) float64\\n24 bytes",
                             "saved x\\n(3,) float64\\n24 bytes"]
    assert text.count("[style=dashed]") == 3 and "saved" not in utils.get_dot_graph(y)
    y.backward()
    after = utils.get_dot_graph(y, show_saved=True)
    assert "3 tensors holding 0 bytes" in after and after.count('label="saved\\nfreed"') == 3


def test_a_tensor_saved_twice_is_counted_once_in_the_total():
    x = Variable(np.ones(4), name="x")
    text = utils.get_dot_graph((x * x).sum(), show_saved=True)
    assert "saved for backward: 2 tensors holding 32 bytes" in text


def test_save_for_backward_of_something_that_is_not_an_array_raises_naming_the_function():
    class SavesAString(Function):
        def forward(self, x):
            self.save_for_backward("x")
            return x * 2

    with pytest.raises(TypeError, match=r"^SavesAString\.save_for_backward: expected arrays or Variables, got str$"):
        SavesAString()(Variable(np.ones(2)))
    with tinypytorch.no_grad():  # nothing is recorded, so nothing is kept or checked, as in PyTorch
        SavesAString()(Variable(np.ones(2)))


def test_nothing_is_saved_under_no_grad_or_for_constants():
    x = Variable(np.ones(3))
    with tinypytorch.no_grad():
        y = tinypytorch.exp(x)
    c = tinypytorch.exp(Variable(np.ones(3), requires_grad=False))
    assert y.creator is None and c.creator is None


def test_the_steps_check_covers_every_operation_of_the_table():
    step_operations = set(load_step_35().OPERATIONS)
    assert {"add", "mul", "div", "exp", "log", "tanh", "sigmoid", "relu", "matmul", "linear"} <= step_operations


def load_step_35():
    from steploader import load_step

    return load_step(35)
