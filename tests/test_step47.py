"""Step 47: RevCol's reversible columns (tinypytorch.reversible.RevColumn, RevColumnFunction and ReversibleColumns),
against the plain column, a torch column and a torch port of RevCol's ReverseFunction; the first column computed
back to zero; alpha clamped away from 0; DropPath with per-level RNG restore; memory against columns; drift."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from memory import counting_saved, tracing_numpy
from reference import assert_close_to_torch, floats
from steploader import load_step
from tinypytorch import Parameter, Variable, autograd, random, recomputation
from tinypytorch.layers import Layer, Linear
from tinypytorch.reversible import (RevColumnFunction, ReversibleColumns, ReversibleColumnsFunction, RevColumn,
                                    clamp_alpha)

pytestmark = [pytest.mark.step47, pytest.mark.torch]
step = load_step(47)  # its PyTorch twins (the check cell's): a torch column and the port of RevCol's ReverseFunction


# ----- levels, columns and stacks ----------------------------------------------------------------------------

def drop_path(h, p, training):
    """timm's DropPath: each row's branch dropped with probability p, drawn from the framework's generator."""
    if not training or p == 0.0:
        return h
    keep = random.default_generator().random((h.shape[0], 1)) >= p
    return h * (keep / (1.0 - p)).astype(h.dtype)


class Level(Layer):
    """l(below, above) = f + project(tanh(expand(f))), f = tanh(down(below) + up(above)), as in the step."""

    def __init__(self, n_below, n, n_above, rng, drop=0.0, expansion=4):
        super().__init__()
        self.down = Linear(n_below, n, rng=rng)
        self.up = Linear(n_above, n, bias=False, rng=rng) if n_above else None
        self.expand = Linear(n, expansion * n, rng=rng)
        self.project = Linear(expansion * n, n, rng=rng)
        self.drop = drop

    def forward(self, below, above):
        fused = self.down(below) if above is None else self.down(below) + self.up(above)
        f = tinypytorch.tanh(fused)
        return f + drop_path(self.project(tinypytorch.tanh(self.expand(f))), self.drop, self.training)


def make_column(rng, d_in, widths, alpha=0.5, drop=0.0, dtype=np.float64, expansion=4, random_alphas=False):
    """A RevColumn of Levels; alphas all `alpha`, or (random_alphas) per channel in +-[0.3, 2] from rng."""
    n = len(widths)
    levels = [Level(d_in if i == 0 else widths[i - 1], widths[i], widths[i + 1] if i + 1 < n else 0, rng, drop,
                    expansion) for i in range(n)]
    if random_alphas:
        alphas = [Parameter(rng.uniform(0.3, 2.0, (1, d)) * rng.choice([-1.0, 1.0], (1, d))) for d in widths]
    else:
        alphas = [Parameter(np.full((1, d), alpha)) for d in widths]
    column = RevColumn(levels, alphas)
    for p in column.params():
        p.data = p.data.astype(dtype)
    return column


def zeros(rows, widths, dtype=np.float64):
    return [Variable(np.zeros((rows, d), dtype), requires_grad=False) for d in widths]


def run_stack(columns, x, widths, nodes=None, one=False, cs=None):
    """The last column's states; the first column from zeros (or cs). one: as ReversibleColumns, one Function."""
    cs = zeros(x.shape[0], widths, x.dtype) if cs is None else cs
    if one:
        cs = ReversibleColumns(*columns)(x, *cs)
        if nodes is not None:
            nodes.append(cs[0].creator)
        return cs
    for column in columns:
        cs = column(x, *cs)
        if nodes is not None:
            nodes.append(cs[0].creator)
    return cs


def weighted_loss(cs, weights):
    return sum((c * w[:c.shape[0]].astype(c.dtype, copy=False)).sum() for c, w in zip(cs, weights))


def set_reversible(columns, reversible):
    for column in columns:
        column.reversible = reversible


def params_of(columns):
    return [p for column in columns for p in column.params()]


def stack_grads(columns, x0, widths, weights, reversible, nodes=None, one=False):
    """(the last column's states, [x's gradient, every parameter's gradient in params() order])."""
    set_reversible(columns, reversible)
    for column in columns:
        column.cleargrads()
    x = Variable(x0)
    cs = run_stack(columns, x, widths, nodes, one)
    weighted_loss(cs, weights).backward()
    return [c.data for c in cs], [x.grad.data] + [p.grad.data for p in params_of(columns)]


def relative_error(ours, theirs):
    return max(np.abs(a - b).max() for a, b in zip(ours, theirs)) / max(np.abs(b).max() for b in theirs)


@st.composite
def configs(draw):
    """(d_in, widths, rows, columns, seed): 1 to 4 levels of 1 to 5 channels, 1 to 4 rows, 1 to 3 columns."""
    n_levels = draw(st.integers(1, 4))
    widths = tuple(draw(st.lists(st.integers(1, 5), min_size=n_levels, max_size=n_levels)))
    return draw(st.integers(1, 5)), widths, draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(0, 2**16))


def build(config, dtype=np.float64):
    """The stack, the input and the loss weights of a config; alphas per channel, away from 0, of both signs."""
    d_in, widths, rows, n_columns, seed = config
    rng = np.random.default_rng(seed)
    columns = [make_column(rng, d_in, widths, dtype=dtype, expansion=2, random_alphas=True) for _ in range(n_columns)]
    x0 = rng.standard_normal((rows, d_in)).astype(dtype)
    weights = [rng.standard_normal((rows, d)) for d in widths]
    return columns, x0, weights


# ----- torch: a plain column, and a port of RevCol's ReverseFunction -----------------------------------------

def torch_stack_grads(columns, x0, widths, weights, way):
    twins = [step.TorchColumn(column) for column in columns]
    x = torch.tensor(x0, requires_grad=True)
    cs = [torch.zeros(x0.shape[0], d, dtype=torch.float64) for d in widths]
    for t in twins:
        cs = getattr(t, way)(x, cs)
    sum((c * torch.from_numpy(w)).sum() for c, w in zip(cs, weights)).backward()
    return [c.detach().numpy() for c in cs], [x.grad.numpy()] + [
        np.zeros(tuple(p.shape)) if p.grad is None else p.grad.numpy() for t in twins for p in t.ordered()]


# ----- outputs and gradients -----------------------------------------------------------------------------------

@given(config=configs())
def test_the_reversible_outputs_are_bitwise_the_plain_columns(config):
    columns, x0, weights = build(config)
    _, widths, _, _, _ = config
    outputs = {}
    for reversible in (True, False):
        set_reversible(columns, reversible)
        cs = run_stack(columns, Variable(x0), widths)
        assert isinstance(cs[0].creator, RevColumnFunction) == reversible
        outputs[reversible] = [c.data for c in cs]
    for a, b in zip(outputs[True], outputs[False], strict=True):
        np.testing.assert_array_equal(a, b)  # the same operations on the same arrays in the same order


@given(config=configs())
def test_gradients_of_x_every_parameter_and_alpha_equal_the_plain_run_and_torch(config):
    columns, x0, weights = build(config)
    _, widths, _, _, _ = config
    _, ours = stack_grads(columns, x0, widths, weights, True)
    _, plain = stack_grads(columns, x0, widths, weights, False)
    states_t, theirs = torch_stack_grads(columns, x0, widths, weights, "plain")
    for g, g_plain, g_t in zip(ours, plain, theirs, strict=True):
        assert g.shape == g_t.shape
        assert_close_to_torch(g_plain, g_t)
        assert_close_to_torch(g, g_t)


@given(config=configs(), state_seed=st.integers(0, 2**16))
def test_gradients_of_the_old_states_of_one_column_equal_torchs(config, state_seed):
    d_in, widths, rows, _, seed = config
    column = make_column(np.random.default_rng(seed), d_in, widths, expansion=2, random_alphas=True)
    rng = np.random.default_rng(state_seed)
    x0, old = rng.standard_normal((rows, d_in)), [rng.standard_normal((rows, d)) for d in widths]
    weights = [rng.standard_normal((rows, d)) for d in widths]
    x, cs = Variable(x0), [Variable(c) for c in old]
    weighted_loss(column(x, *cs), weights).backward()
    twin_column = step.TorchColumn(column)
    for way in ("plain", "reverse"):
        x_t, cs_t = torch.tensor(x0, requires_grad=True), [torch.tensor(c, requires_grad=True) for c in old]
        new_t = getattr(twin_column, way)(x_t, cs_t)
        sum((c * torch.from_numpy(w)).sum() for c, w in zip(new_t, weights)).backward()
        assert_close_to_torch(x.grad.data, x_t.grad.numpy())
        for c, c_t in zip(cs, cs_t, strict=True):
            assert_close_to_torch(c.grad.data, c_t.grad.numpy())
        for p, p_t in zip(column.params(), twin_column.ordered(), strict=True):
            assert_close_to_torch(p.grad.data, p_t.grad.numpy())
        twin_column.zero_grad()


def step_model(n_columns=3, alpha=0.5, dtype=np.float64, drop=0.0):
    """The step's model: x of 8 features, levels of 8, 12, 16 and 20, 16 rows, weights from seed 0."""
    rng = np.random.default_rng(0)
    columns = [make_column(rng, 8, (8, 12, 16, 20), alpha, drop, dtype) for _ in range(n_columns)]
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((16, 8))
    weights = [rng.standard_normal((256, d)) for d in (8, 12, 16, 20)]
    return columns, x0.astype(dtype), weights


WIDTHS = (8, 12, 16, 20)


def test_the_port_of_revcols_reverse_function_gives_torchs_plain_gradients_and_ours():
    columns, x0, weights = step_model()
    weights16 = [w[:16] for w in weights]
    _, ours = stack_grads(columns, x0, WIDTHS, weights, True)
    states_plain, plain = torch_stack_grads(columns, x0, WIDTHS, weights16, "plain")
    states_port, port = torch_stack_grads(columns, x0, WIDTHS, weights16, "reverse")
    for a, b in zip(states_port, states_plain):
        np.testing.assert_array_equal(a, b)  # torch: the port's forward runs the plain column's operations
    for g, g_plain, g_port in zip(ours, plain, port, strict=True):
        np.testing.assert_allclose(g_port, g_plain, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(g, g_port, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("one", [False, True], ids=["chained", "one Function"])
def test_a_hook_on_a_weight_or_alpha_runs_once_per_backward(one):
    """The inner passes inside backward must not run the parameters' hooks; the outer pass runs them once."""
    columns, x0, weights = step_model(n_columns=2)
    _, plain = stack_grads(columns, x0, WIDTHS, weights, False)
    calls = []
    for p in params_of(columns):
        p.register_hook(lambda g: calls.append(1) or g * 2.0)
    _, hooked = stack_grads(columns, x0, WIDTHS, weights, True, one=one)
    assert len(calls) == len(params_of(columns))
    np.testing.assert_allclose(hooked[0], plain[0], rtol=1e-10, atol=1e-13)  # x has no hook
    for g, g_plain in zip(hooked[1:], plain[1:], strict=True):
        np.testing.assert_allclose(g, 2.0 * g_plain, rtol=1e-10, atol=1e-13)


def grads_by_autograd_grad(columns, x0, weights, one=False):
    """(autograd.grad of the reversible run with respect to x and every parameter, the plain run's .grad of the
    same, the parameters, x); checks that autograd.grad filled no .grad."""
    _, plain = stack_grads(columns, x0, WIDTHS, weights, False)
    set_reversible(columns, True)
    for column in columns:
        column.cleargrads()
    params = params_of(columns)
    x = Variable(x0)
    grads = autograd.grad(weighted_loss(run_stack(columns, x, WIDTHS, one=one), weights), [x, *params])
    assert x.grad is None and all(p.grad is None for p in params)
    return grads, plain, params, x


def test_autograd_grad_returns_alpha_and_parameter_gradients_where_the_torch_port_misses_them():
    columns, x0, weights = step_model()
    grads, plain, params, x = grads_by_autograd_grad(columns, x0, weights)
    for g, g_plain in zip(grads, plain, strict=True):
        np.testing.assert_allclose(g.data, g_plain, rtol=1e-12, atol=1e-14)
    # the port: parameters and alphas are not inputs of its node
    twin_column = step.TorchColumn(columns[1])
    x_t = torch.tensor(x0, requires_grad=True)
    new_t = twin_column.reverse(x_t, [torch.tensor(np.ones((16, d))) for d in WIDTHS])
    loss_t = sum((c * torch.from_numpy(w[:16])).sum() for c, w in zip(new_t, weights))
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(loss_t, [x_t, *twin_column.ordered()], retain_graph=True)
    twin_column.zero_grad()
    grads_t = torch.autograd.grad(loss_t, [x_t, *twin_column.ordered()], allow_unused=True)
    assert grads_t[0] is not None and all(g is None for g in grads_t[1:])
    assert all(p.grad is not None for p in twin_column.ordered())  # filled as a side effect


def test_the_alpha_gradient_is_the_sum_over_rows_of_T_times_the_old_state():
    columns, x0, weights = step_model()
    column = columns[1]
    rng = np.random.default_rng(5)
    old = [rng.standard_normal((16, d)) for d in WIDTHS]
    column.cleargrads()
    weighted_loss(column(Variable(x0), *[Variable(c) for c in old]), weights).backward()
    new_t = step.TorchColumn(column).plain(torch.tensor(x0), [torch.tensor(c) for c in old])
    for c in new_t:
        c.retain_grad()
    sum((c * torch.from_numpy(w[:16])).sum() for c, w in zip(new_t, weights)).backward()
    for alpha, c_t, c_old in zip(column.alphas, new_t, old, strict=True):
        expected = (c_t.grad * torch.from_numpy(c_old)).sum(dim=0, keepdim=True).numpy()  # T_i: c_t.grad
        assert alpha.grad.shape == expected.shape
        assert_close_to_torch(alpha.grad.data, expected)


def test_x_used_by_every_column_gets_the_sum_of_their_gradients():
    columns, x0, weights = step_model(n_columns=4)
    _, ours = stack_grads(columns, x0, WIDTHS, weights, True)
    _, theirs = torch_stack_grads(columns, x0, WIDTHS, [w[:16] for w in weights], "plain")
    assert_close_to_torch(ours[0], theirs[0])


def test_float32_stays_float32_and_is_close_to_the_plain_run():
    columns, x0, weights = step_model(dtype=np.float32)
    states, ours = stack_grads(columns, x0, WIDTHS, weights, True)
    plain_states, plain = stack_grads(columns, x0, WIDTHS, weights, False)
    assert all(s.dtype == np.float32 for s in states) and all(g.dtype == np.float32 for g in ours)
    for a, b in zip(states, plain_states):
        np.testing.assert_array_equal(a, b)
    assert relative_error(ours, plain) < 1e-5


def test_under_no_grad_the_column_records_nothing():
    columns, x0, _ = step_model(n_columns=1)
    with tinypytorch.no_grad():
        cs = columns[0](Variable(x0), *zeros(16, WIDTHS))
    assert all(c.creator is None and not c.requires_grad for c in cs)


# ----- the states computed back ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@given(config=configs())
def test_the_first_column_computes_its_zeros_back_exactly(config, dtype):
    columns, x0, weights = build(config, dtype)
    _, widths, _, _, _ = config
    nodes = []
    stack_grads(columns, x0, widths, weights, True, nodes)
    for state, width in zip(nodes[0].reconstructed, widths, strict=True):
        assert state.shape == (x0.shape[0], width)
        assert not state.any()  # exactly 0: c' = l(.) exactly, and l(.) is recomputed bit for bit


def test_a_later_column_computes_back_the_previous_columns_outputs():
    columns, x0, weights = step_model()
    set_reversible(columns, True)
    x, cs, outputs, nodes = Variable(x0), zeros(16, WIDTHS), [], []
    for column in columns:
        cs = column(x, *cs)
        outputs.append([c.data for c in cs])
        nodes.append(cs[0].creator)
    weighted_loss(cs, weights).backward()
    for k in (1, 2):
        for back, true in zip(nodes[k].reconstructed, outputs[k - 1], strict=True):
            np.testing.assert_allclose(back, true, rtol=0, atol=1e-14 * np.abs(true).max())


# ----- alpha kept away from 0 -----------------------------------------------------------------------------------

def revcol_clamp_abs(data, value):
    """RevCol's SubNet._clamp_abs (models/revcol.py), the reference."""
    with torch.no_grad():
        sign = data.sign()
        data.abs_().clamp_(value)
        data *= sign


@given(values=st.lists(floats(-3.0, 3.0).filter(lambda v: v != 0.0), min_size=1, max_size=8))
def test_clamp_alpha_keeps_the_sign_and_lifts_abs_alpha_to_1e_3_like_revcol(values):
    alpha = Parameter(np.array(values))
    expected = torch.tensor(values, dtype=torch.float64)
    revcol_clamp_abs(expected, 1e-3)
    version = alpha._version
    clamp_alpha(alpha)
    np.testing.assert_array_equal(alpha.data, expected.numpy())
    assert np.all(np.abs(alpha.data) >= 1e-3) and np.all(np.sign(alpha.data) == np.sign(values))
    # written in place (a version bump) only when some value needed it
    assert alpha._version == version + (1 if np.any(np.abs(values) < 1e-3) else 0)


def test_the_column_clamps_its_alphas_before_running_in_both_modes():
    for reversible in (True, False):
        column = make_column(np.random.default_rng(0), 3, (2, 2), alpha=-1e-6)
        column.reversible = reversible
        column(Variable(np.ones((2, 3))), *[Variable(np.ones((2, 2))) for _ in range(2)])
        for alpha in column.alphas:
            np.testing.assert_array_equal(alpha.data, np.full((1, 2), -1e-3))


@pytest.mark.parametrize("reversible", [True, False])
def test_an_alpha_of_exactly_zero_is_refused_where_revcols_clamp_keeps_it(reversible):
    data = torch.tensor([0.0, 0.5], dtype=torch.float64)
    revcol_clamp_abs(data, 1e-3)
    assert data[0].item() == 0.0  # RevCol: sign 0 times anything is 0, and the inverse divides by it
    column = make_column(np.random.default_rng(0), 3, (2, 2))
    column.reversible = reversible
    column.alphas[1].data[0, 1] = 0.0
    with pytest.raises(ValueError, match=r"RevColumn: an alpha is 0; the column could not be inverted"):
        column(Variable(np.ones((2, 3))), *[Variable(np.ones((2, 2))) for _ in range(2)])


def inversion_error(alpha, dtype):
    """Relative error of the old states one step-model column computes back, every alpha = `alpha`."""
    column = make_column(np.random.default_rng(0), 8, WIDTHS, alpha, dtype=dtype)
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((16, 8)).astype(dtype)
    weights = [rng.standard_normal((256, d)) for d in WIDTHS]
    old = [np.random.default_rng(2).standard_normal((16, d)).astype(dtype) for d in WIDTHS]
    cs = column(Variable(x0), *[Variable(c) for c in old])
    weighted_loss(cs, weights).backward()
    return max(np.abs(r.astype(np.float64) - c).max()
               for r, c in zip(cs[0].creator.reconstructed, old)) / max(np.abs(c).max() for c in old)


def test_the_inversion_error_grows_like_one_over_alpha_to_the_number_of_levels():
    for dtype in (np.float64, np.float32):
        errors = [inversion_error(a, dtype) for a in (0.5, 0.1, 0.01, 0.001)]
        assert errors == sorted(errors), errors
    eps64 = [inversion_error(a, np.float64) for a in (0.01, 0.001)]
    assert 10**3 < eps64[1] / eps64[0] < 10**5  # about 10^L = 10^4 for a tenfold smaller alpha
    assert 3e-7 < eps64[1] < 2e-5  # measured 1.8e-6 on three CPU settings
    assert inversion_error(0.5, np.float64) < 1e-14
    assert inversion_error(0.001, np.float32) > 10  # float32 cannot invert at all


# ----- randomness: DropPath inside the levels ----------------------------------------------------------------------

class ForgetfulRevColumnFunction(RevColumnFunction):
    """Without the RNG snapshots: levels recomputed with whatever the generator draws."""

    def backward(self, *gys):
        self.states = [None] * len(self.states)
        return super().backward(*gys)


class OneSnapshotRevColumnFunction(RevColumnFunction):
    """One snapshot for the whole column (the first level's), as a checkpoint of the column would keep."""

    def backward(self, *gys):
        self.states = [self.states[0]] * len(self.states)
        return super().backward(*gys)


def dropout_grads(columns, x0, weights, function=None):
    """(gradients, the first column's states computed back, the generator's state after backward and after the
    forward pass), seeded with manual_seed(0)."""
    for column in columns:
        column.cleargrads()
    tinypytorch.manual_seed(0)
    x, cs, first = Variable(x0), zeros(x0.shape[0], WIDTHS), None
    for column in columns:
        if function is None:
            cs = column(x, *cs)
        else:
            params = [p for i in range(len(column.levels)) for p in column.level_params(i)]
            cs = tuple(function(column)(x, *cs, *column.alphas, *params))
        first = first or cs[0].creator
    after_forward = random.get_rng_state()
    weighted_loss(cs, weights).backward()
    return ([x.grad.data] + [p.grad.data for p in params_of(columns)], getattr(first, "reconstructed", None),
            random.get_rng_state(), after_forward)


def droppath_case(seed, p, count):
    """`count` columns with DropPath p (input width 8, WIDTHS), a batch of 6 and weights for the loss, from `seed`."""
    rng = np.random.default_rng(seed)
    columns = [make_column(rng, 8, WIDTHS, drop=p, expansion=2) for _ in range(count)]
    return columns, rng.standard_normal((6, 8)), [rng.standard_normal((6, d)) for d in WIDTHS]


@given(seed=st.integers(0, 2**16), p=st.sampled_from([0.2, 0.5]))
def test_droppath_gradients_match_the_plain_run_only_with_the_per_level_rng_restore(seed, p):
    columns, x0, weights = droppath_case(seed, p, 2)
    set_reversible(columns, False)
    plain, _, state_plain, _ = dropout_grads(columns, x0, weights)
    set_reversible(columns, True)
    ours, back, state, after_forward = dropout_grads(columns, x0, weights)
    assert relative_error(ours, plain) < 1e-12
    assert all(not c.any() for c in back)
    assert state == state_plain == after_forward  # backward's draws leave no trace outside
    forgetful, back_forgetful, state_forgetful, _ = dropout_grads(columns, x0, weights, ForgetfulRevColumnFunction)
    one, _, _, _ = dropout_grads(columns, x0, weights, OneSnapshotRevColumnFunction)
    # other masks: other gradients (relative 1e-6 is far above rounding, far below what other masks change)
    assert relative_error(forgetful, plain) > 1e-6
    assert relative_error(one, plain) > 1e-6
    assert state_forgetful == state_plain  # fork_rng around the whole backward still restores the stream


def test_without_droppath_the_rng_is_not_touched_and_eval_mode_needs_no_restore():
    columns, x0, weights = step_model(drop=0.3)
    for column in columns:
        column.eval()
    set_reversible(columns, False)
    plain, _, _, _ = dropout_grads(columns, x0, weights)
    forgetful, back, state, after_forward = dropout_grads(columns, x0, weights, ForgetfulRevColumnFunction)
    tinypytorch.manual_seed(0)
    assert state == after_forward == random.get_rng_state()  # nothing drew
    assert relative_error(forgetful, plain) < 1e-14 and all(not c.any() for c in back)


# ----- memory -------------------------------------------------------------------------------------------------------

def packed_bytes(columns, x0, weights, widths, reversible, one=False):
    """(bytes packed, bytes of the distinct non-parameter arrays saved) by a forward pass of the stack."""
    set_reversible(columns, reversible)
    with counting_saved() as (packed, arrays):
        cs = run_stack(columns, Variable(x0), widths, one=one)
    held = sum(a.nbytes for a in arrays.values())
    loss = weighted_loss(cs, weights)
    arrays.clear()
    loss.backward()
    return sum(packed), held


def batch_and_weights(seed, rows, d_in, widths):
    """A batch x0 (rows, d_in) and the loss's weights, one (rows, width) for each of `widths`, from `seed`."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, d_in)), [rng.standard_normal((rows, d)) for d in widths]


@given(config=configs())
def test_each_reversible_column_saves_x_and_its_states_and_nothing_else(config):
    d_in, widths, rows, _, seed = config
    x0, weights = batch_and_weights(seed, rows, d_in, widths)
    results = []
    for n in (1, 2, 3):
        columns = [make_column(np.random.default_rng(seed), d_in, widths, expansion=2) for _ in range(n)]
        results.append(packed_bytes(columns, x0, weights, widths, True) + packed_bytes(columns, x0, weights, widths,
                                                                                       False))
    states = rows * sum(widths) * 8
    for before, after in zip(results, results[1:]):
        assert after[0] - before[0] == x0.nbytes + states  # save_for_backward(x, *new)
        assert after[1] - before[1] == states  # x is one array, saved by every column
        assert after[3] - before[3] > after[1] - before[1]  # a plain column keeps its levels' activations too


class Sampled(Layer):
    def __init__(self, level, samples, held_now):
        super().__init__()
        self.level, self.samples, self.held_now = level, samples, held_now

    def sample(self):
        self.samples.append(self.held_now())

    def forward(self, below, above):
        out = self.level(below, above)
        self.sample()
        if out.requires_grad:
            out.register_hook(lambda g: self.sample())
        return out


def peak(columns, x0, weights, widths, reversible, one=False):
    """Largest sample of the NumPy bytes held during forward and backward less the parameters' gradients (held at
    the end by every run), the number of level calls, and how many of them were recomputations."""
    samples = []
    with tracing_numpy() as held_now:
        sampled = [RevColumn([Sampled(level, samples, held_now) for level in column.levels], column.alphas,
                             reversible) for column in columns]
        calls = [0]
        recomputed = []
        for column in sampled:
            for level in column.levels:
                inner = level.forward

                def counted(below, above, inner=inner):
                    calls[0] += 1
                    recomputed.append(recomputation.is_recomputing())
                    return inner(below, above)
                level.forward = counted
        weighted_loss(run_stack(sampled, Variable(x0), widths, one=one), weights).backward()
    return max(samples) - sum(p.data.nbytes for p in params_of(columns)), calls[0], sum(recomputed)


def test_peak_memory_grows_by_the_columns_states_alone_and_every_level_runs_twice():
    widths, rows = (4, 6), 64
    x0, weights = batch_and_weights(0, rows, 4, widths)
    states = rows * sum(widths) * 8
    plain, reversible = {}, {}
    for n in (1, 2, 3, 4):
        columns = [make_column(np.random.default_rng(n), 4, widths) for _ in range(n)]
        plain[n] = peak(columns, x0, weights, widths, False)
        reversible[n] = peak(columns, x0, weights, widths, True)
        assert plain[n][1:] == (n * len(widths), 0)
        assert reversible[n][1:] == (2 * n * len(widths), n * len(widths))  # each level recomputed once
    for n in (2, 3):
        assert 0 < reversible[n + 1][0] - reversible[n][0] <= states  # flat apart from (at most) the states
    for n in (1, 2, 3):
        assert plain[n + 1][0] - plain[n][0] > 3 * states  # the plain run keeps the levels' activations
    assert reversible[4][0] < plain[4][0]


def test_reversible_columns_peak_is_flat_in_the_number_of_columns():
    widths, rows = (4, 6), 64
    x0, weights = batch_and_weights(0, rows, 4, widths)
    states = rows * sum(widths) * 8
    one = {}
    for n in (1, 2, 3, 4, 6):
        columns = [make_column(np.random.default_rng(n), 4, widths) for _ in range(n)]
        one[n] = peak(columns, x0, weights, widths, True, one=True)
        assert one[n][1:] == (2 * n * len(widths), n * len(widths))
    for n in (3, 4, 6):  # from 3 columns on, not a byte more; from 2, at most x's gradient (summed over columns)
        assert one[n][0] == one[3][0]
    assert 0 <= one[3][0] - one[2][0] <= x0.nbytes
    assert one[6][0] < one[2][0] + states  # the chain would hold 4 more columns' states here


# ----- drift -----------------------------------------------------------------------------------------------------

def invert(column, x0, new):
    """The old states from the new ones, worked out from c_i' = l_i(c_{i-1}', c_{i+1}) + alpha_i c_i."""
    n, old = len(new), [None] * len(new)
    with tinypytorch.no_grad():
        for i in reversed(range(n)):
            below = Variable(x0 if i == 0 else new[i - 1])
            above = None if i == n - 1 else Variable(old[i + 1])
            old[i] = (new[i] - column.levels[i](below, above).data) / column.alphas[i].data
    return old


def chained_first_states(n_columns, alpha, dtype):
    """The largest |state| of the first column's zeros, computed back through every column from the last one's
    (by hand, with `invert`), after checking that ReversibleColumns computes back the same states."""
    columns, x0, weights = step_model(n_columns, alpha, dtype)
    with tinypytorch.no_grad():
        states = [c.data for c in run_stack(columns, Variable(x0), WIDTHS)]
    for column in reversed(columns):
        states = invert(column, x0, states)
    nodes = []
    stack_grads(columns, x0, WIDTHS, weights, True, nodes, one=True)
    for ours, by_hand in zip(nodes[0].reconstructed, states, strict=True):
        np.testing.assert_array_equal(ours, by_hand)  # the same operations on the same arrays
    return max(np.abs(c).max() for c in states)


# measured on this machine's CPU and with OpenBLAS's Sandy Bridge and Haswell kernels: within a factor 2 of these
CHAINED = {(np.float64, 0.5): {4: 3e-14, 8: 3e-12, 16: 3e-8}, (np.float64, 0.25): {4: 4e-12, 8: 5e-8, 16: 1.6},
           (np.float32, 0.5): {4: 1.6e-5, 8: 2.5e-3, 16: 7.0}, (np.float32, 0.25): {4: 2e-3, 8: 16, 16: 5e5}}


@pytest.mark.parametrize("dtype, alpha", list(CHAINED))
def test_reversible_columns_drift_geometrically_with_columns_and_faster_for_a_smaller_alpha(dtype, alpha):
    errors = {n: chained_first_states(n, alpha, dtype) for n in (1, 2, 4, 8, 16)}
    assert errors[1] == 0.0
    assert errors[2] < errors[4] < errors[8] < errors[16]
    for n, expected in CHAINED[dtype, alpha].items():
        assert expected / 10 < errors[n] < expected * 10, (n, errors[n])
    if alpha == 0.25:
        for n in (2, 4, 8):
            assert errors[n] > 10 * chained_first_states(n, 0.5, dtype)


@pytest.mark.parametrize("dtype, bound", [(np.float64, 1e-14), (np.float32, 1e-5)])
def test_revcolumns_own_error_does_not_grow_with_the_number_of_columns(dtype, bound):
    for alpha in (0.5, 0.25):
        for n in (1, 4, 16):
            columns, x0, weights = step_model(n, alpha, dtype)
            nodes = []
            _, ours = stack_grads(columns, x0, WIDTHS, weights, True, nodes)
            _, plain = stack_grads(columns, x0, WIDTHS, weights, False)
            error = relative_error(ours, plain)
            assert error == 0.0 if n == 1 else error < bound, (alpha, n, error)
            assert all(not c.any() for c in nodes[0].reconstructed)


# ----- bad input ---------------------------------------------------------------------------------------------------

def small_column():
    return make_column(np.random.default_rng(0), 3, (2, 4))


def call(column, n_states=2, widths=(2, 4)):
    return column(Variable(np.ones((2, 3))), *[Variable(np.ones((2, widths[i % 2]))) for i in range(n_states)])


def test_levels_and_alphas_of_different_lengths_are_refused():
    column = small_column()
    with pytest.raises(ValueError, match=r"^RevColumn: 2 levels and 1 alphas; one alpha per level$"):
        RevColumn(column.levels, column.alphas[:1])
    with pytest.raises(ValueError, match=r"^RevColumn: 0 levels and 0 alphas"):
        RevColumn([], [])


def test_a_wrong_number_of_states_is_refused():
    with pytest.raises(ValueError, match=r"^RevColumn: 2 levels need 2 states c, got 3$"):
        call(small_column(), n_states=3)


def test_an_alpha_that_is_not_a_parameter_and_a_level_that_is_not_callable_are_type_errors():
    column = small_column()
    with pytest.raises(TypeError, match=r"^RevColumn: alpha 1 must be a Parameter, got ndarray$"):
        RevColumn(column.levels, [column.alphas[0], np.ones((1, 4))])
    with pytest.raises(TypeError, match=r"^RevColumn: level 0 must be callable, got int$"):
        RevColumn([3, column.levels[1]], column.alphas)


def test_a_level_that_returns_the_wrong_shape_is_refused_by_the_reversible_column():
    column = small_column()
    column = RevColumn([column.levels[0], lambda below, above: below[:, :1]], column.alphas)
    with pytest.raises(ValueError, match=r"^RevColumn: level 1 returned shape \(2, 1\) for a state of shape \(2, 4\)$"):
        call(column)


def test_backward_twice_raises_and_with_retain_graph_the_gradients_double():
    columns, x0, weights = step_model(n_columns=2)
    set_reversible(columns, True)
    x = Variable(x0)
    loss = weighted_loss(run_stack(columns, x, WIDTHS), weights)
    loss.backward(retain_graph=True)
    once = [x.grad.data.copy()] + [p.grad.data.copy() for p in params_of(columns)]
    loss.backward()
    twice = [x.grad.data] + [p.grad.data for p in params_of(columns)]
    for a, b in zip(once, twice, strict=True):
        np.testing.assert_array_equal(b, 2 * a)  # the same values added again: exactly twice
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        loss.backward()
    # torch, for the reference: the plain twin run twice with retain_graph
    twins = [step.TorchColumn(column) for column in columns]
    x_t = torch.tensor(x0, requires_grad=True)
    cs = [torch.zeros(16, d, dtype=torch.float64) for d in WIDTHS]
    for t in twins:
        cs = t.plain(x_t, cs)
    loss_t = sum((c * torch.from_numpy(w[:16])).sum() for c, w in zip(cs, weights))
    loss_t.backward(retain_graph=True)
    loss_t.backward()
    assert_close_to_torch(twice[0], x_t.grad.numpy())


# ----- ReversibleColumns: all the columns as one Function --------------------------------------------------------

def torch_chain_grads(columns, x0, first_states, weights):
    """torch's plain columns from the given first states: gradients of x, the first states, every parameter."""
    twins = [step.TorchColumn(column) for column in columns]
    x = torch.tensor(x0, requires_grad=True)
    first = [torch.tensor(c, requires_grad=True) for c in first_states]
    cs = first
    for t in twins:
        cs = t.plain(x, cs)
    sum((c * torch.from_numpy(w)).sum() for c, w in zip(cs, weights)).backward()
    return [x.grad.numpy()] + [c.grad.numpy() for c in first] + [p.grad.numpy() for t in twins for p in t.ordered()]


@given(config=configs(), state_seed=st.integers(0, 2**16))
def test_reversible_columns_gradients_of_x_the_first_states_and_every_parameter_equal_the_chain_and_torch(
        config, state_seed):
    columns, x0, weights = build(config)
    _, widths, rows, _, _ = config
    first_states = [np.random.default_rng(state_seed).standard_normal((rows, d)) for d in widths]
    results = {}
    for one in (True, False):
        for column in columns:
            column.cleargrads()
        set_reversible(columns, True)
        x, first = Variable(x0), [Variable(c) for c in first_states]
        cs = run_stack(columns, x, widths, one=one, cs=first)
        assert isinstance(cs[0].creator, ReversibleColumnsFunction) == one
        weighted_loss(cs, weights).backward()
        results[one] = [x.grad.data] + [c.grad.data for c in first] + [p.grad.data for p in params_of(columns)]
    theirs = torch_chain_grads(columns, x0, first_states, weights)
    for ours, chained, g_t in zip(results[True], results[False], theirs, strict=True):
        assert ours.shape == g_t.shape
        assert_close_to_torch(chained, g_t)
        assert_close_to_torch(ours, g_t)


@given(seed=st.integers(0, 2**16), p=st.sampled_from([0.2, 0.5]))
def test_reversible_columns_with_droppath_equal_the_plain_run_and_leave_the_random_stream_alone(seed, p):
    columns, x0, weights = droppath_case(seed, p, 3)
    tinypytorch.manual_seed(0)
    _, plain = stack_grads(columns, x0, WIDTHS, weights, False)
    state_plain = random.get_rng_state()
    tinypytorch.manual_seed(0)
    nodes = []
    _, ours = stack_grads(columns, x0, WIDTHS, weights, True, nodes, one=True)
    assert random.get_rng_state() == state_plain
    assert relative_error(ours, plain) < 1e-12
    assert max(np.abs(c).max() for c in nodes[0].reconstructed) < 1e-12


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reversible_columns_keeps_float32_and_its_gradients_are_close_to_the_plain_run(dtype):
    columns, x0, weights = step_model(n_columns=3, dtype=dtype)
    states, ours = stack_grads(columns, x0, WIDTHS, weights, True, one=True)
    plain_states, plain = stack_grads(columns, x0, WIDTHS, weights, False)
    assert all(a.dtype == dtype for a in states + ours)
    for a, b in zip(states, plain_states):
        np.testing.assert_array_equal(a, b)
    assert relative_error(ours, plain) < (1e-13 if dtype == np.float64 else 1e-5)


@given(config=configs())
def test_reversible_columns_saves_x_and_the_last_states_whatever_the_number_of_columns(config):
    d_in, widths, rows, _, seed = config
    x0, weights = batch_and_weights(seed, rows, d_in, widths)
    for n in (1, 2, 4):
        columns = [make_column(np.random.default_rng(seed + k), d_in, widths, expansion=2) for k in range(n)]
        packed, held = packed_bytes(columns, x0, weights, widths, True, one=True)
        assert packed == held == x0.nbytes + rows * sum(widths) * 8  # save_for_backward(x, *last states)


@given(config=configs())
def test_reversible_columns_computes_the_first_columns_zeros_back_to_within_1e_12(config):
    columns, x0, weights = build(config)
    _, widths, _, n_columns, _ = config
    nodes = []
    stack_grads(columns, x0, widths, weights, True, nodes, one=True)
    back = nodes[0].reconstructed
    assert [c.shape for c in back] == [(x0.shape[0], d) for d in widths]
    assert max(np.abs(c).max() for c in back) < 1e-12
    if n_columns == 1:
        assert not any(c.any() for c in back)  # one column: from its own states, exactly


def test_reversible_columns_autograd_grad_returns_every_parameters_gradient_and_touches_no_grad():
    columns, x0, weights = step_model(n_columns=3)
    grads, plain, params, x = grads_by_autograd_grad(columns, x0, weights, one=True)
    for g, g_plain in zip(grads, plain, strict=True):
        np.testing.assert_allclose(g.data, g_plain, rtol=1e-11, atol=1e-13)
    only = autograd.grad(weighted_loss(run_stack(columns, x, WIDTHS, one=True), weights), [columns[0].alphas[2]])
    np.testing.assert_allclose(only[0].data, plain[1 + next(i for i, p in enumerate(params) if p is columns[0].alphas[2])], rtol=0, atol=1e-13)


def test_reversible_columns_backward_twice_raises_pytorchs_error():
    columns, x0, weights = step_model(n_columns=2)
    set_reversible(columns, True)
    x = Variable(x0)
    loss = weighted_loss(run_stack(columns, x, WIDTHS, one=True), weights)
    loss.backward(retain_graph=True)
    once = x.grad.data.copy()
    loss.backward()
    np.testing.assert_array_equal(x.grad.data, 2 * once)
    message = None
    x_t = torch.ones(2, requires_grad=True)
    loss_t = torch.tanh(x_t).sum()
    loss_t.backward()
    try:
        loss_t.backward()
    except RuntimeError as error:
        message = str(error).split(" (")[0]
    assert message == "Trying to backward through the graph a second time"
    with pytest.raises(RuntimeError, match=message):
        loss.backward()


def test_reversible_columns_refuses_what_is_not_a_revcolumn_and_mismatched_states():
    column = small_column()
    with pytest.raises(TypeError, match=r"^ReversibleColumns: column 1 must be a RevColumn, got Level$"):
        ReversibleColumns(column, column.levels[0])
    with pytest.raises(ValueError, match=r"^ReversibleColumns: needs at least one column$"):
        ReversibleColumns()
    with pytest.raises(ValueError, match=r"^RevColumn: 2 levels need 2 states c, got 3$"):
        ReversibleColumns(column, small_column())(Variable(np.ones((2, 3))),
                                                  *[Variable(np.ones((2, w))) for w in (2, 4, 4)])
    zero = small_column()
    zero.alphas[0].data[0, 0] = 0.0
    with pytest.raises(ValueError, match=r"an alpha is 0"):
        ReversibleColumns(column, zero)(Variable(np.ones((2, 3))), *[Variable(np.ones((2, w))) for w in (2, 4)])
    wrong = RevColumn([column.levels[0], lambda below, above: below[:, :1]], column.alphas)
    with pytest.raises(ValueError, match=r"^RevColumn: level 1 returned shape \(2, 1\) for a state of shape \(2, 4\)$"):
        ReversibleColumns(column, wrong)(Variable(np.ones((2, 3))), *[Variable(np.ones((2, w))) for w in (2, 4)])


def hiding_column():
    """small_column's levels wrapped in plain functions: the column lists its alphas, not the levels' weights."""
    column = small_column()
    hiding = [lambda below, above, level=level: level(below, above) for level in column.levels]
    return hiding, column


@pytest.mark.parametrize("way", ["RevColumn", "ReversibleColumns"])
def test_levels_closing_over_layers_train_plainly_but_the_reversible_column_refuses_them(way):
    hiding, column = hiding_column()
    weights = [p for level in column.levels for p in level.params()]
    plain = RevColumn(hiding, column.alphas, reversible=False)
    assert list(plain.params()) == column.alphas
    weighted_loss(call(plain), [np.ones((2, 2)), np.ones((2, 4))]).backward()
    assert all(w.grad is not None for w in weights)
    column.cleargrads()
    layer = RevColumn(hiding, column.alphas) if way == "RevColumn" else ReversibleColumns(RevColumn(hiding,
                                                                                                    column.alphas))
    where = "RevColumn" if way == "RevColumn" else "ReversibleColumns: column 0"
    with pytest.raises(RuntimeError, match=rf"^{where}: level 1 \(function\) uses a Variable that requires grad but "
                                           r"is not among its parameters, .*make each level a Layer"):
        weighted_loss(call(layer), [np.ones((2, 2)), np.ones((2, 4))]).backward()
    assert all(w.grad is None for w in weights)


def test_a_level_reading_a_variable_computed_outside_the_column_is_refused():
    column = small_column()
    scale = column.alphas[1] * 2.0  # computed from a parameter, outside the column's run
    top = column.levels[1]
    levels = [column.levels[0], lambda below, above: top(below, above) * scale]
    with pytest.raises(RuntimeError, match=r"^RevColumn: level 1 \(function\) uses a Variable that requires grad"):
        weighted_loss(call(RevColumn(levels, column.alphas)), [np.ones((2, 2)), np.ones((2, 4))]).backward()
