"""bench/bench_autograd.py (autograd_workloads, speed_autograd, speed_grad_modes, speed_conv, speed_jacobians) and
bench/bench_changes.py (speed_changes): every measured function computes the gradient (or output) PyTorch or maths
gives.

Small sizes only; nothing here looks at a timing. The benchmark itself runs with
`python bench/bench_autograd.py` (or `--quick`).
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch

# bench/'s modules, by name: tests/conftest.py puts bench/ on the path
import autograd_workloads as workloads
import bench_changes
import dezero_workloads as dz
import speed_autograd
import speed_changes
import speed_conv
import speed_grad_modes
import speed_jacobians
import timing
from reference import floats

pytestmark = [pytest.mark.torch]


def goldstein_price_grad_torch(a, b):
    """Written out here, not taken from the benchmark, so a typo there would show."""
    x, y = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    f = (1 + (x + y + 1) ** 2 * (19 - 14 * x + 3 * x ** 2 - 14 * y + 6 * x * y + 3 * y ** 2)) * (
        30 + (2 * x - 3 * y) ** 2 * (18 - 32 * x + 12 * x ** 2 + 48 * y - 36 * x * y + 27 * y ** 2))
    f.backward()
    return np.array([x.grad.item(), y.grad.item()])


def in_three_ways(workload):
    """The benchmark's functions of `workload` in tinypytorch, in PyTorch and in hand-written NumPy."""
    return [getattr(workloads, f"{workload}_{way}") for way in ("tinypytorch", "torch", "numpy")]


GP = in_three_ways("gp")


@pytest.mark.parametrize("gp", GP, ids=lambda f: f.__name__)
def test_goldstein_price_gradient_at_1_1_is_minus_5376_8064(gp):
    np.testing.assert_array_equal(np.array(gp(1.0, 1.0), dtype=float), [-5376.0, 8064.0])


@pytest.mark.parametrize("gp", GP, ids=lambda f: f.__name__)
@given(a=floats(-2.0, 2.0), b=floats(-2.0, 2.0))
def test_goldstein_price_gradient_equals_torch(gp, a, b):
    expected = goldstein_price_grad_torch(a, b)
    # the hand-written gradient groups the terms differently: rounding at the scale of the largest term
    np.testing.assert_allclose(np.array(gp(a, b), dtype=float), expected, rtol=1e-10,
                               atol=1e-12 * np.abs(expected).max())


def wide_gradient(coefficients, x=0.5):
    """Forward-mode chain rule along each branch: d sin(c h)/dx = cos(c h) c dh/dx."""
    total = 0.0
    for row in coefficients:
        h, dh = x, 1.0
        for c in row:
            h, dh = math.sin(c * h), math.cos(c * h) * c * dh
        total += dh
    return total


@pytest.mark.parametrize("build", in_three_ways("wide"), ids=lambda f: f.__name__)
@given(seed=st.integers(0, 2**32 - 1), branches=st.integers(1, 40))
def test_wide_graph_gradient_equals_the_chain_rule(build, seed, branches):
    coefficients = workloads.wide_coefficients(branches, seed=seed)
    assert coefficients.shape == (branches, 5)
    np.testing.assert_allclose(build(coefficients)(), wide_gradient(coefficients), rtol=1e-12)


def test_wide_graph_of_the_benchmark_has_2000_branches_of_10_operations():
    coefficients = workloads.wide_coefficients(speed_autograd.SETTINGS["full"]["wide_branches"])
    assert coefficients.shape == (2000, 5)  # five times sin(c * h): ten operations per branch
    expected = wide_gradient(coefficients)
    for build in in_three_ways("wide"):
        np.testing.assert_allclose(build(coefficients)(), expected, rtol=1e-12)


@pytest.mark.parametrize("f", in_three_ways("arrays"), ids=lambda f: f.__name__)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 2000))
def test_large_array_gradient_equals_the_derivative(f, seed, size):
    a = workloads.arrays_input(size, seed=seed)
    # d/dx (e^x x + x^2) = (1 + x) e^x + 2x
    np.testing.assert_allclose(f(a), (1 + a) * np.exp(a) + 2 * a, rtol=1e-12, atol=1e-15)
    assert a.shape == (size,)  # the input is left alone


@pytest.mark.parametrize("n", [1, 2, 37, 500])
def test_chain_gradient_is_the_product_of_cosines(n):
    y, expected = 0.5, 1.0
    for _ in range(n):
        y, expected = math.sin(y), expected * math.cos(y)
    for build in in_three_ways("chain"):
        np.testing.assert_allclose(build(n)(), expected, rtol=1e-12)


@pytest.mark.parametrize("f", in_three_ways("ratio"), ids=lambda f: f.__name__)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 2000))
def test_tanh_and_division_gradient_equals_torch(f, seed, size):
    a = workloads.arrays_input(size, seed=seed) * 3.0
    x = torch.from_numpy(a.copy()).requires_grad_()
    (torch.tanh(x) / (1 + x**2)).sum().backward()  # written out here, not taken from the benchmark
    np.testing.assert_allclose(f(a), x.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_mlp_step_gives_torchs_gradients_and_updates_in_all_three():
    x, target, layers = workloads.mlp_data(batch=8, sizes=(12, 7, 3))
    builds = in_three_ways("mlp")
    steps = [build(x, target, layers) for build in builds]
    for _ in range(3):  # Adam's update shows from the second step on: later gradients depend on it
        grads = [step() for step in steps]
        assert all(g.dtype == np.float32 for gs in grads for g in gs)
        assert len(grads[0]) == len(grads[1]) == len(grads[2]) == 4
        for ours in (grads[0], grads[2]):
            for g, expected in zip(ours, grads[1], strict=True):
                np.testing.assert_allclose(g, expected, rtol=1e-4, atol=1e-6)


def test_mlp_workload_is_the_issues_network():
    x, target, layers = workloads.mlp_data()
    assert x.shape == (64, 784) and target.shape == (64, 10) and x.dtype == np.float32
    assert [W.shape for W, _ in layers] == [(256, 784), (10, 256)]


@pytest.mark.parametrize("framework", ["tinypytorch", "torch", "numpy"])
@pytest.mark.parametrize("recorded", [True, False])
def test_one_operation_computes_sin_and_records_only_when_asked(framework, recorded):
    y = workloads.one_operation(framework, recorded)()
    # the C library's sin, NumPy's and torch's may each round the last bit otherwise, by CPU
    np.testing.assert_array_max_ulp(float(y.item() if hasattr(y, "item") else y), math.sin(0.5), maxulp=1)
    if framework == "tinypytorch":
        assert (y.creator is not None) == recorded == y.requires_grad
    elif framework == "torch":
        assert (y.grad_fn is not None) == recorded == y.requires_grad


@pytest.mark.parametrize("n", [2, 3, 10, 1001])
def test_fan_gradient_is_the_number_of_sines_times_cos_x(n):
    for build in (workloads.fan_tinypytorch, workloads.fan_torch):
        np.testing.assert_allclose(build(n)(), (n // 2) * math.cos(0.5), rtol=1e-12)


def test_measure_prepares_before_each_repeat_calls_number_times_and_takes_turns():
    calls = []

    def contender(name):
        def prepare():
            calls.append(f"prepare {name}")
            return lambda: calls.append(name)
        return prepare

    timed = timing.in_turns({"a": contender("a"), "b": contender("b")}, number=2, repeats=3)
    assert calls == ["prepare a", "a", "a", "prepare b", "b", "b"] * 3
    assert set(timed) == {"a", "b"} and all(0 < best <= median for median, best in timed.values())


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_fitted_slope_recovers_the_power_of_a_power_law(power):
    sizes = [1000, 3000, 10_000, 30_000, 100_000]
    assert speed_autograd.fitted_slope(sizes, [2e-6 * n**power for n in sizes]) == pytest.approx(power, rel=1e-9)


def test_report_computes_ratios_and_verdicts_and_the_plot_is_written(tmp_path):
    settings = speed_autograd.SETTINGS["quick"]
    results = {"scalar graph": {"tinypytorch": (3.0, 2.0), "torch": (2.0, 1.0), "numpy": (1.0, 1.0)},
               "chain": {"tinypytorch": (1.0, 1.0), "torch": (1.0, 1.0), "numpy": (0.1, 0.1)},
               "wide graph": {"tinypytorch": (7.0, 7.0), "torch": (2.0, 2.0), "numpy": (0.5, 0.5)},
               "large arrays": {"tinypytorch": (1.2, 1.2), "torch": (1.1, 1.1), "numpy": (1.0, 1.0)},
               "large arrays, tanh and division": {"tinypytorch": (1.3, 1.3), "torch": (1.1, 1.1),
                                                   "numpy": (1.0, 1.0)},
               "MLP training step": {"tinypytorch": (1.1, 1.1), "torch": (1.0, 1.0), "numpy": (0.9, 0.9)}}
    sizes = settings["sizes"]
    scaling = {("chain", "tinypytorch"): [1e-5 * n for n in sizes], ("chain", "torch"): [1e-6 * n for n in sizes],
               ("wide", "tinypytorch"): [1e-9 * n**2 for n in sizes], ("wide", "torch"): [1e-6 * n for n in sizes]}
    text, slopes, verdicts = speed_autograd.report(results, scaling, settings, "quick")
    assert verdicts == {"scalar graph": True, "chain": True, "wide graph": False, "large arrays": True,
                        "large arrays, tanh and division": False, "MLP training step": True,
                        "linear backward (chain)": True, "linear backward (wide)": False}
    assert "| 1.50 | 3.00 |" in text and "| 3.50 | 14.00 |" in text and "| 1.09 | 1.20 |" in text
    assert dz.MISSING_NOTE in text  # these results have no DeZero column
    assert slopes["wide", "tinypytorch"] == pytest.approx(2.0)
    assert "CPU: " in text and f"NumPy: {np.__version__}" in text
    speed_autograd.plot(results, scaling, slopes, sizes, tmp_path / "autograd.png")
    assert (tmp_path / "autograd.png").read_bytes().startswith(b"\x89PNG")


def test_bench_changes_times_every_piece_and_counts_page_faults_for_large_arrays():
    times = speed_changes.measure(quick=True)
    assert set(speed_changes.PIECES) <= set(times)
    assert all(times[name] > 0 for name in speed_changes.PIECES)
    large = {name for name, (description, *_) in speed_changes.PIECES.items() if "10^6" in description}
    assert large and {name[:-len(" faults")] for name in times if name.endswith(" faults")} == large


def test_bench_changes_needs_the_package_before_the_changes(tmp_path):
    with pytest.raises(SystemExit):
        bench_changes.main(["--before", str(tmp_path)])


def test_a_slope_leaves_out_the_sizes_that_were_not_run():
    assert speed_autograd.fitted_slope([10, 100, 1000], [1.0, 100.0, None]) == pytest.approx(2.0)


def test_report_with_dezero_gives_its_column_ratios_and_targets():
    settings = speed_autograd.SETTINGS["quick"]
    times = {"tinypytorch": (2.0, 2.0), "dezero": (4.0, 4.0), "torch": (1.0, 1.0), "numpy": (0.5, 0.5)}
    results = {workload: dict(times) for workload in speed_autograd.WORKLOADS}
    results["chain"]["dezero"] = (1.0, 1.0)
    results["one operation"] = {True: {"tinypytorch": (5.0, 5.0), "dezero": (4.0, 4.0), "torch": (2.0, 2.0),
                                       "numpy": (1.0, 1.0)},
                                False: {"tinypytorch": (3.0, 3.0), "dezero": (3.0, 3.0), "torch": (2.0, 2.0),
                                        "numpy": (1.0, 1.0)}}
    scaling = {(shape, name): [1e-6 * n for n in settings["sizes"]] for shape in ("chain", "wide")
               for name in ("tinypytorch", "dezero", "torch")}
    scaling["wide", "dezero"][-1] = None  # a size it did not run
    text, _, verdicts = speed_autograd.report(results, scaling, settings, "quick")
    assert dz.MISSING_NOTE not in text
    assert "| tinypytorch | DeZero | PyTorch | NumPy | tinypytorch / DeZero |" in text
    assert "| 0.50 | 2.00 | 4.00 |" in text and "| 2.00 | 2.00 | 4.00 |" in text  # ratios: DeZero, PyTorch, NumPy
    assert verdicts["scalar graph (DeZero)"] is True and verdicts["chain (DeZero)"] is False
    assert verdicts["one operation, recorded (requires grad)"] is False  # 5 / 2 > 2
    assert verdicts["one operation, not recorded"] is True  # 3 / 2 <= 1.5
    assert "| wide | dezero | 1 ms | 3 ms | — | 1.00 |" in text


needs_dezero = pytest.mark.skipif(not dz.AVAILABLE, reason="DeZero is not installed (bench/requirements-peers.txt)")


@needs_dezero
def test_dezeros_workloads_give_the_gradients_torch_and_the_maths_give():
    np.testing.assert_array_equal(np.array(dz.gp_dezero(1.0, 1.0), dtype=float), [-5376.0, 8064.0])
    np.testing.assert_allclose(np.array(dz.gp_dezero(0.3, -1.2), dtype=float), goldstein_price_grad_torch(0.3, -1.2),
                               rtol=1e-10)
    coefficients = workloads.wide_coefficients(20)
    np.testing.assert_allclose(dz.wide_dezero(coefficients)(), wide_gradient(coefficients), rtol=1e-12)
    np.testing.assert_allclose(dz.fan_dezero(11)(), 5 * math.cos(0.5), rtol=1e-12)
    h, expected = 0.5, 1.0
    for _ in range(30):  # d sin^30(x)/dx: the product of the cosines along the chain
        expected, h = expected * math.cos(h), math.sin(h)
    np.testing.assert_allclose(dz.chain_dezero(30)(), expected, rtol=1e-12)
    a = workloads.arrays_input(1000, seed=3)
    np.testing.assert_allclose(dz.arrays_dezero(a), np.exp(a) * a + np.exp(a) + 2 * a, rtol=1e-13)
    x = torch.from_numpy(a.copy()).requires_grad_()
    (torch.tanh(x) / (1 + x**2)).sum().backward()
    np.testing.assert_allclose(dz.ratio_dezero(a), x.grad.numpy(), rtol=1e-12, atol=1e-15)


@needs_dezero
def test_dezeros_mlp_step_gives_torchs_gradients():
    x, target, layers = workloads.mlp_data(batch=8, sizes=(12, 7, 3))
    ours, theirs = dz.mlp_dezero(x, target, layers), workloads.mlp_torch(x, target, layers)
    for _ in range(3):
        for g, expected in zip(ours(), theirs(), strict=True):  # DeZero keeps W as (in, out)
            np.testing.assert_allclose(g.T if g.ndim == 2 else g, expected, rtol=1e-4, atol=1e-6)


@needs_dezero
@pytest.mark.parametrize("recorded", [True, False])
def test_dezeros_one_operation_records_only_when_its_switch_is_on(recorded):
    try:
        y = dz.one_operation(recorded)()
        assert float(y.data) == math.sin(0.5) and (y.creator is not None) == recorded
    finally:
        dz.enable_backprop()


@pytest.mark.parametrize("mode", speed_grad_modes.MODES)
def test_grad_modes_forward_gives_torchs_output_in_every_mode_and_records_only_with_grad(mode):
    x, layers = speed_grad_modes.mlp_weights()
    expected = torch.from_numpy(x)
    for i, (W, b) in enumerate(layers):  # written out here, not taken from the benchmark
        expected = expected @ torch.from_numpy(W).T + torch.from_numpy(b)
        expected = expected.relu() if i < len(layers) - 1 else expected
    for fw in (tinypytorch, torch):
        out = speed_grad_modes.forward(fw, x, layers, mode)()
        np.testing.assert_allclose(np.asarray(out.detach()), expected.numpy(), rtol=1e-5, atol=1e-6)
        assert out.requires_grad is (mode == "grad enabled") and out.is_inference() is (mode == "inference_mode")
    np.testing.assert_allclose(speed_grad_modes.forward_numpy(x, layers)(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_grad_modes_report_gives_each_mode_its_ratio_to_no_grad():
    times = {(fw, mode): (t, t) for fw, base in (("tinypytorch", 1e-5), ("torch", 2e-5))
             for mode, t in zip(speed_grad_modes.MODES, (3 * base, base, 0.5 * base))}
    times["numpy", "by hand"] = (1e-6, 1e-6)
    text = speed_grad_modes.report(times, "quick")
    assert "| grad enabled | 30 µs | 3.00 (3.00) | 60 µs | 3.00 (3.00) |" in text
    assert "| no_grad | 10 µs | 1.00 (1.00) | 20 µs | 1.00 (1.00) |" in text
    assert "| inference_mode | 5 µs | 0.50 (0.50) | 10 µs | 0.50 (0.50) |" in text
    assert "| NumPy by hand (no mode, no tensors) | 1 µs | 0.10 (0.10) | 1 µs | 0.05 (0.05) |" in text


@pytest.mark.parametrize("name", list(speed_conv.WORKLOADS))
def test_conv_workloads_give_torchs_gradients_in_tinypytorch_and_numpy_by_hand(name):
    """Each contender's forward and backward, in float64 on the benchmark's shapes, returns torch's gradients of x,
    w and b; the by-hand im2col and col2im included."""
    x_shape, w_shape, stride, padding = speed_conv.WORKLOADS[name]
    x, w, b, g = speed_conv.arrays(x_shape, w_shape, stride, padding, dtype=np.float64)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=padding).backward(torch.tensor(g))
    expected = [t.grad.numpy() for t in (xt, wt, bt)]
    for run in (speed_conv.step_framework(tinypytorch, x, w, b, g, stride, padding),
                speed_conv.step_numpy(x, w, b, g, stride, padding)):
        for got, want in zip(run(), expected):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
        for got, want in zip(run(), expected):  # a second call starts from cleared gradients
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_conv_report_gives_tinypytorchs_ratio_to_each():
    times = {name: {"tinypytorch": (6e-3, 5e-3), "torch": (2e-3, 2.5e-3), "numpy": (3e-3, 1e-3)}
             for name in speed_conv.WORKLOADS}
    text = speed_conv.report(times, "quick")
    first = next(iter(speed_conv.WORKLOADS))
    assert f"| {first} | 6 ms | 2 ms | 3 ms | 3.0 (2.0) | 2.0 (5.0) |" in text


@pytest.mark.parametrize("n", [1, 4, 32])
@pytest.mark.parametrize("way", ["loops", "tinypytorch", "torch"])
@pytest.mark.parametrize("mode", ["jacfwd", "jacrev"])
def test_every_jacobian_the_jacobians_benchmark_times_is_the_chain_rules(way, mode, n):
    """speed_jacobians: each way's Jacobian of x -> tanh(W x) is diag(1 - tanh(W x)²) W (worked by hand)."""
    W, x = speed_jacobians.problem(n, speed_jacobians.PRODUCT // n)
    J = speed_jacobians.jacobian_call(way, mode, W, x)()
    np.testing.assert_allclose(np.asarray(J.detach().numpy() if way == "torch" else J.data),
                               (1 - np.tanh(W @ x) ** 2)[:, None] * W, rtol=1e-12, atol=1e-15)


def test_jacobians_report_gives_each_way_its_ratios():
    times = {(way, mode, n): ((1 if mode == "jacfwd" else 2) * (3 if way == "loops" else 1) * n * 1e-3, 0.0)
             for way in speed_jacobians.WAYS for mode in ("jacfwd", "jacrev") for n in (4, 256)}
    times["torch", "jacfwd", 4] = (0.002, 0.0)
    text = speed_jacobians.report(times, (4, 256), "quick")
    assert "| 4 | 256 | 12 ms | 24 ms | 4 ms | 8 ms | 2 ms | 8 ms |" in text
    assert "| 4 | 256 | 0.50 | 0.50 | 0.25 | 2.00 | 1.00 | 0.33 | 0.33 |" in text
