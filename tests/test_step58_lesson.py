"""Step 58's lesson: the exercises' solutions (features made in inference mode and trained on, which tensors are
inference tensors, gradient descent in place under no_grad instead of .data), checked against torch."""
import numpy as np
import pytest
import torch

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step58, pytest.mark.torch]
step = load_step(58)


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


def test_which_tensors_are_inference_tensors_as_torch_says():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with torch.inference_mode():
        x = w * 2
    expected = {"x": x.is_inference(), "x + 1": (x + 1).is_inference(), "x[0:2]": x[0:2].is_inference(),
                "x.clone()": x.clone().is_inference(), "x.detach()": x.detach().is_inference()}
    assert step.kinds(tp) == expected
    # made in the mode, or a view of such a tensor (detach() is a view of the same data): PyTorch's documented rule
    assert expected == {"x": True, "x + 1": False, "x[0:2]": True, "x.clone()": False, "x.detach()": True}


def test_sgd_steps_under_no_grad_match_torchs_and_count_each_update():
    start, lr, n = [1.0, -2.0, 0.5], 0.1, 4
    w = step.sgd_steps(tp.tensor(start, dtype=tp.float64, requires_grad=True), lambda w: (w * w * w).sum(), lr, n)
    w_t = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    for _ in range(n):
        w_t.grad = None
        (w_t * w_t * w_t).sum().backward()
        with torch.no_grad():
            w_t -= lr * w_t.grad
    np.testing.assert_allclose(w.data, w_t.detach().numpy(), rtol=1e-13)
    assert w._version == w_t._version == n
    assert w.requires_grad and w.grad_fn is None and w_t.grad_fn is None  # still a leaf


@pytest.mark.parametrize("fw", [torch, tp], ids=lambda fw: fw.__name__)
def test_the_update_outside_no_grad_raises_in_both(fw):
    w = fw.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w -= 0.1 * fw.tensor([1.0, 1.0])
