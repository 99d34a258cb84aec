"""Step 63: selective activation checkpointing (checkpoint's context_fn, create_selective_checkpoint_contexts),
checked against torch.utils.checkpoint doing the same: gradients, what is kept, what runs again, and the errors."""
import collections
import functools
import threading

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as tc
from memory import tracing_numpy
from steploader import load_step

import tinypytorch
from tinypytorch import Function, Variable, modes, recomputation
from tinypytorch import functions as F
from tinypytorch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext, checkpoint
from tinypytorch.utils.checkpoint import create_selective_checkpoint_contexts as contexts
from tinypytorch.utils.selective_checkpoint import BACKWARD_TWICE, MUTATED, kept_bytes

pytestmark = [pytest.mark.step63, pytest.mark.torch]
N, D, LAYERS = 6, 5, 3
rng = np.random.default_rng(60)
X = rng.standard_normal((N, D))
WEIGHTS = [(rng.standard_normal((D, D)) / 2, rng.standard_normal(D)) for _ in range(LAYERS)]
OURS = {"tanh": F.tanh, "relu": F.relu, "linear": F.linear, "save": [F.LinearFunction]}
THEIRS = {"tanh": torch.tanh, "relu": torch.relu, "linear": torch.nn.functional.linear,
          "save": [torch.ops.aten.addmm.default, torch.ops.aten.mm.default]}


def mlp(x, params, ops, activation):
    for i, (W, b) in enumerate(params):
        x = ops["linear"](x, W, b)
        if i < len(params) - 1:
            x = ops[activation](x)
    return x


def run_ours(policy, activation="tanh", counts=None):
    """Gradients of sum(y^2) for the MLP checkpointed under `policy` (None: no checkpoint); counts: Function name ->
    forwards run while recomputing, counted on the classes' own forward."""
    params = [(Variable(W.copy()), Variable(b.copy())) for W, b in WEIGHTS]
    x = Variable(X.copy())
    f = functools.partial(mlp, params=params, ops=OURS, activation=activation)
    y = f(x) if policy is None else checkpoint(f, x, use_reentrant=False,
                                               context_fn=functools.partial(contexts, policy))
    with counting_forwards(counts):
        (y * y).sum().backward()
    return [p.grad.data for pair in params for p in pair]


@pytest.fixture
def counted():
    return collections.Counter()


class counting_forwards:
    def __init__(self, counts):
        self.counts = counts

    def __enter__(self):
        self.originals = {c: c.__dict__["forward"] for c in (F.LinearFunction, F.Tanh, F.ReLU)}
        for c, forward in self.originals.items():
            c.forward = self.wrap(c, forward)

    def wrap(self, c, forward):
        def counted(op, *xs):
            if self.counts is not None and recomputation.is_recomputing():
                self.counts[c.__name__] += 1
            return forward(op, *xs)
        return counted

    def __exit__(self, *exc):
        for c, forward in self.originals.items():
            c.forward = forward


# the page's counter of the ATen operations run during the recomputation (a dict: op name -> count)
TorchCounting = load_step(63).TorchRecomputations


def run_torch(policy, activation="tanh", counts=None):
    params = [(torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)) for W, b in WEIGHTS]
    counter, runs = TorchCounting(), []

    def f(x):
        runs.append(1)
        counter.on = len(runs) > 1
        try:
            return mlp(x, params, THEIRS, activation)
        finally:
            counter.on = False
    x = torch.tensor(X)
    y = f(x) if policy is None else tc.checkpoint(f, x, use_reentrant=False,
                                                  context_fn=functools.partial(tc.create_selective_checkpoint_contexts,
                                                                               policy))
    with counter:
        (y * y).sum().backward()
    if counts is not None:
        counts.update(counter.counts)
    return [p.grad.numpy() for pair in params for p in pair]


def policies(fw):
    P = CheckpointPolicy if fw is tinypytorch else tc.CheckpointPolicy
    ops = OURS if fw is tinypytorch else THEIRS
    return {
        "recompute all": lambda ctx, op, *a, **k: P.PREFER_RECOMPUTE,
        "save the matmuls (list)": ops["save"],
        "save the matmuls (bool)": lambda ctx, op, *a, **k: op in ops["save"],
        "save all": lambda ctx, op, *a, **k: P.PREFER_SAVE,
        "must save all": lambda ctx, op, *a, **k: P.MUST_SAVE,
        "must recompute all": lambda ctx, op, *a, **k: P.MUST_RECOMPUTE,
    }


def test_the_policy_enum_is_torchs():
    assert [(p.name, p.value) for p in CheckpointPolicy] == [(p.name, p.value) for p in tc.CheckpointPolicy]
    ctx = SelectiveCheckpointContext(is_recompute=False)
    assert ctx.is_recompute is False and ctx.op_output is None
    with pytest.raises(TypeError):
        SelectiveCheckpointContext(False)  # keyword only, as torch's
    with pytest.raises(TypeError):
        tc.SelectiveCheckpointContext(False)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("name", list(policies(torch)))
def test_gradients_equal_no_checkpoint_and_torchs_with_the_same_policy(name, activation):
    plain = run_ours(None, activation)
    ours = run_ours(policies(tinypytorch)[name], activation)
    theirs = run_torch(policies(torch)[name], activation)
    for a, b, t in zip(plain, ours, theirs):
        np.testing.assert_array_equal(a, b)  # the same operations on the same arrays
        np.testing.assert_allclose(b, t, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["recompute all", "save the matmuls (list)", "save all"])
def test_what_runs_again_per_operation_type_matches_torch(name):
    ours, theirs = collections.Counter(), collections.Counter()
    run_ours(policies(tinypytorch)[name], counts=ours)
    run_torch(policies(torch)[name], counts=theirs)
    assert ours["Tanh"] == theirs["tanh"]
    assert theirs["t"] == (LAYERS if name != "save all" else 0)  # the weights' transposes: a view, no arithmetic
    # torch saves an operation's inputs before running it, the package after: recomputing, torch stops early
    # before the last addmm runs, the package only after its last LinearFunction ran
    stopped_before = 1 if name == "recompute all" else 0
    assert ours["LinearFunction"] == theirs["addmm"] + stopped_before
    assert ours["LinearFunction"] == (LAYERS if name == "recompute all" else 0)


def test_the_policy_is_asked_once_per_operation_in_the_first_run_only_as_torchs():
    asked = {"ours": [], "torch": []}

    def policy(who):
        def fn(ctx, op, *args, **kwargs):
            asked[who].append((getattr(op, "__name__", str(op)), ctx.is_recompute))
            return False
        return fn
    run_ours(policy("ours"))
    run_torch(policy("torch"))
    assert {r for _, r in asked["ours"]} == {r for _, r in asked["torch"]} == {False}  # never asked recomputing
    assert [n for n, _ in asked["ours"]] == ["LinearFunction", "Tanh"] * (LAYERS - 1) + ["LinearFunction"]
    assert [n for n, _ in asked["torch"] if n != "t.default"] == ["addmm.default", "tanh.default"] * (LAYERS - 1) + [
        "addmm.default"]


def test_the_policy_gets_the_inputs_and_the_output():
    seen = []

    def policy(ctx, op, *args):
        seen.append((op, [a.shape for a in args], ctx.op_output.shape))
        return True
    x = Variable(np.ones((2, 3)))
    W = Variable(np.ones((4, 3)))
    checkpoint(lambda x: F.linear(x, W), x, use_reentrant=False, context_fn=functools.partial(contexts, policy))
    assert seen == [(F.LinearFunction, [(2, 3), (4, 3)], (2, 4))]


def kept_after_forward(policy):
    """NumPy bytes held after the checkpointed forward, beyond what plain checkpointing holds (tracemalloc)."""
    params = [(Variable(W.copy()), Variable(b.copy())) for W, b in WEIGHTS]
    x = Variable(np.tile(X, (40, 1)))  # 240 rows: the kept outputs dwarf any small bookkeeping
    f = functools.partial(mlp, params=params, ops=OURS, activation="tanh")
    with tracing_numpy() as held:
        pair = contexts(policy)
        y = checkpoint(f, x, use_reentrant=False, context_fn=lambda: pair)
        measured = held()  # y included: the region's last output is also kept when saved
        counted = kept_bytes(pair[0])
        del y  # held until measured, as a caller would hold it
    return measured, counted


def test_kept_bytes_is_what_tracemalloc_sees_held():
    nothing, _ = kept_after_forward(lambda *a, **k: False)
    for policy, outputs in (([F.LinearFunction], LAYERS), (lambda *a, **k: True, 2 * LAYERS - 1)):
        measured, counted = kept_after_forward(policy)
        assert counted == outputs * 240 * D * 8
        # the last output kept is the region's output y, held anyway: the rest is what keeping costs
        assert abs((measured - nothing) - (counted - 240 * D * 8)) <= 1024


def torch_kept_bytes(policy):
    params = [(torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)) for W, b in WEIGHTS]
    pair = tc.create_selective_checkpoint_contexts(policy)
    tc.checkpoint(lambda x: mlp(x, params, THEIRS, "tanh"), torch.tensor(X), use_reentrant=False,
                  context_fn=lambda: pair)
    blocks = {e.val.untyped_storage().data_ptr(): e.val.untyped_storage().nbytes()
              for entries in pair[0].storage.values() for e in entries.values() if hasattr(e, "val")}
    weights = {p.untyped_storage().data_ptr() for pair_ in params for p in pair_}
    return sum(n for ptr, n in blocks.items() if ptr not in weights)


@pytest.mark.parametrize("name", ["recompute all", "save the matmuls (list)", "save all"])
def test_kept_bytes_equal_torchs_storage_less_the_weights_views(name):
    pair = contexts(policies(tinypytorch)[name])
    params = [(Variable(W.copy()), Variable(b.copy())) for W, b in WEIGHTS]
    checkpoint(functools.partial(mlp, params=params, ops=OURS, activation="tanh"), Variable(X.copy()),
               use_reentrant=False, context_fn=lambda: pair)
    assert kept_bytes(pair[0]) == torch_kept_bytes(policies(torch)[name])


# ----- bad input and PyTorch's errors --------------------------------------------------------------------

@pytest.mark.parametrize("answer", [None, "save", 1])
def test_a_policy_answering_something_else_is_refused(answer):
    x = Variable(X.copy())
    W = Variable(WEIGHTS[0][0].copy())
    with pytest.raises(TypeError, match="policy_fn must return a CheckpointPolicy or a bool"):
        checkpoint(lambda x: F.linear(x, W), x, use_reentrant=False,
                   context_fn=functools.partial(contexts, lambda *a, **k: answer))
    assert "selective checkpoint" not in modes.open_now()  # the region closed


def twice(fw):
    """Backward twice through a region whose matmul was kept: torch's error the second time."""
    x, W = (fw.tensor(X.copy()), fw.tensor(WEIGHTS[0][0].copy()))
    W.requires_grad_(True)
    mm = F.MatMul if fw is tinypytorch else torch.ops.aten.mm.default
    make = contexts if fw is tinypytorch else tc.create_selective_checkpoint_contexts
    run = checkpoint if fw is tinypytorch else tc.checkpoint
    y = run(lambda x: fw.tanh(fw.matmul(x, W)), x, use_reentrant=False,
            context_fn=functools.partial(make, [mm])).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError) as error:
        y.backward()
    return str(error.value)


def test_backward_twice_is_refused_as_in_torch():
    assert twice(tinypytorch) == twice(torch) == BACKWARD_TWICE


def mutated(fw, allow=False):
    """The region returns a kept matmul's output h and tanh(h); h is changed in place before backward."""
    x, W = (fw.tensor(X.copy()), fw.tensor(WEIGHTS[0][0].copy()))
    W.requires_grad_(True)
    mm = F.MatMul if fw is tinypytorch else torch.ops.aten.mm.default
    make = contexts if fw is tinypytorch else tc.create_selective_checkpoint_contexts

    def f(x):
        h = fw.matmul(x, W)
        return h, fw.tanh(h)
    run = checkpoint if fw is tinypytorch else tc.checkpoint
    h, y = run(f, x, use_reentrant=False, context_fn=functools.partial(make, [mm], allow_cache_entry_mutation=allow))
    h.mul_(2.0)
    y.sum().backward()
    return W.grad


def test_a_kept_output_changed_in_place_is_refused_as_in_torch():
    for fw in (tinypytorch, torch):
        with pytest.raises(RuntimeError, match="^" + MUTATED + "$"):
            mutated(fw)
    # allowed: both use the changed value, alike
    np.testing.assert_allclose(mutated(tinypytorch, allow=True).data, mutated(torch, allow=True).numpy(), atol=1e-12)


def test_context_fn_with_use_reentrant_true_is_torchs_error():
    def message(run, make, op):
        with pytest.raises(ValueError) as error:
            run(lambda x: x * 2, Variable(X) if run is checkpoint else torch.tensor(X), use_reentrant=True,
                context_fn=functools.partial(make, [op]))
        return str(error.value)
    assert message(checkpoint, contexts, F.MatMul) == message(tc.checkpoint, tc.create_selective_checkpoint_contexts,
                                                              torch.ops.aten.mm.default)


def test_a_list_of_something_else_or_neither_list_nor_function_is_refused():
    with pytest.raises(ValueError, match="Expected op in `op_list` to be a Function class"):
        contexts(["matmul"])
    with pytest.raises(ValueError, match="Expected op in `op_list` to be an OpOverload"):
        tc.create_selective_checkpoint_contexts(["matmul"])
    for make in (contexts, tc.create_selective_checkpoint_contexts):
        with pytest.raises(TypeError, match="^policy_fn_or_list must be either a function or a list of ops.$"):
            make(3)


def test_under_no_grad_nothing_is_asked_as_in_torch():
    asked = {"ours": 0, "torch": 0}

    def policy(who):
        def fn(*args, **kwargs):
            asked[who] += 1
            return True
        return fn
    with tinypytorch.no_grad():
        checkpoint(F.tanh, Variable(X), use_reentrant=False, context_fn=functools.partial(contexts, policy("ours")))
    with torch.no_grad():
        tc.checkpoint(torch.tanh, torch.tensor(X), use_reentrant=False,
                      context_fn=functools.partial(tc.create_selective_checkpoint_contexts, policy("torch")))
    assert asked == {"ours": 0, "torch": 0}


def test_another_threads_operations_are_not_sent_to_the_region():
    asked, other = [], {}
    started, done = threading.Event(), threading.Event()

    def worker():
        started.wait()
        other["y"] = F.tanh(Variable(np.zeros(3))).data
        done.set()

    def region(x):
        started.set()
        done.wait(5)
        return F.tanh(x)
    thread = threading.Thread(target=worker)
    thread.start()
    checkpoint(region, Variable(X, requires_grad=True), use_reentrant=False,
               context_fn=functools.partial(contexts, lambda ctx, op, *a: asked.append(op) or True))
    thread.join()
    assert asked == [F.Tanh] and np.array_equal(other["y"], np.zeros(3))
    assert "selective checkpoint" not in modes.open_now()
