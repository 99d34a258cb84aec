"""Step 42's lesson: the exercises' solutions (a checkpointing Function written by hand, the bytes it saves, the
random state replayed) and the numbers the page prints, against torch, the plain run and counts worked out here."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, random
from tinypytorch.autograd.graph import saved_tensors_hooks

pytestmark = [pytest.mark.step42, pytest.mark.torch]
step = load_step(42)


def torch_block_grads(inputs, masks=None, p=0.5):
    """Gradients of sum(block(x)^2) for x, W0 and W1 in torch (float64), the step's layers' weights; with `masks`,
    dropout between the layers applies that mask."""
    x = torch.tensor(inputs, requires_grad=True)
    w0, b0, w1, b1 = (torch.tensor(a.data, requires_grad=True) for a in
                      (step.layer0.weight, step.layer0.bias, step.layer1.weight, step.layer1.bias))
    h = torch.tanh(x @ w0.T + b0)
    if masks is not None:
        h = h * torch.from_numpy(masks.astype(np.float64)) * (1.0 / (1.0 - p))
    (torch.tanh(h @ w1.T + b1) ** 2).sum().backward()
    return [x.grad.numpy(), w0.grad.numpy(), w1.grad.numpy()]


def gradients(run, inputs, seed=0):
    step.layer0.cleargrads(), step.layer1.cleargrads()
    tinypytorch.manual_seed(seed)
    x = Variable(inputs.copy())
    (run(x) ** 2).sum().backward()
    grads = [x.grad.data, step.layer0.weight.grad.data, step.layer1.weight.grad.data]
    return grads, random.default_generator().random()


# ----- exercise 1: a checkpointing Function by hand -----------------------------------------------------------

@pytest.mark.parametrize("rows", [1, 4, 9])
def test_recomputed_gives_torchs_gradients_and_the_plain_runs_bitwise(rows):
    inputs = np.random.default_rng(rows).standard_normal((rows, 5))
    ours, _ = gradients(lambda h: step.Recomputed(step.two_layers)(h), inputs)
    plain, _ = gradients(step.two_layers, inputs)
    for g, g_plain, g_t in zip(ours, plain, torch_block_grads(inputs), strict=True):
        np.testing.assert_array_equal(g, g_plain)
        np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-14)


def test_recomputed_runs_the_block_twice_and_keeps_one_saved_tensor():
    calls = []

    def counted(h):
        calls.append(tinypytorch.Config.enable_backprop)
        return step.two_layers(h)

    x = Variable(np.ones((2, 5)))
    y = step.Recomputed(counted)(x)
    assert calls == [False] and len(y.creator.saved_tensors) == 1
    y.sum().backward()
    assert calls == [False, True]  # forward without a graph, then the recomputation with one


# ----- exercise 2: the bytes saved ------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [1, 4, 10])
def test_block_saved_bytes_counts_three_activations_plainly_and_one_recomputed(rows):
    activation = rows * 5 * 8  # float64: the input, tanh's output after layer 0 (layer 1's input), tanh's output
    x = Variable(np.random.default_rng(0).standard_normal((rows, 5)))
    assert step.block_saved_bytes(step.two_layers, x) == 3 * activation
    assert step.block_saved_bytes(lambda h: step.Recomputed(step.two_layers)(h), x) == activation


def test_block_saved_bytes_sees_what_a_plain_pack_hook_sees():
    x = Variable(np.ones((3, 5)))
    seen = []
    with saved_tensors_hooks(lambda v: seen.append(v.data) or v, lambda v: v):
        step.two_layers(x)
    parameters = {id(p.data) for p in (*step.layer0.params(), *step.layer1.params())}
    distinct = {id(a): a.nbytes for a in seen if id(a) not in parameters}
    assert step.block_saved_bytes(step.two_layers, x) == sum(distinct.values())


# ----- exercise 3: the random state replayed ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 17])
def test_recomputed_with_rng_gives_the_plain_gradients_bitwise_and_the_same_next_draw(seed):
    inputs = np.random.default_rng(seed + 3).standard_normal((4, 5))
    plain, plain_next = gradients(step.with_dropout, inputs, seed)
    ours, ours_next = gradients(lambda h: step.RecomputedWithRng(step.with_dropout)(h), inputs, seed)
    generator = np.random.Generator(np.random.PCG64(seed))
    masks = generator.random((4, 5)) >= 0.5
    for g, g_plain, g_t in zip(ours, plain, torch_block_grads(inputs, masks), strict=True):
        np.testing.assert_array_equal(g, g_plain)
        np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-14)
    assert ours_next == plain_next == generator.random()


@pytest.mark.parametrize("seed", [0, 1, 17])
def test_without_the_state_the_recomputation_draws_the_next_mask(seed):
    inputs = np.random.default_rng(seed + 3).standard_normal((4, 5))
    ours, ours_next = gradients(lambda h: step.Recomputed(step.with_dropout)(h), inputs, seed)
    generator = np.random.Generator(np.random.PCG64(seed))
    first, second = generator.random((4, 5)) >= 0.5, generator.random((4, 5)) >= 0.5
    # the output (and the loss's gradient 2y) come from the first mask, backward goes through the second
    x = torch.tensor(inputs)
    w0, b0, w1, b1 = (torch.tensor(a.data) for a in
                      (step.layer0.weight, step.layer0.bias, step.layer1.weight, step.layer1.bias))
    y_first = torch.tanh((torch.tanh(x @ w0.T + b0) * torch.from_numpy(first.astype(np.float64)) * 2.0) @ w1.T + b1)
    x.requires_grad_(True)
    w0.requires_grad_(True), w1.requires_grad_(True)
    y_second = torch.tanh((torch.tanh(x @ w0.T + b0) * torch.from_numpy(second.astype(np.float64)) * 2.0) @ w1.T
                          + b1)
    y_second.backward(2 * y_first)
    for g, g_t in zip(ours, [x.grad.numpy(), w0.grad.numpy(), w1.grad.numpy()], strict=True):
        np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-14)
    assert ours_next == generator.random()


# ----- what the page prints ---------------------------------------------------------------------------------------

def test_the_rng_experiment_on_the_page():
    assert step.compare(step.preserved, step.plain)[:2] == (0.0, True)
    assert step.preserved_next == step.plain_next
    largest, equal, differ = step.compare(step.shifted, step.plain)
    assert not equal and largest > 0.1 and differ > step.entries // 2
    assert step.shifted_next != step.plain_next
    assert step.entries == 8 * 16 + 6 * (16 * 16 + 16)


def test_the_watched_function_ran_once_without_and_once_with_a_graph_inside_backward():
    assert step.calls == ["call 1: recording off, inside a backward pass: False",
                          "call 2: recording on, inside a backward pass: True"]
