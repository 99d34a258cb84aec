"""Step 43: checkpointing on saved-tensor hooks (use_reentrant=False), against torch.utils.checkpoint."""
import collections
import functools
import gc
import weakref

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from memory import counting_saved
from reference import assert_close_to_torch, float_arrays, floats
from steploader import load_step
from tinypytorch import Function, Variable, autograd, no_grad
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import MLP
from tinypytorch.utils.checkpoint import CheckpointError, checkpoint
from twins import torch_twin

pytestmark = [pytest.mark.step43, pytest.mark.torch]
step = load_step(43)

BACKWARD_TWICE = "Trying to backward through the graph a second time"
MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"
FEWER = "A different number of tensors was saved during the original forward and recomputation."
METADATA = "Recomputed values for the following tensors have different metadata than during the forward pass."
MORE = "trying to save more tensors during recomputation than during the original forward pass."
TWICE = "Unpack is being triggered for a tensor that was already unpacked once"


def make_ours(value, requires_grad=True):
    return Variable(np.array(value, dtype=np.float64), requires_grad=requires_grad)


def make(m, value, requires_grad=True):
    return torch.tensor(value, dtype=torch.float64, requires_grad=requires_grad) if m is torch \
        else make_ours(value, requires_grad)


def checkpointed(m, function, *args, **options):
    """function(*args) checkpointed without reentrance, by tinypytorch or by torch (m)."""
    run = torch_checkpoint.checkpoint if m is torch else checkpoint
    return run(function, *args, use_reentrant=False, **options)


def grad_of(v):
    return v.grad.numpy() if isinstance(v, torch.Tensor) else np.asarray(v.grad.data)


def error_type(m):
    return torch_checkpoint.CheckpointError if m is torch else CheckpointError


# ----- random chains of operations --------------------------------------------------------------
#
# Each operation with the number of tensors it saves for backward when its input requires grad
# (step 35 checks every operation saves what torch saves): the expected recomputation lengths
# below are worked out from these numbers.

OPERATIONS = {
    "sin": (lambda m, h: m.sin(h), 1),  # its input
    "cos": (lambda m, h: m.cos(h), 1),  # its input
    "exp": (lambda m, h: m.exp(h * 0.25), 1),  # its output (the product by a number saves nothing)
    "tanh": (lambda m, h: m.tanh(h), 1),  # its output
    "sigmoid": (lambda m, h: m.sigmoid(h), 1),  # its output
    "square": (lambda m, h: h * h, 2),  # both factors
    "cube": (lambda m, h: h**3, 1),  # its input
    "times 2": (lambda m, h: h * 2.0, 0),
    "plus 1.5": (lambda m, h: h + 1.5, 0),
    "over 3": (lambda m, h: h / 3.0, 0),
    "neg": (lambda m, h: -h, 0),
}

chains = st.lists(st.sampled_from(sorted(OPERATIONS)), min_size=1, max_size=8)
inputs = float_arrays(-1.5, 1.5, min_dims=0, max_dims=2, max_side=3)


def chain_function(m, chain, log):
    """The chain as one function of h, appending each operation's name to `log` when it runs."""
    def function(h):
        for name in chain:
            log.append(name)
            h = OPERATIONS[name][0](m, h)
        return h
    return function


def run_chain(m, chain, x0, use_checkpoint=True, **options):
    """x.grad and (operations run in forward, operations run again in backward)."""
    log = []
    x = make(m, x0)
    function = chain_function(m, chain, log)
    with np.errstate(over="ignore", invalid="ignore"):  # exp after squares may overflow: see the assume below
        y = checkpointed(m, function, x, **options) if use_checkpoint else function(x)
        forward = len(log)
        y.sum().backward()
    return grad_of(x), (forward, log[forward:])


@given(chains, inputs)
def test_random_chains_give_the_plain_runs_gradients_bitwise_and_torchs(chain, x0):
    grad_t, _ = run_chain(torch, chain, x0)
    # Beyond 1e6 a chain is ill-conditioned: after three cubes, cos((x + 1.5)**27) turns torch's and NumPy's last-ulp
    # differences in a power into relative gaps of 1e-8 in the gradient, where the two agree to 1e-10 otherwise
    assume(np.all(np.abs(grad_t) < 1e6))
    grad, _ = run_chain(tinypytorch, chain, x0)
    plain, _ = run_chain(tinypytorch, chain, x0, use_checkpoint=False)
    np.testing.assert_array_equal(grad, plain)  # the same operations on the same numbers
    assert_close_to_torch(grad, grad_t)


@pytest.mark.parametrize("early_stop", [True, False])
@given(chain=chains, x0=inputs)
def test_random_chains_recompute_the_operations_torch_recomputes(early_stop, chain, x0):
    _, (forward, again) = run_chain(tinypytorch, chain, x0, early_stop=early_stop)
    _, (forward_t, again_t) = run_chain(torch, chain, x0, early_stop=early_stop)
    assert (forward, again) == (forward_t, again_t)
    assert forward == len(chain)
    saving = [i for i, name in enumerate(chain) if OPERATIONS[name][1] > 0]
    if not saving:  # nothing saved: backward never unpacks, so nothing is recomputed
        expected = []
    elif early_stop:  # up to and including the last operation that saves a tensor
        expected = chain[:saving[-1] + 1]
    else:
        expected = chain
    assert again == expected


def test_torchs_probe_recompute_halts_at_the_second_op():
    # the last saving operation is the second: early stop recomputes two of five
    chain = ["times 2", "sin", "plus 1.5", "neg", "over 3"]
    for m in (tinypytorch, torch):
        _, (forward, again) = run_chain(m, chain, [0.5, -1.0])
        assert (forward, again) == (5, ["times 2", "sin"])


# ----- autograd.grad, second derivatives, nesting --------------------------------------------------

def u(m, x, calls):
    calls[0] += 1
    return m.sin(x) * m.exp(x)


@given(float_arrays(-2.0, 2.0, min_dims=1, max_dims=2, max_side=3))
def test_autograd_grad_and_a_second_derivative_through_a_checkpoint_like_torch(x0):
    results = []
    for m in (tinypytorch, torch):
        calls = [0]
        x = make(m, x0)
        y = checkpointed(m, functools.partial(u, m, calls=calls), x).sum()
        grad = torch.autograd.grad if m is torch else autograd.grad
        (g,) = grad(y, x, create_graph=True)
        (gg,) = grad(g.sum(), x)
        assert x.grad is None  # autograd.grad hands gradients back, .grad untouched
        results.append((calls[0], np.asarray(g.detach().numpy() if m is torch else g.data),
                        np.asarray(gg.numpy() if m is torch else gg.data)))
    (calls, g, gg), (calls_t, g_t, gg_t) = results
    assert calls == calls_t == 3  # forward, and one recomputation for each of the two passes
    np.testing.assert_allclose(g, (np.cos(x0) + np.sin(x0)) * np.exp(x0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(gg, 2 * np.cos(x0) * np.exp(x0), rtol=1e-13, atol=1e-13)
    assert_close_to_torch(g, g_t)
    assert_close_to_torch(gg, gg_t)


def test_autograd_grad_with_respect_to_one_of_two_inputs():
    a, b = make_ours([0.5, 1.5]), make_ours([2.0, -1.0])
    y = checkpoint(lambda a, b: tinypytorch.sin(a) * b, a, b, use_reentrant=False).sum()
    (gb,) = autograd.grad(y, b)
    np.testing.assert_allclose(gb.data, np.sin([0.5, 1.5]), rtol=1e-15)
    assert a.grad is None and b.grad is None


def nested_function(m, depth, runs):
    """Level k: sin(h) * h, then level k + 1 checkpointed (below the last level), then tanh(.) * 2."""
    def level(k):
        def function(h):
            runs[k] += 1
            h = m.sin(h) * h
            if k + 1 < depth:
                h = checkpointed(m, level(k + 1), h)
            return m.tanh(h) * 2.0
        return function
    return level(0)


@given(st.integers(1, 4), st.integers(1, 3), float_arrays(-1.5, 1.5, min_dims=1, max_dims=1, max_side=3))
def test_nested_checkpoints_give_the_plain_gradient_and_torchs_run_counts(depth, passes, x0):
    results = []
    for m in (tinypytorch, torch):
        runs = collections.Counter()
        x = make(m, x0)
        y = checkpointed(m, nested_function(m, depth, runs), x).sum()
        for i in range(passes):
            y.backward(retain_graph=i < passes - 1)
        results.append((dict(runs), grad_of(x)))
    (runs, grad), (runs_t, grad_t) = results
    # level k runs in forward, and in every pass once per recomputation of the levels 0..k around it
    assert runs == runs_t == {k: 1 + passes * (k + 1) for k in range(depth)}
    x = make_ours(x0)  # the same levels without checkpoints: d times sin(h) * h, then d times tanh(h) * 2
    h = x
    for _ in range(depth):
        h = tinypytorch.sin(h) * h
    for _ in range(depth):
        h = tinypytorch.tanh(h) * 2.0
    y = h.sum()
    for i in range(passes):
        y.backward(retain_graph=i < passes - 1)
    np.testing.assert_array_equal(grad, x.grad.data)
    assert_close_to_torch(grad, grad_t)


# ----- the determinism check -------------------------------------------------------------------------

CHANGE = [None]


def changing(m, x):
    """sin (saves x), square (saves a twice), tanh (saves its output), times 3; CHANGE[0] alters it."""
    a = m.sin(x)
    if CHANGE[0] == "float32":
        a = a.to(torch.float32) if m is torch else F.astype(a, np.float32)
    if CHANGE[0] == "shape":
        a = a.expand(2, *a.shape) if m is torch else tinypytorch.broadcast_to(a, (2, *a.shape))
    if CHANGE[0] != "one op fewer":
        a = a * a
    if CHANGE[0] == "extra sin":
        a = m.sin(a)  # saves one tensor before the last save
    b = m.tanh(a)
    if CHANGE[0] == "one op more":
        b = m.exp(b)  # saves one tensor after the last save
    return b * 3.0


def after_change(m, change, x0=(0.5, 1.0, 2.0), **options):
    """Forward as written, backward with CHANGE[0] = change: x's gradient (an array) or the CheckpointError."""
    x = make(m, list(x0))
    CHANGE[0] = None
    y = checkpointed(m, functools.partial(changing, m), x, **options).sum()
    CHANGE[0] = change
    try:
        y.backward()
        return grad_of(x)
    except error_type(m) as error:
        return error
    finally:
        CHANGE[0] = None


def right_gradient(x0):
    """d/dx sum 3 tanh(sin(x)^2), by hand."""
    x0 = np.asarray(x0)
    return 3 * (1 - np.tanh(np.sin(x0) ** 2) ** 2) * 2 * np.sin(x0) * np.cos(x0)


@pytest.mark.parametrize("early_stop", [True, False])
def test_one_op_fewer_raises_the_count_error_like_torch(early_stop):
    for m in (tinypytorch, torch):
        error = after_change(m, "one op fewer", early_stop=early_stop)
        assert isinstance(error, error_type(m))
        assert str(error).startswith(f"{m.__name__}.utils.checkpoint: {FEWER}\n"
                                     "Number of tensors saved during forward: 4\n"
                                     "Number of tensors saved during recomputation: 2.")


@pytest.mark.parametrize("change, saved, recomputed", [
    ("float32", "'dtype': torch.float64", "'dtype': torch.float32"),  # PyTorch's dict prints its dtype objects
    ("shape", "'shape': (3,)", "'shape': (2, 3)"),
])
@pytest.mark.parametrize("early_stop", [True, False])
def test_a_dtype_or_shape_change_raises_the_metadata_error_like_torch(change, saved, recomputed, early_stop):
    ours, theirs = after_change(tinypytorch, change, early_stop=early_stop), \
        after_change(torch, change, early_stop=early_stop)
    assert isinstance(ours, CheckpointError) and isinstance(theirs, torch_checkpoint.CheckpointError)
    for error in (ours, theirs):
        assert f"{METADATA}\ntensor at position 1:\nsaved metadata: " in str(error)
    saved_line, recomputed_line = str(ours).split("\n")[2:4]
    assert saved in saved_line and "'device': 'cpu'" in saved_line
    assert recomputed in recomputed_line
    if change == "float32":  # the dtypes as torch's message prints them
        assert saved in str(theirs).split("\n")[2] and recomputed in str(theirs).split("\n")[3]
    else:
        assert "torch.Size([2, 3])" in str(theirs).split("\n")[3]


def test_one_op_more_raises_only_without_early_stop_like_torch():
    for m in (tinypytorch, torch):
        error = after_change(m, "one op more", early_stop=False)
        assert isinstance(error, error_type(m))
        assert str(error).startswith(f"{m.__name__}.utils.checkpoint: {MORE}")
        # with early stop the extra operation after the last save never runs: the forward's gradient
        np.testing.assert_allclose(after_change(m, "one op more"), right_gradient([0.5, 1.0, 2.0]), rtol=1e-14)


@given(arrays(np.float64, 3, elements=floats(0.2, 1.4)))
def test_an_extra_op_before_the_last_save_is_hidden_by_early_stop_and_wrong_like_torch(x0):
    ours, theirs = after_change(tinypytorch, "extra sin", x0), after_change(torch, "extra sin", x0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13)
    # tanh's holder got the product p = sin(x)^2 (the input of the extra sin) instead of tanh(p):
    # backward computed 3 (1 - p^2) * 2 sin(x) cos(x), not 3 (1 - tanh(p)^2) * 2 sin(x) cos(x)
    p = np.sin(x0) ** 2
    np.testing.assert_allclose(ours, 3 * (1 - p**2) * 2 * np.sin(x0) * np.cos(x0), rtol=1e-13)
    assert np.all(np.abs(ours - right_gradient(x0)) > 1e-6)
    for m in (tinypytorch, torch):
        error = after_change(m, "extra sin", x0, early_stop=False)
        assert isinstance(error, error_type(m)) and MORE in str(error)


def test_determinism_check_none_accepts_a_dtype_change_like_torch():
    ours = after_change(tinypytorch, "float32", determinism_check="none")
    theirs = after_change(torch, "float32", determinism_check="none")
    right = right_gradient([0.5, 1.0, 2.0])
    for grad in (ours, theirs):
        assert isinstance(grad, np.ndarray) and grad.dtype == np.float64
        np.testing.assert_allclose(grad, right, rtol=1e-6)  # computed from values rounded to float32
        assert not np.array_equal(grad, right)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_determinism_check_none_still_refuses_more_tensors_like_torch():
    for m in (tinypytorch, torch):
        error = after_change(m, "one op more", early_stop=False, determinism_check="none")
        assert isinstance(error, error_type(m)) and MORE in str(error)


def test_determinism_check_none_with_fewer_tensors_still_raises_a_checkpoint_error():
    for m in (tinypytorch, torch):
        assert isinstance(after_change(m, "one op fewer", determinism_check="none"), error_type(m))


def test_determinism_check_none_still_reports_a_count_mismatch_like_torch():
    theirs = after_change(torch, "one op fewer", determinism_check="none")
    assert FEWER in str(theirs)
    assert FEWER in str(after_change(tinypytorch, "one op fewer", determinism_check="none"))


def test_bad_options_are_refused_like_torch():
    x, xt = make_ours([1.0]), make(torch, [1.0])
    with pytest.raises(ValueError, match=r"determinism_check should be one of \['default', 'none'\], but got"):
        checkpoint(tinypytorch.sin, x, use_reentrant=False, determinism_check="bogus")
    with pytest.raises(ValueError, match=r"determinism_check should be one of \['default', 'none'\], but got"):
        torch_checkpoint.checkpoint(torch.sin, xt, use_reentrant=False, determinism_check="bogus")
    with pytest.raises(TypeError, match="checkpoint: function must be callable, got int"):
        checkpoint(3, x, use_reentrant=False)
    with pytest.raises(TypeError):
        torch_checkpoint.checkpoint(3, xt, use_reentrant=False)


# ----- saved tensors: versions, freeing, retain_graph -------------------------------------------

def exp_of_half(m, h):
    return m.exp(h * 0.5)  # saves exp's output only: no saved tensor inside shares memory with the input


@pytest.mark.parametrize("function", [functools.partial(u, calls=[0]), exp_of_half], ids=["u", "exp of half"])
@pytest.mark.parametrize("m", [tinypytorch, torch], ids=["tinypytorch", "torch"])
def test_an_input_changed_in_place_after_forward_raises(m, function):
    x = make(m, [0.5, 1.0, 2.0])
    a = x * 2.0
    y = checkpointed(m, functools.partial(function, m), a).sum()
    a.add_(1.0)
    with pytest.raises(RuntimeError, match=MODIFIED + r".*which is output 0 of Add, is at version 1; expected "
                                                      r"version 0 instead"):
        y.backward()


def test_an_input_changed_in_place_before_forward_is_fine():
    calls = [0]
    x = make_ours([0.5, 1.0])
    a = x * 2.0
    a.add_(1.0)
    checkpoint(functools.partial(u, tinypytorch, calls=calls), a, use_reentrant=False).sum().backward()
    h = 2 * np.array([0.5, 1.0]) + 1
    np.testing.assert_allclose(x.grad.data, 2 * (np.cos(h) + np.sin(h)) * np.exp(h), rtol=1e-14)


@given(st.integers(1, 3), float_arrays(-2.0, 2.0, min_dims=1, max_dims=1, max_side=3))
def test_each_retained_pass_recomputes_once_and_a_pass_after_the_last_raises_like_torch(passes, x0):
    results = []
    for m in (tinypytorch, torch):
        calls = [0]
        x = make(m, x0)
        y = checkpointed(m, functools.partial(u, m, calls=calls), x).sum()
        counts = [calls[0]]
        for i in range(passes):
            y.backward(retain_graph=i < passes - 1)
            counts.append(calls[0])
        with pytest.raises(RuntimeError, match=BACKWARD_TWICE):
            y.backward()
        assert calls[0] == counts[-1]  # the failed pass recomputed nothing
        results.append((counts, grad_of(x)))
    (counts, grad), (counts_t, grad_t) = results
    assert counts == counts_t == list(range(1, passes + 2))
    np.testing.assert_allclose(grad, passes * (np.cos(x0) + np.sin(x0)) * np.exp(x0), rtol=1e-13, atol=1e-13)
    assert_close_to_torch(grad, grad_t)


def test_recomputed_tensors_are_dropped_once_used_even_with_retain_graph():
    x = make_ours([0.5, 1.0])
    y = checkpoint(lambda v: tinypytorch.tanh(tinypytorch.sin(v) * v), x, use_reentrant=False).sum()
    holders = [saved.packed for _, saved in tinypytorch.utils.saved_tensors(y)]
    assert len(holders) == 4 and all(holder.values == {} for holder in holders)
    y.backward(retain_graph=True)
    assert all(list(holder.values.values()) == [None] for holder in holders)
    y.backward(retain_graph=True)
    assert all(list(holder.values.values()) == [None, None] for holder in holders)


def test_frames_holders_and_recomputed_tensors_are_freed_after_backward_without_the_collector():
    gc.collect()
    gc.disable()
    try:
        x = make_ours(np.linspace(-1.0, 1.0, 5))
        y = checkpoint(lambda v: tinypytorch.tanh(tinypytorch.exp(v) * v), x, use_reentrant=False).sum()
        pairs = tinypytorch.utils.saved_tensors(y)
        frame = weakref.ref(pairs[0][1].unpack_hook.__self__)
        holders = [weakref.ref(saved.packed) for _, saved in pairs]
        del pairs
        y.backward()
        assert frame() is None
        assert all(holder() is None for holder in holders)
    finally:
        gc.enable()


def test_the_recomputed_graph_is_freed_without_the_collector():
    # The outer sin saves Tanh's output, so the recomputation hands that Variable to its pack hook. Kept
    # with its graph, it would refer to the recomputed Tanh, which saved it: a cycle.
    made = []  # weak references to every Tanh node, the forward's and the recomputation's

    class Tanh(Function):
        def forward(self, x):
            made.append(weakref.ref(self))
            y = np.tanh(x)
            self.save_for_backward(y)
            return y

        def backward(self, gy):
            (y,) = self.saved_tensors
            return gy * (1 - y * y)

    gc.collect()
    gc.disable()
    try:
        x = make_ours([0.5, 1.0])
        y = checkpoint(lambda v: tinypytorch.sin(Tanh()(tinypytorch.sin(v))), x, use_reentrant=False).sum()
        y.backward(retain_graph=True)
        assert len(made) == 2 and made[0]() is not None  # the forward's node, kept by the retained graph
        assert made[1]() is None  # the recomputation's node: only its values were kept, and they were used
        del y
        assert made[0]() is None
    finally:
        gc.enable()
    t = np.tanh(np.sin([0.5, 1.0]))
    np.testing.assert_allclose(x.grad.data, np.cos(t) * (1 - t**2) * np.cos([0.5, 1.0]), rtol=1e-15)


def test_a_holder_unpacked_twice_in_one_pass_raises_like_torch():
    class ReadsTwice(Function):
        def forward(self, x):
            self.save_for_backward(x)
            return x * x

        def backward(self, gy):
            (x,) = self.saved_tensors
            (x,) = self.saved_tensors
            return 2.0 * x * gy

    class ReadsTwiceT(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            (x,) = ctx.saved_tensors
            return 2.0 * x * gy

    x = make_ours([1.0, 2.0])
    ReadsTwice()(x).sum().backward()  # without the checkpoint, reading twice is fine
    np.testing.assert_array_equal(x.grad.data, [2.0, 4.0])
    y = checkpoint(lambda v: ReadsTwice()(tinypytorch.sin(v)), make_ours([1.0, 2.0]), use_reentrant=False).sum()
    with pytest.raises(CheckpointError, match=f"^tinypytorch.utils.checkpoint: {TWICE}"):
        y.backward()
    yt = torch_checkpoint.checkpoint(lambda v: ReadsTwiceT.apply(torch.sin(v)), make(torch, [1.0, 2.0]),
                                     use_reentrant=False).sum()
    with pytest.raises(torch_checkpoint.CheckpointError, match=f"^torch.utils.checkpoint: {TWICE}"):
        yt.backward()


# ----- no_grad, tuple outputs, inputs without grad ------------------------------------------------

def test_under_no_grad_the_function_just_runs_like_torch():
    for m, context in [(tinypytorch, no_grad), (torch, torch.no_grad)]:
        calls = [0]
        with context():
            y = checkpointed(m, functools.partial(u, m, calls=calls), make(m, [0.5, 1.0]))
        assert calls[0] == 1
        assert not y.requires_grad and y.grad_fn is None
        np.testing.assert_allclose(np.asarray(y.numpy() if m is torch else y.data),
                                   np.sin([0.5, 1.0]) * np.exp([0.5, 1.0]), rtol=1e-15)


def test_under_no_grad_nothing_is_saved():
    packed = []
    with saved_tensors_hooks(lambda v: packed.append(v) or v, lambda v: v):
        with no_grad():
            checkpoint(lambda v: tinypytorch.sin(v) * v, make_ours([0.5, 1.0]), use_reentrant=False)
    assert packed == []


@given(float_arrays(-1.5, 1.5, min_dims=1, max_dims=1, max_side=3).flatmap(
    lambda a: st.tuples(st.just(a), arrays(np.float64, a.shape, elements=floats(-1.5, 1.5)))))
def test_tuple_outputs_give_torchs_gradients(ab):
    a0, b0 = ab
    results = []
    for m in (tinypytorch, torch):
        calls = [0]

        def two(a, b, m=m, calls=calls):
            calls[0] += 1
            return m.sin(a) * b, m.exp(b) * a

        a, b = make(m, a0), make(m, b0)
        p, q = checkpointed(m, two, a, b)
        (p.sum() + (q * q).sum()).backward()
        results.append((calls[0], grad_of(a), grad_of(b)))
    (calls, ga, gb), (calls_t, ga_t, gb_t) = results
    assert calls == calls_t == 2
    # d/da [sum sin(a) b + sum e^(2b) a^2] and d/db, by hand
    np.testing.assert_allclose(ga, np.cos(a0) * b0 + 2 * np.exp(2 * b0) * a0, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(gb, np.sin(a0) + 2 * np.exp(2 * b0) * a0**2, rtol=1e-13, atol=1e-13)
    assert_close_to_torch(ga, ga_t)
    assert_close_to_torch(gb, gb_t)


def test_an_input_without_grad_still_gives_the_parameters_their_gradients_like_torch():
    model = MLP((3, 4, 2), activation=F.tanh, rng=np.random.default_rng(0))
    batch = np.random.default_rng(1).standard_normal((5, 3))
    results = []
    for use_checkpoint in (False, True):
        model.cleargrads()
        x = Variable(batch, requires_grad=False)
        y = checkpoint(model, x, use_reentrant=False) if use_checkpoint else model(x)
        (y**2).sum().backward()
        results.append([p.grad.data for p in model.params()])
    for g, g_plain in zip(*results):
        np.testing.assert_array_equal(g, g_plain)
    twin = torch_twin(model, torch.nn.Tanh)
    (torch_checkpoint.checkpoint(twin, torch.from_numpy(batch), use_reentrant=False) ** 2).sum().backward()
    for g, pt in zip(results[1], twin.parameters()):
        assert_close_to_torch(g, pt.grad.numpy())


# ----- dropout ------------------------------------------------------------------------------------

@given(st.integers(0, 2**32 - 1), st.sampled_from([0.2, 0.5]))
def test_dropout_gradients_are_bitwise_those_of_the_plain_run_and_the_stream_continues_alike(seed, p):
    model = MLP((4, 6, 6, 1), activation=F.tanh, rng=np.random.default_rng(seed))
    batch = np.random.default_rng(seed + 1).standard_normal((5, 4))

    def hidden(h):
        for layer in model.layers[:-1]:
            h = F.dropout(tinypytorch.tanh(layer(h)), p)
        return h

    def run(use_checkpoint, **options):
        model.cleargrads()
        tinypytorch.manual_seed(seed)
        x = Variable(batch.copy())
        h = checkpoint(hidden, x, use_reentrant=False, **options) if use_checkpoint else hidden(x)
        loss = (model.layers[-1](h) ** 2).sum()
        draws = [tinypytorch.random.default_generator().random()]  # the stream moves between the passes
        loss.backward()
        draws.append(tinypytorch.random.default_generator().random())
        return [q.grad.data.copy() for q in model.params()] + [x.grad.data], draws

    plain, draws_plain = run(False)
    grads, draws = run(True)
    for g, g_plain in zip(grads, plain):
        np.testing.assert_array_equal(g, g_plain)
    assert draws == draws_plain  # the recomputation drew inside a fork: the stream went on where it was
    unpreserved, _ = run(True, preserve_rng_state=False)
    assert not all(np.array_equal(g, g_plain) for g, g_plain in zip(unpreserved, plain))


# ----- memory -------------------------------------------------------------------------------------

def held_bytes(model, batch, use_checkpoint):
    """Bytes of the distinct non-parameter arrays an outer pack hook sees, for the MLP's hidden layers
    (checkpointed or not) followed by its output layer and a squared loss."""
    def hidden(h):
        for layer in model.layers[:-1]:
            h = tinypytorch.tanh(layer(h))
        return h

    with counting_saved() as (_, arrays):
        x = Variable(batch, requires_grad=False)
        h = checkpoint(hidden, x, use_reentrant=False) if use_checkpoint else hidden(x)
        loss = (model.layers[-1](h) ** 2).sum()
    held = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    loss.backward()
    return held


def held_bytes_torch(model, batch, use_checkpoint):
    twin = [torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=torch.float64)
            for layer in model.layers]
    with torch.no_grad():
        for layer, linear in zip(model.layers, twin):
            linear.weight.copy_(torch.from_numpy(layer.weight.data))
            linear.bias.copy_(torch.from_numpy(layer.bias.data))
    parameters = {p.data_ptr() for linear in twin for p in linear.parameters()}
    storages = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in parameters:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def hidden(h):
        for linear in twin[:-1]:
            h = torch.tanh(linear(h))
        return h

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = torch.from_numpy(batch)
        h = torch_checkpoint.checkpoint(hidden, x, use_reentrant=False) if use_checkpoint else hidden(x)
        loss = (twin[-1](h) ** 2).sum()
    loss.backward()
    return sum(storages.values())


@given(st.integers(1, 4), st.integers(2, 6), st.integers(1, 5), st.integers(1, 4))
def test_the_checkpoint_holds_only_its_inputs_and_the_bytes_equal_torchs(depth, width, batch_size, n_in):
    model = MLP((n_in,) + (width,) * depth + (1,), activation=F.tanh, rng=np.random.default_rng(depth))
    batch = np.random.default_rng(0).standard_normal((batch_size, n_in))
    activation, inputs, output = batch_size * width * 8, batch_size * n_in * 8, batch_size * 8
    plain, kept = held_bytes(model, batch, False), held_bytes(model, batch, True)
    # plain: every tanh output (each also the next layer's input), the batch, the output (saved by the square)
    assert plain == depth * activation + inputs + output
    # checkpointed: the checkpoint's input, the last hidden activation (the output layer's input), the output
    assert kept == inputs + activation + output
    assert (plain, kept) == (held_bytes_torch(model, batch, False), held_bytes_torch(model, batch, True))


# ----- the step's own figures ---------------------------------------------------------------------

def test_the_steps_figures():
    activation, batch, output = 256 * 256 * 8, 256 * 64 * 8, 256 * 8
    assert step.plain_bytes == 8 * activation + batch + output
    assert step.checkpointed_bytes == activation + batch + output
    assert step.runs == {"outer": 2, "inner": 3}
    assert step.count_runs(True)[:2] == (6, ["sin", "square", "tanh"])
    assert step.count_runs(False)[:2] == (6, ["sin", "square", "tanh", "add 1", "times 3", "neg"])


def test_a_recomputation_with_one_op_fewer_and_a_dtype_change_reports_the_count_first_like_torch():
    def make(m, change):
        def f(x):
            a = m.sin(x)
            if not change[0]:
                a = a * a
            return m.tanh(a * (np.float32(2.0) if change[0] and m is tinypytorch else 2.0))
        return f

    change = [False]
    x = Variable(np.array([0.5, 1.0]))
    y = checkpoint(make(tinypytorch, change), x, use_reentrant=False).sum()
    change[0] = True
    with pytest.raises(CheckpointError, match="A different number of tensors was saved"):
        y.backward()


def test_keyword_arguments_reach_the_function_and_its_recomputation_like_torch():
    calls = []

    def f(x, *, scale):
        calls.append(scale)
        return tinypytorch.sin(x) * scale

    x, x_t = Variable(np.array([0.5, 1.0])), torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    checkpoint(f, x, use_reentrant=False, scale=3.0).sum().backward()
    torch.utils.checkpoint.checkpoint(lambda t, *, scale: torch.sin(t) * scale, x_t, use_reentrant=False,
                                      scale=3.0).sum().backward()
    assert calls == [3.0, 3.0]
    np.testing.assert_allclose(x.grad.data, x_t.grad.numpy(), rtol=1e-15)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(f, x, use_reentrant=True, scale=3.0)


# ----- the page's examples, against PyTorch (moved from the page's check) -----------------------------------

def test_the_pages_two_retained_passes_and_a_third_like_torch():
    def two_passes(m, x, checkpointed_function):
        calls = [0]
        y = checkpointed_function(functools.partial(u, m, calls=calls))(x).sum()
        counts = [calls[0]]
        for retain in (True, False):
            y.backward(retain_graph=retain)
            counts.append(calls[0])
        with pytest.raises(RuntimeError) as error:
            y.backward()
        return counts, grad_of(x), str(error.value)[:60]

    ours = two_passes(tinypytorch, make_ours(step.x0), lambda fn: functools.partial(checkpoint, fn, use_reentrant=False))
    theirs = two_passes(torch, make(torch, step.x0),
                        lambda fn: functools.partial(torch_checkpoint.checkpoint, fn, use_reentrant=False))
    assert ours[0] == theirs[0] == [1, 2, 3] and ours[2] == theirs[2], (ours, theirs)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-14)
    np.testing.assert_allclose(theirs[1], 2 * (np.cos(step.x0) + np.sin(step.x0)) * np.exp(step.x0), rtol=1e-14)


def test_the_pages_nested_checkpoint_like_torch():
    step.runs.update(outer=0, inner=0)
    x = make_ours(step.x0)
    checkpoint(step.outer, x, use_reentrant=False).sum().backward()
    runs_t = {"outer": 0, "inner": 0}

    def inner_t(h):
        runs_t["inner"] += 1
        return torch.tanh(h) * h

    def outer_t(x):
        runs_t["outer"] += 1
        return torch.sin(torch_checkpoint.checkpoint(inner_t, torch.exp(x), use_reentrant=False))

    xt = make(torch, step.x0)
    torch_checkpoint.checkpoint(outer_t, xt, use_reentrant=False).sum().backward()
    assert step.runs == runs_t == {"outer": 2, "inner": 3}, (step.runs, runs_t)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-14)


def test_the_pages_determinism_errors_and_gradients_like_torch():
    assert step.backward_after_change(None) == f"no error, x.grad = {step.show(right_gradient(step.x0))}"
    fewer = step.backward_after_change("one op fewer")
    assert fewer == (f"CheckpointError: tinypytorch.utils.checkpoint: {FEWER}\nNumber of tensors saved during "
                     "forward: 4\nNumber of tensors saved during recomputation: 2.")
    cast = step.backward_after_change("float32")
    assert cast.startswith(f"CheckpointError: tinypytorch.utils.checkpoint: {METADATA}\n")
    assert [line for line in cast.split("\n") if line.startswith("tensor at position")] == \
        [f"tensor at position {k}:" for k in (1, 2, 3)]  # PyTorch lists the same positions
    theirs = str(after_change(torch, "float32"))
    assert [line for line in theirs.split("\n") if line.startswith("tensor at position")] == \
        [f"tensor at position {k}:" for k in (1, 2, 3)]
    assert step.torch_after_change("one op fewer").startswith(fewer.replace("tinypytorch.utils", "torch.utils"))


def test_the_pages_dropout_gradients_are_bitwise_the_plain_ones_in_torch_too():
    linears = []
    for layer in step.drop_model.layers:
        linears.append(torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=torch.float64))
        with torch.no_grad():
            linears[-1].weight.copy_(torch.from_numpy(layer.weight.data))
            linears[-1].bias.copy_(torch.from_numpy(layer.bias.data))

    def dropped_t(h):
        for linear in linears[:-1]:
            h = torch.nn.functional.dropout(torch.tanh(linear(h)), p=0.3)
        return h

    def gradients_t(use_checkpoint):
        for linear in linears:
            linear.zero_grad()
        torch.manual_seed(0)
        xt = make(torch, step.drop_batch)
        hidden = torch_checkpoint.checkpoint(dropped_t, xt, use_reentrant=False) if use_checkpoint else dropped_t(xt)
        (linears[-1](hidden) ** 2).sum().backward()
        return [p.grad.clone() for linear in linears for p in linear.parameters()] + [xt.grad]

    assert all(torch.equal(a, b) for a, b in zip(gradients_t(False), gradients_t(True)))
    plain = step.dropout_gradients(False)
    assert all(np.array_equal(a, b) for a, b in zip(plain, step.dropout_gradients(True)))
    assert not all(np.array_equal(a, b) for a, b in zip(plain, step.dropout_gradients(True, preserve_rng_state=False)))


def test_the_pages_mlp_bytes_and_loss_like_torch():
    assert (step.plain_bytes, step.checkpointed_bytes) == \
        (held_bytes_torch(step.model, step.batch, False), held_bytes_torch(step.model, step.batch, True))
    twin = [torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=torch.float64)
            for layer in step.model.layers]
    with torch.no_grad():
        for layer, linear in zip(step.model.layers, twin):
            linear.weight.copy_(torch.from_numpy(layer.weight.data))
            linear.bias.copy_(torch.from_numpy(layer.bias.data))
        h = torch.from_numpy(step.batch)
        for linear in twin[:-1]:
            h = torch.tanh(linear(h))
        loss_t = (twin[-1](h) ** 2).sum().item()
    np.testing.assert_allclose(float(step.loss_of(True).data), loss_t, rtol=1e-12)


def test_the_pages_peak_during_backward_is_not_lowered_by_one_checkpoint():
    (after_plain, peak_plain), (after_kept, peak_kept) = step.traced[False], step.traced[True]
    activation = step.ACTIVATION
    assert round(after_plain / activation) == 8 and round(after_kept / activation) == 1  # between the passes
    assert round(peak_plain / activation) == round(peak_kept / activation)  # the printed "~11" twice
