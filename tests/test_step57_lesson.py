"""Step 57's lesson: the exercises' solutions (a frozen first layer, features made in inference mode and trained
on, predictions from a no_grad generator), checked against torch doing the same."""
import numpy as np
import pytest
import torch

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step57, pytest.mark.torch]
step = load_step(57)


def twins():
    ours = tp.nn.Sequential(tp.nn.Linear(2, 3), tp.nn.Tanh(), tp.nn.Linear(3, 1)).double()
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_freezing_the_first_layer_leaves_torchs_gradients_on_the_last():
    ours, theirs = twins()
    x = [[0.5, -1.0], [2.0, 0.25]]
    names = step.trained_names(ours, tp.tensor(x, dtype=tp.float64))
    for p in theirs[0].parameters():
        p.requires_grad_(False)
    theirs(torch.tensor(x, dtype=torch.float64)).sum().backward()
    assert names == [n for n, p in theirs.named_parameters() if p.grad is not None] == ["2.weight", "2.bias"]
    for (name, p), p_t in zip(ours.named_parameters(), theirs.parameters()):
        assert (p.grad is None) == (p_t.grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12)


def test_features_from_inference_mode_give_the_gradient_x_squared_as_torch():
    x, w = [1.0, -2.0, 3.0], [0.5, 0.5, 0.5]
    ours = step.head_gradient(tp.tensor(x), tp.tensor(w, requires_grad=True))
    w_t = torch.tensor(w, requires_grad=True)
    with torch.inference_mode():
        features = torch.tensor(x) ** 2
    (features.clone() * w_t).sum().backward()
    np.testing.assert_allclose(ours.data, w_t.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.data, np.square(x), rtol=1e-6)  # d/dw sum(x^2 w) = x^2


@pytest.mark.parametrize("fw", [torch, tp], ids=lambda fw: fw.__name__)
def test_without_the_clone_both_refuse_to_save_the_features(fw):
    with fw.inference_mode():
        features = fw.tensor([1.0, 2.0]) ** 2
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        features * fw.tensor([1.0, 1.0], requires_grad=True)


def test_predictions_record_nothing_and_the_caller_between_records_as_torch():
    ours, theirs = twins()

    @torch.no_grad()
    def torch_predictions(model, batches):
        for batch in batches:
            yield model(batch)

    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 2)) for _ in range(3)]
    got = step.predictions(ours, [tp.tensor(b) for b in batches])
    expected = torch_predictions(theirs, [torch.from_numpy(b) for b in batches])
    for out, out_t, batch in zip(got, expected, batches):
        assert out.requires_grad is out_t.requires_grad is False
        between, between_t = ours(tp.tensor(batch)), theirs(torch.from_numpy(batch))
        assert between.requires_grad is between_t.requires_grad is True
        np.testing.assert_allclose(out.data, out_t.numpy(), rtol=1e-12)
