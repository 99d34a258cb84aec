"""Step 63's lesson: the exercises' solutions (a SiLU MLP's kept bytes, a policy with a byte budget), checked against
torch doing the same and against the count of tensors worked out by hand."""
import functools

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as tc

from steploader import load_step

pytestmark = [pytest.mark.step63, pytest.mark.torch]
step = load_step(63)
ACTIVATION = step.N * step.D * 8  # one (64, 128) float64 tensor


def torch_params():
    return [(torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)) for W, b in step.WEIGHTS]


def torch_region(params, activation):
    def region(x):
        for i, (W, b) in enumerate(params):
            x = torch.nn.functional.linear(x, W, b)
            x = activation(x) if i < len(params) - 1 else x
        return x
    return region


def torch_kept(policy, activation):
    """Bytes torch holds for backward besides the weights, the input and the output: saved (no policy) or kept."""
    params = torch_params()
    region, x = torch_region(params, activation), torch.tensor(step.X)
    if policy is None:
        return step.saved_blocks(torch, region, params, x)[1]
    pair = tc.create_selective_checkpoint_contexts(policy)
    y = tc.checkpoint(region, x, use_reentrant=False, context_fn=lambda: pair)
    skip = {p.untyped_storage().data_ptr() for pair_ in params for p in pair_} | {y.untyped_storage().data_ptr()}
    blocks = {e.val.untyped_storage().data_ptr(): e.val.untyped_storage().nbytes()
              for entries in pair[0].storage.values() for e in entries.values() if hasattr(e, "val")}
    return sum(n for ptr, n in blocks.items() if ptr not in skip)


def test_silu_keeps_three_tensors_a_layer_without_checkpoint_and_one_with_the_products_kept():
    def silu(x):
        return x * torch.sigmoid(x)
    # by hand: each hidden layer's x (read by sigmoid's and mul's backward), sigmoid(x), and the layer's output
    # (read by the next product); with the products kept, only each hidden layer's x
    assert step.silu_none == torch_kept(None, silu) == 3 * 2 * ACTIVATION
    assert step.silu_products == torch_kept([torch.ops.aten.addmm.default], silu) == 2 * ACTIVATION


def test_the_budget_policy_keeps_one_product_and_gives_torchs_gradients():
    used = [0]

    def budget(ctx, op, *args, **kwargs):
        nbytes = ctx.op_output.untyped_storage().nbytes()
        if op is torch.ops.aten.addmm.default and used[0] + nbytes <= ACTIVATION:
            used[0] += nbytes
            return tc.CheckpointPolicy.MUST_SAVE
        return tc.CheckpointPolicy.PREFER_RECOMPUTE
    params = torch_params()
    y = tc.checkpoint(torch_region(params, torch.tanh), torch.tensor(step.X), use_reentrant=False,
                      context_fn=functools.partial(tc.create_selective_checkpoint_contexts, budget))
    (y * y).sum().backward()
    grads = [p.grad.numpy() for pair in params for p in pair]
    for ours, theirs in zip(step.budget_grads, grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    assert step.budget_kept == ACTIVATION  # the first product, not the output
    # the first product kept: the other two run again, and both tanh
    assert step.budget_counts == {"LinearFunction": 2, "Tanh": 2}
