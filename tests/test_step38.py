"""Step 38: saved-tensor hooks (saved_tensors_hooks, save_on_cpu, a float16 compression hook), against torch."""
import contextlib
import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import (
    BINARY_EXPRESSIONS, UNARY_EXPRESSIONS, evaluate, expressions, float_arrays, floats, operation_lists, torch_leaf,
)
from steploader import load_step
from tinypytorch import Config, Variable, autograd, cuda, no_grad
from tinypytorch import functions as F
from tinypytorch.autograd.graph import current_hooks, save_on_cpu, saved_tensors_hooks
from tinypytorch.layers import MLP
from twins import torch_twin

pytestmark = [pytest.mark.step38, pytest.mark.torch]
step = load_step(38)

TORCH_HOOKS = torch.autograd.graph.saved_tensors_hooks
MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


def hooks_of(m):
    return TORCH_HOOKS if m is torch else saved_tensors_hooks


def make_ours(value, requires_grad=True):
    return Variable(np.array(value, dtype=np.float64), requires_grad=requires_grad)


def make_torch(value, requires_grad=True):
    return torch.tensor(value, dtype=torch.float64, requires_grad=requires_grad)


def grad_of(v):
    return None if v.grad is None else (v.grad.numpy() if isinstance(v, torch.Tensor) else np.asarray(v.grad.data))


class Counter:
    """A pack/unpack pair that counts its calls and passes tensors through unchanged."""

    def __init__(self, m):
        self.packs = self.unpacks = 0
        self.hooks = hooks_of(m)(self.pack, self.unpack)

    def pack(self, v):
        self.packs += 1
        return v

    def unpack(self, v):
        self.unpacks += 1
        return v


# ----- counts and gradients on random graphs ---------------------------------------------

UNARY = expressions(UNARY_EXPRESSIONS, "sin", "exp", "tanh", "pow2", "add 1.5", "div 3", "rdiv")
BINARY = expressions(BINARY_EXPRESSIONS, "add", "sub", "mul", "div")


@st.composite
def hooked_programs(draw):
    """Leaves (some constants), their shape, and a list of operations on them."""
    count = draw(st.integers(1, 3))
    shape = draw(st.sampled_from([(), (3,)]))
    values = [draw(arrays(np.float64, shape, elements=floats(-1.5, 1.5))) for _ in range(count)]
    requires = draw(st.lists(st.booleans(), min_size=count, max_size=count).filter(any))
    return values, requires, draw(operation_lists(UNARY, BINARY, max_size=10))


def run_counted(m, program, passes=2):
    """Counts (packs, unpacks) after the forward pass and after each of `passes` backward passes, and the grads."""
    values, requires, operations = program
    make = make_torch if m is torch else make_ours
    leaves = [make(v, r) for v, r in zip(values, requires)]
    counter = Counter(m)
    with counter.hooks:
        y = evaluate(m, leaves, operations, UNARY, BINARY)[-1].sum()
    counts = [(counter.packs, counter.unpacks)]
    if not y.requires_grad:
        return counts, None, y
    for _ in range(passes):
        y.backward(retain_graph=True)
        counts.append((counter.packs, counter.unpacks))
    return counts, [grad_of(v) for v in leaves], y


@given(hooked_programs())
def test_random_graphs_pack_and_unpack_counts_and_grads_equal_torch(program):
    counts_t, grads_t, y_t = run_counted(torch, program)
    assume(bool(torch.isfinite(y_t)) and y_t.requires_grad)
    counts, grads, _ = run_counted(tinypytorch, program)
    assert counts == counts_t
    assert counts_t[2][1] == 2 * counts_t[1][1]  # the second pass unpacks what the first did, once more
    for g, g_t in zip(grads, grads_t):
        if g_t is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-13)


def test_exp_of_a_square_packs_three_and_unpacks_three_per_pass_like_torch():
    results = []
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        a = make([0.5, -1.0, 2.0])
        counter = Counter(m)
        with counter.hooks:
            y = m.exp(a * a).sum()
        counts = [(counter.packs, counter.unpacks)]
        y.backward(retain_graph=True)
        counts.append((counter.packs, counter.unpacks))
        y.backward()
        counts.append((counter.packs, counter.unpacks))
        results.append(counts)
    assert results[0] == results[1] == [(3, 0), (3, 3), (3, 6)]


def torch_mlp(model, dtype):
    return torch_twin(model, torch.nn.Tanh, dtype)


@given(st.integers(0, 2**32 - 1), st.sampled_from([(3, 4, 1), (3, 4, 4, 1), (2, 5, 3, 2)]), st.integers(1, 4))
def test_mlp_counts_and_grads_under_hooks_equal_torch_over_two_passes(seed, sizes, batch_size):
    model = MLP(sizes, activation=F.tanh, rng=np.random.default_rng(seed))
    model_t = torch_mlp(model, torch.float64)
    batch = np.random.default_rng(seed + 1).standard_normal((batch_size, sizes[0]))
    results = []
    for m, net, params, x in [(tinypytorch, model, list(model.params()), Variable(batch, requires_grad=False)),
                              (torch, model_t, list(model_t.parameters()), torch.from_numpy(batch))]:
        counter = Counter(m)
        with counter.hooks:
            loss = (net(x) ** 2).sum()
        counts = [(counter.packs, counter.unpacks)]
        for _ in range(2):
            loss.backward(retain_graph=True)
            counts.append((counter.packs, counter.unpacks))
        results.append((counts, [grad_of(p) for p in params]))
    (counts, grads), (counts_t, grads_t) = results
    assert counts == counts_t
    for g, g_t in zip(grads, grads_t):
        np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-14)


# ----- when the hooks run ------------------------------------------------------------------

@given(float_arrays(-2.0, 2.0, min_dims=1, max_dims=1, max_side=4))
def test_packs_at_forward_unpacks_at_backward_in_torchs_order_with_the_saved_values(x0):
    logs = []
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        log = []
        x = make(x0)

        def pack(v, log=log):
            log.append(("pack", np.array(v.detach().numpy() if m is torch else v.data)))
            return v

        def unpack(v, log=log):
            log.append(("unpack", np.array(v.detach().numpy() if m is torch else v.data)))
            return v

        with hooks_of(m)(pack, unpack):
            y = m.exp(x * x).sum()
        log.append(("forward done", None))
        y.backward()
        logs.append(log)
    ours, theirs = logs
    kinds = ["pack", "pack", "pack", "forward done", "unpack", "unpack", "unpack"]
    assert [k for k, _ in ours] == [k for k, _ in theirs] == kinds
    expected = [x0, x0, np.exp(x0**2), None, np.exp(x0**2), x0, x0]  # Mul saves both operands, Exp its output
    for (_, v), (_, v_t), e in zip(ours, theirs, expected):
        if e is not None:
            np.testing.assert_allclose(v, e, rtol=1e-14)
            np.testing.assert_allclose(v_t, e, rtol=1e-14)


def test_the_pack_hook_runs_with_recording_off_like_torch():
    seen, packed = [], []

    def pack(v):
        seen.append(Config.enable_backprop)
        packed.append(v * 4.0)
        return packed[-1]

    def pack_t(t):
        seen.append(torch.is_grad_enabled())
        packed.append(t * 4.0)
        return packed[-1]

    x, xt = make_ours([1.0, 2.0]), make_torch([1.0, 2.0])
    with saved_tensors_hooks(pack, lambda p: p / 4.0):
        (x * x).sum()
    with TORCH_HOOKS(pack_t, lambda p: p / 4.0):
        (xt * xt).sum()
    assert seen == [False, False, False, False]
    assert Config.enable_backprop and torch.is_grad_enabled()  # switched back on after the hook
    assert [p.requires_grad for p in packed] == [False] * 4  # the product in the hook was not recorded
    assert packed[0].creator is None and packed[2].grad_fn is None


@given(float_arrays(-3.0, 3.0, min_dims=0, max_dims=2, max_side=3))
def test_the_tutorial_pair_times_4_over_4_still_gives_2x_and_second_derivatives_like_torch(x0):
    x = make_ours(x0)
    with saved_tensors_hooks(lambda v: v * 4.0, lambda p: p / 4.0):
        (x**2).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * x0, rtol=1e-15)
    # second derivatives flow through the unpacked leaf: g = 3x^2, g' = 6x
    x = make_ours(x0)
    with saved_tensors_hooks(lambda v: v * 4.0, lambda p: p / 4.0):
        y = (x**3).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (gg,) = autograd.grad(g.sum(), x)
    xt = make_torch(x0)
    with TORCH_HOOKS(lambda t: t * 4.0, lambda p: p / 4.0):
        yt = (xt**3).sum()
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (ggt,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(g.data, 3 * x0**2, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(gg.data, 6 * x0, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose([g.data, gg.data], [gt.detach().numpy(), ggt.numpy()], rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("expression, packs", [
    (lambda x, c: x * 2.0, 0),  # a Python number is kept as a number
    (lambda x, c: 2.0 * x + 1.0, 0),
    (lambda x, c: x / 3.0, 0),
    (lambda x, c: x * c, 1),  # a constant array is a tensor: d(x c)/dx = c is saved, x is not
    (lambda x, c: x * x, 2),
    (lambda x, c: 2.0 / x, 1),
])
def test_python_numbers_are_not_packed_constant_arrays_are_like_torch(expression, packs):
    counts = []
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        counter = Counter(m)
        with counter.hooks:
            expression(make([1.0, 2.0]), make([3.0, 4.0], requires_grad=False))
        counts.append(counter.packs)
    assert counts == [packs, packs]


def test_the_innermost_pair_packs_and_the_pair_that_packed_unpacks_like_torch():
    logs = []
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        log = []

        def tagging(tag, log=log, m=m):
            return hooks_of(m)(lambda v: log.append(f"pack {tag}") or v, lambda v: log.append(f"unpack {tag}") or v)

        x = make(2.0)
        with tagging("outer"):
            with tagging("inner"):
                y = x * x
            z = m.sin(y)
        with tagging("late"):
            z.backward()
        logs.append(log)
    assert logs[0] == logs[1] == ["pack inner", "pack inner", "pack outer",
                                  "unpack outer", "unpack inner", "unpack inner"]
    assert current_hooks() is None


def test_hooks_entered_only_around_backward_are_never_called_like_torch():
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        x = make([0.5, 1.5])
        y = m.exp(x * x).sum()
        counter = Counter(m)
        with counter.hooks:
            y.backward()
        assert (counter.packs, counter.unpacks) == (0, 0)
        np.testing.assert_allclose(grad_of(x), 2 * np.array([0.5, 1.5]) * np.exp(np.array([0.5, 1.5]) ** 2))


def test_backward_twice_under_hooks_raises_and_retain_graph_doubles_grads_like_torch():
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        x = make([0.5, -1.0])
        with hooks_of(m)(lambda v: v, lambda v: v):
            y = m.sin(x * x).sum()
        y.backward(retain_graph=True)
        y.backward()
        np.testing.assert_allclose(grad_of(x), 2 * 2 * np.array([0.5, -1.0]) * np.cos(np.array([0.5, -1.0]) ** 2))
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.backward()


def test_packed_objects_are_released_after_the_last_backward_like_torch():
    class Packed:
        def __init__(self, v):
            self.v = v

    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        refs = []

        def pack(v, refs=refs):
            packed = Packed(v)
            refs.append(weakref.ref(packed))
            return packed

        a = make([0.5, -1.0, 2.0])
        with hooks_of(m)(pack, lambda p: p.v):
            y = m.exp(a * a).sum()
        y.backward(retain_graph=True)
        assert len(refs) == 3 and all(r() is not None for r in refs)
        y.backward()
        assert all(r() is None for r in refs)


def test_the_steps_counts_and_nested_contexts():
    assert step.counts == {"pack": 3, "unpack": 6}  # three saved tensors, unpacked in each of two passes
    assert step.log == ["pack by inner", "pack by inner", "pack by outer",
                        "unpack by outer", "unpack by inner", "unpack by inner"]


# ----- save_on_cpu -------------------------------------------------------------------------

def test_save_on_cpu_keeps_saved_arrays_in_host_memory_and_gives_torchs_grads(xp):
    data = np.array([0.5, -1.0, 2.0])
    x = Variable(xp.asarray(data))
    with save_on_cpu():
        y = tinypytorch.exp(x * x)
    for saved in y.creator.saved + y.creator.edges[0][0].saved:
        kept = saved.packed[1]
        if xp is np:  # on the CPU the hooks pass the array through (not the Variable: no cycle)
            assert kept is x.data or kept is y.data
        else:  # a copy in host memory, for the device to free
            assert isinstance(kept, np.ndarray)
    unpacked = y.creator.saved_tensors[0]
    assert type(unpacked.data) is type(y.data)
    if xp is np:
        assert unpacked.data is y.data
    y.sum().backward()
    xt = torch_leaf(data)
    with torch.autograd.graph.save_on_cpu():
        torch.exp(xt * xt).sum().backward()
    np.testing.assert_allclose(cuda.as_numpy(x.grad), xt.grad.numpy(), rtol=1e-13)


def test_save_on_cpu_on_numpy_makes_no_reference_cycle_through_a_saved_output():
    gc.collect()
    gc.disable()
    try:
        x = Variable(np.array([0.5, 1.5]))
        with save_on_cpu():
            y = tinypytorch.exp(x)
        function = weakref.ref(y.creator)
        del y
        assert function() is None
    finally:
        gc.enable()


def test_save_on_cpu_takes_torchs_arguments():
    x = Variable(np.array([0.5, 1.5]))
    with save_on_cpu(pin_memory=True):  # pinned host memory matters only for CuPy arrays
        y = tinypytorch.sin(x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.data, np.cos([0.5, 1.5]), rtol=1e-15)
    with pytest.raises(ValueError, match="save_on_cpu: device_type must be 'cuda', got 'xpu'"):
        save_on_cpu(device_type="xpu")


@given(float_arrays(-2.0, 2.0, min_dims=0, max_dims=2, max_side=4))
def test_save_on_cpu_on_numpy_leaves_the_gradients_unchanged(x0):
    grads = []
    for context in (contextlib.nullcontext, save_on_cpu):
        x = make_ours(x0)
        with context():
            y = (tinypytorch.tanh(x) * tinypytorch.sin(x)).sum()
        y.backward()
        grads.append(x.grad.data)
    np.testing.assert_array_equal(grads[0], grads[1])
    expected = (1 - np.tanh(x0) ** 2) * np.sin(x0) + np.tanh(x0) * np.cos(x0)
    np.testing.assert_allclose(grads[1], expected, rtol=1e-13, atol=1e-15)


# ----- float16 compression -----------------------------------------------------------------

def test_the_steps_float16_hooks_store_half_of_what_they_receive():
    n, d_in, h = 16, 8, 32  # batch, inputs, hidden units of the step's MLP((8, 32, 32, 1)), float32
    saved = [n * d_in, n * h, n * h, h * h, n * h, n * h, h * 1, n * 1]  # x, tanh, its input to l1, W1, ..., y
    assert step.stored == {"tensors": 8, "float32 bytes": 4 * sum(saved), "float16 bytes": 2 * sum(saved)}
    kept = n * h + n * h + n * 1  # the two tanh outputs and the output, once each; leaves excluded
    assert step.bytes_kept_by_the_graph(step.model) == (4 * kept, 3)
    assert step.stored_once == {"float16 bytes": 2 * kept}


def test_torchs_counting_hook_sees_the_same_bytes_for_the_steps_model():
    model_t = torch_mlp(step.model, torch.float32)
    seen = []
    with TORCH_HOOKS(lambda t: seen.append(t.nelement() * t.element_size()) or t, lambda t: t):
        (model_t(torch.from_numpy(step.inputs)) ** 2).sum()
    assert len(seen) == step.stored["tensors"] and sum(seen) == step.stored["float32 bytes"]


def float16_pair(m):
    if m is torch:
        return lambda t: (t.to(torch.float16), t.dtype), lambda p: p[0].to(p[1])
    return lambda v: (v.data.astype(np.float16), v.dtype), lambda p: p[0].astype(p[1])


def torch_float16_once():
    """The step's save_in_float16, written for torch: leaves as they are, one copy per storage."""
    copies = {}

    def pack(t):
        if t.is_leaf or t._base is not None and t._base.is_leaf:  # nn.Linear saves weight.t(), a view of a leaf
            return t
        if t.data_ptr() not in copies:
            copies[t.data_ptr()] = t, t.to(torch.float16)
        return copies[t.data_ptr()][1], t.dtype

    def unpack(packed):
        return packed if isinstance(packed, torch.Tensor) else packed[0].to(packed[1])

    return TORCH_HOOKS(pack, unpack)


def torch_gradients(model_t, inputs, hooks=None):
    model_t.zero_grad()
    with contextlib.nullcontext() if hooks is None else hooks:
        y = model_t(torch.from_numpy(inputs))
        loss = (y**2).sum() / len(inputs)
    loss.backward()
    return [p.grad.numpy().copy() for p in model_t.parameters()]


def relative_errors(approx, exact):
    return np.array([np.linalg.norm(a - e) / np.linalg.norm(e) for a, e in zip(approx, exact)])


def test_the_steps_float16_errors_are_in_band_and_match_torchs():
    model_t = torch_mlp(step.model, torch.float32)
    exact_t = torch_gradients(model_t, step.inputs)
    naive_t = torch_gradients(model_t, step.inputs, TORCH_HOOKS(*float16_pair(torch)))
    better_t = torch_gradients(model_t, step.inputs, torch_float16_once())
    for ours, theirs in [(relative_errors(step.naive, step.exact), relative_errors(naive_t, exact_t)),
                         (relative_errors(step.better, step.exact), relative_errors(better_t, exact_t))]:
        assert np.all((ours > 1e-5) & (ours < 1e-3)), ours  # the size of float16's rounding, 2^-11 = 4.9e-4
        np.testing.assert_allclose(ours, theirs, rtol=0.05)  # the same error, whatever the CPU's float32 digits
    # the hook that leaves the weights exact is the more accurate one, parameter by parameter
    assert np.all(relative_errors(step.better, step.exact) <= relative_errors(step.naive, step.exact) * (1 + 1e-6))
    # what the step prints, one significant digit, checked with a margin
    bands = {"l0.weight": (6e-4, 4e-4), "l0.bias": (3e-4, 9e-5), "l1.weight": (3e-4, 2e-4),
             "l1.bias": (2e-4, 6e-5), "l2.weight": (2e-4, 2e-4), "l2.bias": (6e-5, 6e-5)}
    for name, e_naive, e_better in zip(step.names, relative_errors(step.naive, step.exact),
                                       relative_errors(step.better, step.exact)):
        printed_naive, printed_better = bands[name]
        assert abs(e_naive - printed_naive) <= 0.5 * 10 ** np.floor(np.log10(printed_naive)) * 0.97
        assert abs(e_better - printed_better) <= 0.5 * 10 ** np.floor(np.log10(printed_better)) * 0.97


@given(st.integers(0, 2**32 - 1))
def test_float16_hooks_give_torchs_gradients_within_float16_precision(seed):
    model = MLP((4, 8, 3), activation=F.tanh, rng=np.random.default_rng(seed))
    for p in model.params():
        p.data = p.data.astype(np.float32)
    model_t = torch_mlp(model, torch.float32)
    inputs = np.random.default_rng(seed + 1).standard_normal((5, 4)).astype(np.float32)
    model.cleargrads()
    with saved_tensors_hooks(*float16_pair(tinypytorch)):
        loss = (model(Variable(inputs, requires_grad=False)) ** 2).sum() / len(inputs)
    loss.backward()
    grads = [p.grad.data for p in model.params()]
    grads_t = torch_gradients(model_t, inputs, TORCH_HOOKS(*float16_pair(torch)))
    exact_t = torch_gradients(model_t, inputs)
    for g, g_t, e_t in zip(grads, grads_t, exact_t):
        assert g.dtype == np.float32
        scale = np.abs(e_t).max()
        np.testing.assert_allclose(g, g_t, rtol=0, atol=2.0**-10 * scale + 1e-30)
        np.testing.assert_allclose(g, e_t, rtol=0, atol=2.0**-7 * scale + 1e-30)  # float16 costs a little


@given(float_arrays(-4.0, 4.0, min_dims=0, max_dims=1, max_side=4))
def test_float16_hooks_pass_second_derivatives_to_the_leaf_like_torch(x0):
    r = x0.astype(np.float16).astype(np.float64)  # what the unpack hook gives back
    x = make_ours(x0)
    with saved_tensors_hooks(*float16_pair(tinypytorch)):
        y = (x**3).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    (gg,) = autograd.grad(g.sum(), x)
    xt = make_torch(x0)
    with TORCH_HOOKS(*float16_pair(torch)):
        yt = (xt**3).sum()
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (ggt,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(g.data, 3 * r**2, rtol=1e-15)
    np.testing.assert_allclose(gg.data, 6 * r, rtol=1e-15)
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(gg.data, ggt.numpy(), rtol=1e-15)


# ----- hooks and in-place changes ------------------------------------------------------------

def in_place_after_saving(m, a0, pack, unpack):
    """b = 2a, c = b * b under the hooks, b += 1, backward: a's gradient (an ndarray) or the RuntimeError."""
    a = (make_torch if m is torch else make_ours)(a0)
    with hooks_of(m)(pack, unpack):
        b = a * 2.0
        c = b * b
    b.add_(1.0)
    try:
        c.sum().backward()
    except RuntimeError as error:
        return error
    return grad_of(a)


values = float_arrays(-3.0, 3.0, min_dims=0, max_dims=2, max_side=3)


@given(values)
def test_identity_hooks_and_an_in_place_change_torch_is_silently_wrong_tinypytorch_raises(a0):
    theirs = in_place_after_saving(torch, a0, lambda t: t, lambda t: t)
    np.testing.assert_allclose(theirs, 4 * (2 * a0 + 1), rtol=1e-15)  # backward read b + 1 for b
    assert np.all(theirs != 8 * a0)  # the gradient of what was computed: d(sum (2a)^2)/da = 8a
    ours = in_place_after_saving(tinypytorch, a0, lambda v: v, lambda v: v)
    assert isinstance(ours, RuntimeError)
    assert str(ours).startswith(MODIFIED) and "is at version 1; expected version 0 instead" in str(ours)
    assert "pack hook that kept the array itself" in str(ours)


@given(values)
def test_cloning_hooks_and_an_in_place_change_give_the_right_gradient_in_both(a0):
    theirs = in_place_after_saving(torch, a0, lambda t: t.clone(), lambda t: t)
    ours = in_place_after_saving(tinypytorch, a0, lambda v: v.data.copy(), lambda v: v)
    np.testing.assert_allclose(theirs, 8 * a0, rtol=1e-15)
    np.testing.assert_allclose(ours, 8 * a0, rtol=1e-15)


def test_the_documented_limit_a_copy_made_only_when_unpacking_is_not_seen():
    a0 = np.array([1.0, 2.0])
    ours = in_place_after_saving(tinypytorch, a0, lambda v: v.data, lambda data: data.copy())
    theirs = in_place_after_saving(torch, a0, lambda t: t, lambda t: t.clone())
    np.testing.assert_array_equal(ours, [12.0, 20.0])
    np.testing.assert_array_equal(theirs, [12.0, 20.0])


def test_a_hook_keeping_a_view_of_the_saved_array_is_checked_too():
    a = make_ours([1.0, 2.0, 3.0])
    with saved_tensors_hooks(lambda v: v.data[::-1], lambda view: view[::-1]):
        b = a * 2.0
        c = tinypytorch.sin(b)
    b.add_(1.0)
    with pytest.raises(RuntimeError, match=MODIFIED):
        c.sum().backward()


def test_a_leaf_changed_under_no_grad_after_saving_raises_where_torch_is_silently_wrong():
    a, at = make_ours([1.0, 2.0]), make_torch([1.0, 2.0])
    with saved_tensors_hooks(lambda v: v, lambda v: v):
        y = (a * a).sum()
    with TORCH_HOOKS(lambda t: t, lambda t: t):
        yt = (at * at).sum()
    with no_grad():
        a.add_(1.0)
    with torch.no_grad():
        at.add_(1.0)
    yt.backward()
    np.testing.assert_array_equal(at.grad.numpy(), [4.0, 6.0])  # 2 (a + 1); the right gradient was 2a = [2, 4]
    with pytest.raises(RuntimeError, match=MODIFIED + r".*which is a leaf"):
        y.backward()


def test_an_in_place_change_of_a_tensor_no_function_saved_is_fine_under_hooks_like_torch():
    results = []
    for m, make in [(tinypytorch, make_ours), (torch, make_torch)]:
        a = make([1.0, 2.0])
        with hooks_of(m)(lambda v: v, lambda v: v):
            b = a * 2.0  # saves no tensor: 2.0 is a number and a's gradient needs only it
            d = m.exp(b * 3.0)  # saves exp's output, not b
        b.add_(1.0)
        d.sum().backward()
        results.append(grad_of(a))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-14)
    np.testing.assert_allclose(results[0], 6 * np.exp(6 * np.array([1.0, 2.0])), rtol=1e-14)


# ----- bad hooks ---------------------------------------------------------------------------------

def test_a_pack_hook_changing_its_input_in_place_raises_like_torch():
    x, xt = make_ours([1.0, 2.0]), make_torch([1.0, 2.0])
    with pytest.raises(RuntimeError, match="^A saved tensor pack hook is modifying its input in place. Tensors "
                                           "provided as input to pack hook cannot be modified"):
        with saved_tensors_hooks(lambda v: v.add_(1.0), lambda v: v):
            x * x
    with pytest.raises(RuntimeError, match="A saved tensor pack hook is modifying its input in place"):
        with TORCH_HOOKS(lambda t: t.add_(1.0), lambda t: t):
            xt * xt
    np.testing.assert_array_equal(x.data, xt.detach().numpy())  # the change was made in both before the error
    assert current_hooks() is None  # the context was left cleanly


@pytest.mark.parametrize("result, name", [("a string", "str"), (None, "NoneType"), ([1.0, 2.0], "list"),
                                          (3.0, "float")])
def test_an_unpack_hook_returning_something_else_raises_type_error_like_torch(result, name):
    x = make_ours([1.0, 2.0])
    with saved_tensors_hooks(lambda v: v, lambda v: result):
        y = (x * x).sum()
    with pytest.raises(TypeError, match=f"^Output of saved tensor unpack_hook expected to be a Variable or an array "
                                        f"but got result of type {name}$"):
        y.backward()
    xt = make_torch([1.0, 2.0])
    with TORCH_HOOKS(lambda t: t, lambda t: result):
        yt = (xt * xt).sum()
    with pytest.raises(TypeError, match=f"unpack_hook expected to be a Tensor but got result of type {name}"):
        yt.backward()


@pytest.mark.parametrize("pack, unpack", [("pack", lambda v: v), (lambda v: v, None), (1, 2)])
def test_hooks_that_cannot_be_called_raise_type_error_like_torch(pack, unpack):
    with pytest.raises(TypeError, match="^saved_tensors_hooks: pack_hook and unpack_hook must be callable$"):
        with saved_tensors_hooks(pack, unpack):
            pass
    with pytest.raises(TypeError):
        with TORCH_HOOKS(pack, unpack):
            pass
    assert current_hooks() is None
