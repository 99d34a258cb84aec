"""Step 46's lesson: the exercises' solutions (a backward that fuses the inverse and the recomputation; inverting a
whole stack), checked against torch, the unfused stack and counts worked out here."""
import numpy as np
import pytest

import tinypytorch
from steploader import load_step
from test_step46 import (data, grads_of, make_stack, recorded_masks, relative_difference, torch_coupling_blocks,
                         torch_grads)
from tinypytorch import Variable
from tinypytorch.reversible import ReversibleSequential

pytestmark = [pytest.mark.step46, pytest.mark.torch]
step = load_step(46)


def fused(net):
    return step.FusedReversibleSequential(*net.blocks)


# ----- exercise 1: the fused backward ------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 3, 6])
@pytest.mark.parametrize("p", [0.0, 0.2])
def test_the_fused_backward_calls_f_and_g_once_per_block_instead_of_twice(depth, p):
    # forward: f and g once per block; unfused backward: inverse (g, f) and recomputation (f, g); fused: g, f
    _, unfused = step.counted_run("unfused", depth, p)
    _, fused_calls = step.counted_run("fused", depth, p)
    assert unfused == {"f": 3 * depth, "g": 3 * depth}
    assert fused_calls == {"f": 2 * depth, "g": 2 * depth}


@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("seed", [0, 5])
def test_the_fused_backward_gives_torchs_gradients_and_the_unfused_ones(p, seed):
    net, x0, w = make_stack(4, p=p, seed=seed), data(seed + 1), data(seed + 2)
    y, ours, next_fused = grads_of(fused(net), x0, w, True, seed=seed)
    _, unfused, next_unfused = grads_of(net, x0, w, True, seed=seed)
    y_t, theirs = torch_grads(torch_coupling_blocks(net, recorded_masks(net, x0, seed)), x0, w)
    np.testing.assert_allclose(y, y_t, rtol=1e-12, atol=1e-14)
    for g, g_t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(g, g_t, rtol=1e-10, atol=1e-13)
    assert relative_difference(ours, unfused) < 1e-14
    assert next_fused == next_unfused  # the outer random stream continues the same


def test_the_fused_backward_is_one_node_and_counts_a_batchnorm_batch_once():
    net, x0, w = make_stack(3, half=step.NormTanh), data(), data(seed=2)
    fused_net = fused(net)
    assert isinstance(fused_net(Variable(x0)).creator, step.FusedReversibleFunction)
    for block in net.blocks:
        for half in (block.f, block.g):
            half.norm.num_batches_tracked = 0
            half.norm.running_mean[...] = 0.0
            half.norm.running_var[...] = 1.0
    _, ours, _ = grads_of(fused_net, x0, w, True)
    blocks = torch_coupling_blocks(net)
    _, theirs = torch_grads(blocks, x0, w)
    for g, g_t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(g, g_t, rtol=1e-10, atol=1e-13)
    for block, twin in zip(net.blocks, blocks):
        for half, half_t in [(block.f, twin.f), (block.g, twin.g)]:
            assert half.norm.num_batches_tracked == 1
            np.testing.assert_allclose(half.norm.running_mean, half_t[1].running_mean.numpy(), rtol=1e-12)


def test_the_page_prints_the_counts_of_six_blocks():
    assert step.unfused_calls == {"f": 18, "g": 18} and step.fused_calls == {"f": 12, "g": 12}


# ----- exercise 2: inverting a whole stack ---------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 4, 16])
def test_invert_stack_recovers_the_input_without_recording(depth):
    net, x0 = make_stack(depth, seed=depth), data(seed=depth)
    y = step.run_plainly(net, Variable(x0))
    x = step.invert_stack(net, Variable(y.data))
    assert x.creator is None
    np.testing.assert_allclose(x.data, x0, rtol=0, atol=1e-12)


def test_invert_stack_inverts_the_blocks_in_reverse_order():
    # two different blocks: inverting them in forward order would not give x back
    net, x0 = make_stack(2, seed=3), data(seed=4)
    y = net(Variable(x0))
    assert np.abs(step.invert_stack(net, y).data - x0).max() < 1e-13
    swapped = ReversibleSequential(*net.blocks[::-1])
    assert np.abs(step.invert_stack(swapped, y).data - x0).max() > 1e-3
