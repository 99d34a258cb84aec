"""Step 48's lesson: the exercises' solutions and the numbers the page prints, on NumPy and on the device backends.

The page prints only what holds with and without a GPU; these tests run its functions on every backend of the
`xp` fixture (NumPy, the strict stand-in for CuPy, a real GPU where there is one) and check that the printed
figures are the same on all of them."""
import numpy as np
import pytest

from steploader import load_step
from test_step48 import splitmix64
from tinypytorch import random

pytestmark = pytest.mark.step48
step = load_step(48)


def device_of(xp):
    return "cpu" if xp is np else "cuda"


# ----- exercise 1: softplus on both backends -------------------------------------------------------------------

def test_softplus_forward_is_stable_and_runs_on_every_backend(xp):
    values = np.array([-800.0, -30.0, -1.0, 0.0, 1e-8, 1.0, 30.0, 800.0])
    y = step.softplus_forward(xp.asarray(values))
    assert step.cuda.get_array_module(y) is step.cuda.get_array_module(xp.asarray(values))
    y = step.cuda.as_numpy(y)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, np.logaddexp(0.0, values), rtol=1e-14, atol=0)


# ----- exercise 2 and the first section: the model of launch latency and bandwidth -----------------------------

def test_model_crossover_is_where_the_model_times_meet():
    for bytes_per_element in (4, 8, 16):
        n = step.model_crossover(**step.MODEL, bytes_per_element=bytes_per_element)
        gpu, cpu = step.model_times(n, **step.MODEL, bytes_per_element=bytes_per_element)
        np.testing.assert_allclose(gpu, cpu, rtol=1e-12)
        below, above = step.model_times(np.array([n / 2, 2 * n]), **step.MODEL, bytes_per_element=bytes_per_element)
        assert below[0] > above[0] and below[1] < above[1]  # NumPy wins below the crossover, the GPU above


def test_printed_crossovers():
    # (8 µs - 1 µs) / (16 B / 10 GB/s - 16 B / 2 TB/s) = 7e-6 / (1.6e-9 - 8e-12) s = 4,397.0 elements
    assert f"{step.model_crossover(**step.MODEL):,.0f}" == "4,397"
    assert f"{step.float32_crossover:,.0f}" == "8,794"
    np.testing.assert_allclose(step.float32_crossover, 2 * step.model_crossover(**step.MODEL), rtol=1e-12)


# ----- exercise 3 and the generator section -----------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2**40 + 7])
def test_draw_at_jumps_ahead(xp, seed):
    long = step.cuda.as_numpy(random.CounterGenerator(seed).random((40,), xp))
    for offset in (0, 3, 17):
        np.testing.assert_array_equal(step.cuda.as_numpy(step.draw_at(seed, offset, (4, 5), xp)),
                                      long[offset:offset + 20].reshape(4, 5))


def test_the_counter_generator_draws_the_same_bits_on_every_backend(xp):
    on_device = random.CounterGenerator(0).random((3, 7), xp)
    np.testing.assert_array_equal(step.cuda.as_numpy(on_device), random.CounterGenerator(0).random((3, 7), np))


def test_printed_draws():
    np.testing.assert_array_equal(step.cuda.as_numpy(step.first), splitmix64(0, 8))  # SplitMix64 written out
    assert step.show(step.first, 3) == "[0.883, 0.432, 0.026, 0.971, 0.106, 0.327, 0.174, 0.772]"
    assert step.state_after_first == (0, 8) and step.generator.get_state() == (0, 8)  # after the replay
    np.testing.assert_array_equal(step.mask, step.cuda.as_numpy(step.second) >= 0.5)


# ----- the memory techniques on the device --------------------------------------------------------------------

# A block of the step's network is two halves, each Linear(8, 8) then tanh on 32 rows: each half saves the
# Linear's input and tanh's output, 2 x 32 x 8 float64 = 4,096 bytes, so a block saves 8,192 and eight blocks
# 65,536 (plain, and saved on the CPU: the same bytes, elsewhere). The reversible stack keeps its output only,
# 32 x 16 x 8 = 4,096 bytes. Checkpointed in 4 segments of 2 blocks: the inputs of the first three segments
# (3 x 4,096) and the last segment's graph (2 x 8,192) = 28,672.
PRINTED_BYTES = {"plain": 65_536, "checkpointed": 28_672, "saved on the CPU": 65_536, "reversible": 4_096}


@pytest.mark.parametrize("technique", step.TECHNIQUES)
def test_saved_bytes_gradients_and_loss_are_the_same_on_every_backend(xp, technique):
    saved, held, grads, loss = step.run(technique, device_of(xp), steps=30)
    assert saved == PRINTED_BYTES[technique]  # what the page prints, on every device
    _, _, cpu_grads, cpu_loss = step.results[technique] if step.DEVICE == "cpu" else step.run(technique, "cpu", 30)
    for g, h in zip(grads, cpu_grads, strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(loss, cpu_loss, rtol=1e-8)
    assert f"{loss:.3f}" == "0.832"
    if xp is not np:  # the pool (real, or the stand-in's account): held after forward
        assert held >= saved - (saved if technique == "saved on the CPU" else 0)


def test_the_pool_holds_less_for_the_reversible_network(xp):
    if xp is np:
        pytest.skip("NumPy has no memory pool")
    held = {technique: step.run(technique, "cuda")[1] for technique in ("plain", "saved on the CPU", "reversible")}
    assert held["reversible"] < held["plain"] and held["saved on the CPU"] < held["plain"]


# ----- the PyTorch check's MLP -----------------------------------------------------------------------------------

def test_mlp_gradients_on_the_device_equal_the_cpus(xp):
    on_device, weights, x = step.mlp_gradients(device_of(xp))
    assert x.device.type == device_of(xp)
    for g, h in zip(on_device, step.mlp_gradients("cpu")[0], strict=True):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)
