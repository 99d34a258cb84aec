"""PyTorch's device and tooling names that its tutorials use, at PyTorch's place: torch.cuda's device_count,
synchronize, empty_cache and peak resets; the deprecated torch.cuda.amp; torch.backends.mps and cudnn;
torch.utils.benchmark's Timer; and the names the package does not have (torch.compile, nn.DataParallel, the
recurrent layers, the profilers), each a clear error where it is used.

What PyTorch does is asked of torch 2.13's CPU build here, never copied. Without a GPU the package must do what
that build does; with one (the strict stand-in for CuPy in CI, CuPy itself where a GPU is lent, marked gpu
through the `xp` fixture) what the device does."""
import re
import warnings

import numpy as np
import pytest
import torch
import torch.utils.benchmark

import tinypytorch
import tinypytorch.utils.benchmark as benchmark
from tinypytorch import cuda, nn

pytestmark = pytest.mark.torch

PAGE = "see the page 'tinypytorch for PyTorch users' (book/pytorch_users.md), section 'What is not there'"


@pytest.fixture
def without_gpu():
    """The package as it is on a machine without CuPy, whatever this machine has."""
    previous = cuda.use_backend(None)
    yield
    cuda.use_backend(*previous)


@pytest.fixture
def device(xp):
    """The device backend of the xp fixture: the strict stand-in, or CuPy on a GPU (the NumPy case skips)."""
    if xp is np:
        pytest.skip("a device test: runs on the strict stand-in and on CuPy")
    return xp


def raised(call):
    """(type, message) of what call() raises, and the warnings it gives on the way as (category, message)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception) as error:
            call()
    return type(error.value), [(w.category, str(w.message)) for w in caught]


# ----- torch.cuda without a GPU: what torch's CPU build does -------------------------------------------------

def test_without_a_gpu_device_count_memory_and_empty_cache_answer_as_torchs_cpu_build(without_gpu):
    assert cuda.device_count() == torch.cuda.device_count() == 0
    assert cuda.empty_cache() is None and torch.cuda.empty_cache() is None  # nothing to free
    assert cuda.memory_allocated() == torch.cuda.memory_allocated() == 0
    assert cuda.memory_allocated(0) == torch.cuda.memory_allocated(0) == 0


@pytest.mark.parametrize("name, args", [("synchronize", ()), ("synchronize", (0,)), ("synchronize", ("cuda",)),
                                        ("reset_peak_memory_stats", ()), ("reset_peak_memory_stats", (0,))])
def test_without_a_gpu_synchronize_and_the_peak_reset_raise_torchs_error_types(without_gpu, name, args):
    theirs, _ = raised(lambda: getattr(torch.cuda, name)(*args))
    with pytest.raises(theirs, match=f"^{name}: no CUDA device: CuPy is not installed"):
        getattr(cuda, name)(*args)
    assert (theirs, name) in ((AssertionError, "synchronize"), (AttributeError, "reset_peak_memory_stats"))


def test_reset_max_memory_allocated_warns_as_torchs_then_resets_the_peak(without_gpu):
    theirs, their_warnings = raised(torch.cuda.reset_max_memory_allocated)
    ours, our_warnings = raised(cuda.reset_max_memory_allocated)
    assert ours is theirs is AttributeError
    assert our_warnings == their_warnings and their_warnings[0][0] is FutureWarning


# ----- torch.cuda on a device -------------------------------------------------------------------------------

def test_device_count_is_the_runtimes(device):
    assert cuda.device_count() == device.cuda.runtime.getDeviceCount() >= 1


def test_synchronize_waits_for_the_queued_work_and_names_a_gpu(device):
    x = device.ones((512, 512))
    for _ in range(20):
        x = x @ x / 512.0  # queued, not finished, on a GPU
    assert cuda.synchronize() is None and cuda.synchronize(0) is None and cuda.synchronize("cuda:0") is None
    assert cuda.synchronize(cuda.device("cuda")) is None
    if hasattr(device.cuda, "get_current_stream"):  # CuPy: nothing is left on the stream
        assert device.cuda.get_current_stream().done
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu"):
        cuda.synchronize("cpu")


def test_empty_cache_hands_back_the_pools_free_blocks_and_keeps_the_live_arrays(device):
    pool = device.get_default_memory_pool()

    def kept_for_reuse():  # bytes the pool holds beyond the live arrays' (none in the strict stand-in)
        return pool.total_bytes() - pool.used_bytes()

    cuda.empty_cache()
    kept, freed = device.ones(1000), device.ones(100_000)  # 8,000 and 800,000 bytes
    del freed  # back to the pool, not to the GPU
    used, cached = cuda.memory_allocated(), kept_for_reuse()
    cuda.empty_cache()
    assert cuda.memory_allocated() == cuda.memory_allocated(0) == cuda.memory_allocated("cuda:0") == used
    assert kept_for_reuse() <= max(cached - 800_000, 0) and float(kept.sum()) == 1000.0


def test_reset_peak_memory_stats_starts_the_open_blocks_peaks_from_now(device):
    with cuda.max_memory_allocated() as closed:
        a = device.ones(1000)
        del a
    before = closed.bytes
    with cuda.max_memory_allocated() as outer:
        b = device.ones(10_000)
        del b
        assert outer.bytes > cuda.memory_allocated()
        with cuda.max_memory_allocated() as inner:
            cuda.reset_peak_memory_stats()
            assert outer.bytes == inner.bytes == cuda.memory_allocated()  # the peak since the reset: now
            c = device.ones(100)
            held = cuda.memory_allocated()
        assert outer.bytes == inner.bytes == held and inner.start <= held
        del c
    assert closed.bytes == before  # a closed block's peak is its own: no reset reaches it
    with pytest.warns(FutureWarning, match="reset_max_memory_allocated now calls"):
        cuda.reset_max_memory_allocated()


# ----- torch.cuda.amp, PyTorch's deprecated aliases ---------------------------------------------------------

def test_cuda_amp_grad_scaler_warns_and_disables_itself_without_a_gpu_as_torchs(without_gpu):
    from tinypytorch.cuda.amp import GradScaler

    with pytest.warns() as ours:
        scaler = tinypytorch.cuda.amp.GradScaler(init_scale=2.0**10)
    with pytest.warns() as theirs:
        their_scaler = torch.cuda.amp.GradScaler(init_scale=2.0**10)
    assert [(w.category, str(w.message)) for w in ours] == [(w.category, str(w.message)) for w in theirs]
    assert [w.category for w in ours] == [FutureWarning, UserWarning]
    assert GradScaler is tinypytorch.cuda.amp.GradScaler and isinstance(scaler, tinypytorch.amp.GradScaler)
    assert scaler.is_enabled() == their_scaler.is_enabled() is False
    assert scaler.get_scale() == their_scaler.get_scale() == 1.0  # disabled: scale passes through


def test_cuda_amp_autocast_warns_and_disables_itself_without_a_gpu_as_torchs(without_gpu):
    with pytest.warns() as ours:
        block = tinypytorch.cuda.amp.autocast()
    with pytest.warns() as theirs:
        their_block = torch.cuda.amp.autocast()
    assert [w.category for w in ours] == [w.category for w in theirs] == [FutureWarning, UserWarning]
    assert str(ours[0].message) == str(theirs[0].message)
    assert block._enabled == their_block._enabled is False and isinstance(block, tinypytorch.amp.autocast)
    with block:
        x = tinypytorch.ones(2, 2)
        assert (x @ x).dtype == tinypytorch.float32


def test_cuda_amp_grad_scaler_and_autocast_on_a_device_are_the_cuda_ones(device):
    with pytest.warns(FutureWarning, match=re.escape("torch.amp.GradScaler('cuda', args...)")):
        scaler = tinypytorch.cuda.amp.GradScaler(init_scale=4.0)
    assert scaler.is_enabled() and scaler._device == "cuda" and scaler.get_scale() == 4.0
    with pytest.warns(FutureWarning, match=re.escape("torch.amp.autocast('cuda', args...)")):
        block = tinypytorch.cuda.amp.autocast()
    x = tinypytorch.Variable(device.ones((2, 2), dtype=np.float32))
    with block:
        assert (x @ x).dtype == tinypytorch.float16


# ----- torch.backends ---------------------------------------------------------------------------------------

def test_mps_is_neither_built_nor_available_as_torchs_linux_build_says():
    assert tinypytorch.backends.mps.is_built() is torch.backends.mps.is_built() is False
    assert tinypytorch.backends.mps.is_available() is torch.backends.mps.is_available() is False


def test_cudnn_answers_as_torchs_cpu_build_and_checks_its_switches_as_torch():
    ours, theirs = tinypytorch.backends.cudnn, torch.backends.cudnn
    assert ours.version() is theirs.version() is None and ours.is_available() is theirs.is_available() is False
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32", "benchmark_limit"):
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        def set_to_a_number(backend):
            setattr(backend.backends.cudnn, name, 1)

        with pytest.raises(RuntimeError) as expected:
            set_to_a_number(torch)
        with pytest.raises(RuntimeError, match=f"^{re.escape(str(expected.value))}$"):
            set_to_a_number(tinypytorch)
        assert getattr(ours, name) == getattr(theirs, name)


def _convolved(framework):
    x = framework.tensor(np.arange(2 * 3 * 6 * 6, dtype=np.float64).reshape(2, 3, 6, 6) / 100, requires_grad=True)
    w = framework.tensor(np.linspace(-1, 1, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3), requires_grad=True)
    y = framework.nn.functional.conv2d(x, w, padding=1)
    (y * y).sum().backward()
    return np.concatenate([y.detach().numpy().ravel(), x.grad.numpy().ravel(), w.grad.numpy().ravel()])


def test_cudnns_switches_change_no_result_here_as_in_torchs_cpu_build():
    results = {}
    for framework in (tinypytorch, torch):
        cudnn = framework.backends.cudnn
        plain = _convolved(framework)
        cudnn.benchmark, cudnn.deterministic = True, True
        try:
            switched = _convolved(framework)
            with cudnn.flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=False):
                assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == (False,) * 4
                flagged = _convolved(framework)
            assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == (True, True, True, True)
        finally:
            cudnn.benchmark, cudnn.deterministic = False, False
        np.testing.assert_array_equal(switched, plain)
        np.testing.assert_array_equal(flagged, plain)
        results[framework.__name__] = plain
    np.testing.assert_allclose(results["tinypytorch"], results["torch"], rtol=1e-10, atol=1e-12)


# ----- torch.utils.benchmark.Timer --------------------------------------------------------------------------

def _shape_of(measurement):
    """The printed summary with its numbers, units and address taken out: what must agree with torch's."""
    text = re.sub(r"object at 0x[0-9a-f]+", "object at ADDR", repr(measurement)).splitlines()
    text[0] = text[0].rsplit(".", 1)[-1]
    return [re.sub(r"\d+(\.\d+)?", "N", re.sub(r"\b(ns|us|ms|s)\b", "UNIT", line)) for line in text
            if "WARNING" not in line and "This " not in line]  # noise warnings come and go with the machine


def test_timer_timeit_gives_a_measurement_of_torchs_shape():
    labels = {"label": "add", "sub_label": "float64", "description": "n=100"}
    ours = benchmark.Timer(stmt="x + y", setup="y = x * 2", globals={"x": tinypytorch.ones(100)}, num_threads=1,
                           **labels).timeit(50)
    theirs = torch.utils.benchmark.Timer(stmt="x + y", setup="y = x * 2", globals={"x": torch.ones(100)},
                                         num_threads=1, **labels).timeit(50)
    for m in (ours, theirs):
        assert m.number_per_run == 50 and len(m.times) == len(m.raw_times) == 1 and m.mean > 0
        assert m.median == m.mean == m.times[0] == m.raw_times[0] / 50
        assert (m.label, m.sub_label, m.description, m.stmt, m.setup, m.num_threads) == (
            "add", "float64", "n=100", "x + y", "y = x * 2", 1)
        assert m.title == "add: float64"
    assert _shape_of(ours) == _shape_of(theirs)
    assert type(ours).__name__ == type(theirs).__name__ == "Measurement"


def test_timer_autoranges_give_blocks_of_runs_as_torchs():
    for framework, timer in ((tinypytorch, benchmark.Timer), (torch, torch.utils.benchmark.Timer)):
        t = timer(stmt="torch.ones(3).sum()")  # `torch` is in the statement's names in both
        blocked = t.blocked_autorange(min_run_time=0.02)
        assert blocked.number_per_run >= 1 and len(blocked.raw_times) >= 1 and sum(blocked.raw_times) >= 0.02
        assert all(run > 0 for run in blocked.times) and blocked.iqr >= 0 and isinstance(blocked.median, float)
        adaptive = t.adaptive_autorange(max_run_time=0.05)
        assert adaptive.number_per_run >= 1 and len(adaptive.raw_times) >= 1 and adaptive.mean > 0
    benchmark.Timer("assert torch is tp", globals={"tp": tinypytorch}).timeit(2)  # `torch` is the package


def test_timer_refuses_what_torchs_refuses_in_its_words():
    for make in (lambda timer: timer(stmt=lambda: None), lambda timer: timer(global_setup="#include <x>"),
                 lambda timer: timer(language="fortran")):
        with pytest.raises(ValueError) as expected:
            make(torch.utils.benchmark.Timer)
        with pytest.raises(ValueError, match=f"^{re.escape(str(expected.value))}$"):
            make(benchmark.Timer)
    with pytest.raises(NotImplementedError, match="See `Timer.blocked_autorange.`"):
        benchmark.Timer().repeat()
    with pytest.raises(NotImplementedError, match="C\\+\\+ statements"):
        benchmark.Timer(language="c++")


# ----- what is not there: a clear error where it is used ----------------------------------------------------

NOT_THERE = [
    ("torch.compile", lambda tp: tp.compile(tp.nn.Linear(2, 2))),
    ("torch.compile", lambda tp: tp.compile(lambda x: x, mode="reduce-overhead")),
    ("torch.nn.DataParallel", lambda tp: tp.nn.DataParallel(tp.nn.Linear(2, 2))),
    ("torch.nn.LSTM", lambda tp: tp.nn.LSTM(4, 8, batch_first=True)),
    ("torch.nn.GRU", lambda tp: tp.nn.GRU(4, 8)),
    ("torch.nn.RNN", lambda tp: tp.nn.RNN(4, 8, nonlinearity="tanh")),
    ("torch.nn.LSTMCell", lambda tp: tp.nn.LSTMCell(4, 8)),
    ("torch.nn.GRUCell", lambda tp: tp.nn.GRUCell(4, 8)),
    ("torch.nn.RNNCell", lambda tp: tp.nn.RNNCell(4, 8)),
    ("torch.autograd.profiler.profile", lambda tp: tp.autograd.profiler.profile(record_shapes=True)),
    ("torch.profiler.profile", lambda tp: tp.profiler.profile(activities=[])),
]


@pytest.mark.parametrize("name, use", NOT_THERE, ids=[f"{name}-{i}" for i, (name, _) in enumerate(NOT_THERE)])
def test_a_name_the_package_lacks_raises_where_it_is_used_naming_it_and_the_page(name, use):
    place, _, attribute = name.removeprefix("torch.").rpartition(".")
    for module in (torch, tinypytorch):  # at PyTorch's place in both: reaching it raises nothing
        for part in filter(None, place.split(".")):
            module = getattr(module, part)
        assert callable(getattr(module, attribute))
    with pytest.raises(NotImplementedError) as error:
        use(tinypytorch)
    message = str(error.value)
    assert message.startswith(f"{name} is not in tinypytorch: ") and message.endswith(PAGE)


def test_the_missing_names_are_classes_that_nothing_is_an_instance_of():
    assert not isinstance(nn.Linear(2, 2), (nn.LSTM, nn.GRU, nn.RNN, nn.DataParallel))
    from tinypytorch.autograd.profiler import profile
    from tinypytorch.profiler import profile as profile_too

    with pytest.raises(NotImplementedError, match="torch.profiler.profile is not in tinypytorch"):
        with profile_too():
            pass
    with pytest.raises(NotImplementedError, match="torch.compile is not in tinypytorch"):
        @tinypytorch.compile
        def f(x):
            return x
    assert profile is tinypytorch.autograd.profiler.profile
