"""Step 37's lesson: the exercises' solutions (the quiz of in-place changes through views, and the CopySlices node
built by hand), checked against PyTorch and against gradients worked out here."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step37, pytest.mark.torch]
step = load_step(37)


@pytest.mark.parametrize("case", ["A", "B", "C", "D"])
def test_each_quiz_prediction_is_what_both_frameworks_do(case):
    ours = step.outcome(lambda m: step.quiz(case, m), step.Ours)
    theirs = step.outcome(lambda m: step.quiz(case, m), step.Torch)
    found = ["raises" if isinstance(r, RuntimeError) else "computes" for r in (ours, theirs)]
    assert found == [step.PREDICTIONS[case]] * 2
    if found[0] == "computes":
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-14, atol=0)


def test_quiz_a_gives_the_gradient_of_the_rebuilt_view():
    # b = 2a, then b *= 2 (b = 4a), v = b[1:] rebuilt from the new b: sum(v^2) = 16 (a1^2 + a2^2)
    grads = step.outcome(lambda m: step.quiz("A", m), step.Ours)
    np.testing.assert_allclose(grads[0], [0.0, 32 * 2.0, 32 * 3.0], rtol=1e-15)


def test_quiz_c_gives_exps_gradient_through_the_unchanged_output():
    # exp saved its output, untouched by zeroing b[0]: d/da sum(exp(2a)) = 2 exp(2a)
    grads = step.outcome(lambda m: step.quiz("C", m), step.Ours)
    np.testing.assert_allclose(grads[0], 2 * np.exp(2 * np.array([1.0, 2.0, 3.0])), rtol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scatter_by_hand_equals_torchs_slice_scatter_and_its_gradients(seed):
    rng = np.random.default_rng(seed)
    base, value, weights = rng.normal(size=4), rng.normal(size=2), rng.normal(size=4)
    out, base_grad, value_grad = step.scatter_by_hand(base, value, weights)
    base_t, value_t = torch.tensor(base, requires_grad=True), torch.tensor(value, requires_grad=True)
    out_t = torch.slice_scatter(base_t, value_t, dim=0, start=1, end=3)
    (out_t * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(out, out_t.detach().numpy())
    np.testing.assert_array_equal(base_grad, base_t.grad.numpy())
    np.testing.assert_array_equal(value_grad, value_t.grad.numpy())
    # worked out: the base keeps elements 0 and 3 (their weights), the value fills 1 and 2 (theirs)
    np.testing.assert_array_equal(base_grad, [weights[0], 0.0, 0.0, weights[3]])
    np.testing.assert_array_equal(value_grad, weights[1:3])
