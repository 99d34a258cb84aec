"""Step 55's lesson: what the page prints, and the exercises' solutions, held against torch 2.13 (float64) or maths
worked out here. The columns and the two filters' outputs; the output sizes of the formula's table; the fold example;
the pooling example; the table of the CNN against step 51's MLP, whose counts torch's twins reach when trained from
the same weights on the same minibatches; the bytes that conv2d keeps, against torch's; and the three exercises
(conv2d's input gradient as conv_transpose2d, a 1 x 1 convolution as a linear layer, pooling from unfold)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from reference import assert_close_to_torch
from steploader import load_step

pytestmark = [pytest.mark.step55, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
step = load_step(55)
RNG = np.random.default_rng(5)


def test_the_columns_and_the_two_filters_are_torchs():
    image = torch.arange(16.0, dtype=torch.float64).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(step.columns.data, TF.unfold(image, 3).numpy())
    filters = torch.tensor(step.w.data)
    np.testing.assert_array_equal(filters[0, 0].numpy(), [[-1, 0, 1]] * 3)  # the difference the page describes
    theirs = TF.conv2d(image, filters).numpy()
    assert_close_to_torch(step.by_hand.data, theirs)
    np.testing.assert_allclose(theirs[0, 0], 6.0, rtol=1e-15)  # (j + 2) - j over three rows
    np.testing.assert_allclose(theirs[0, 1], [[5, 6], [9, 10]], rtol=1e-14)  # the windows' centres


def test_the_formulas_table_is_torchs_output_size():
    for k, s, p, d in step.SETTINGS:
        y = TF.conv2d(torch.zeros(1, 1, 8, 8, dtype=torch.float64), torch.ones(1, 1, k, k, dtype=torch.float64),
                      stride=s, padding=p, dilation=d)
        assert y.shape[-1] == (8 + 2 * p - d * (k - 1) - 1) // s + 1


def test_the_fold_example_counts_the_windows_over_each_pixel():
    counts = np.zeros((4, 4))
    for i in range(2):
        for j in range(2):
            counts[i:i + 3, j:j + 3] += 1
    np.testing.assert_array_equal(step.by_fold.data[0, 0], counts)
    xt = torch.zeros(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    TF.conv2d(xt, torch.ones(1, 1, 3, 3, dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy()[0, 0], counts)


def test_the_pooling_example_is_torchs():
    for name in ("max_pool2d", "avg_pool2d"):
        xt = torch.tensor(step.x.data, requires_grad=True)
        (getattr(TF, name)(xt, 2) * torch.tensor(step.G.data)).sum().backward()
        image = tinypytorch.Variable(step.x.data.copy())
        (getattr(step.F, name)(image, 2) * step.G).sum().backward()
        np.testing.assert_array_equal(image.grad.data, xt.grad.numpy(), err_msg=name)
        np.testing.assert_array_equal(step.grads[name], xt.grad.numpy()[0, 0], err_msg=name)  # what is drawn


# ----- the table: torch's twins trained on the same minibatches ---------------------------------------------------

def epochs_of_batches(epochs=15):
    """The minibatches of every epoch, in the order step.train sees them (the loader's generator seeded with 1)."""
    tinypytorch.manual_seed(1)
    return [step.train_loader.batches() for _ in range(epochs)]


def torch_accuracy(twin, prepare, lr=0.005):
    """Train torch's twin with torch.optim.Adam on the page's minibatches, then count its right answers on the
    test digits and on the moved ones."""
    optimizer = torch.optim.Adam(twin.parameters(), lr=lr)
    for batches in epochs_of_batches():
        twin.train()
        for indices in batches:
            x, t = step.train_loader.collate([step.train_set[i] for i in indices])
            loss = TF.cross_entropy(twin(prepare(torch.tensor(x.data))), torch.tensor(t.data))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    twin.eval()
    with torch.no_grad():
        right = (twin(prepare(torch.tensor(step.x_test.data))).argmax(1).numpy() == step.t_test.data).sum()
        moved = (twin(prepare(torch.tensor(step.x_moved.data))).argmax(1).numpy() == step.t_moved).sum()
    return int(right), int(moved)


def mlp_twin():
    ours = step.MLP((64, 64, 10), activation=tinypytorch.tanh, rng=np.random.default_rng(1))  # the page's start
    twin = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).double()
    with torch.no_grad():
        for p, p_t in zip(ours.params(), [twin[0].weight, twin[0].bias, twin[2].weight, twin[2].bias]):
            p_t.copy_(torch.from_numpy(p.data))
    return twin


def cnn_twin():
    n = torch.nn
    twin = n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.BatchNorm2d(8), n.ReLU(), n.MaxPool2d(2),
                        n.Conv2d(8, 16, 3, padding=1), n.BatchNorm2d(16), n.ReLU(), n.MaxPool2d(2),
                        n.Flatten(), n.Linear(16 * 2 * 2, 10)).double()
    tinypytorch.manual_seed(0)
    ours = step.cnn()  # the page's starting weights
    assert repr(ours) == repr(twin)
    twin.load_state_dict({k: torch.from_numpy(v.data.copy()) for k, v in ours.state_dict().items()})
    return twin


@pytest.mark.parametrize("name", ["MLP", "CNN"])
def test_the_tables_counts_are_what_torchs_twin_reaches(name):
    twin = mlp_twin() if name == "MLP" else cnn_twin()
    prepare = (lambda x: x.reshape(len(x), 64)) if name == "MLP" else (lambda x: x)
    right, moved = torch_accuracy(twin, prepare)
    size = sum(p.numel() for p in twin.parameters())
    assert step.table[name] == (size, right, moved)


def test_the_tables_story():
    """What the prose says of the table: 40% of the parameters, within two test digits, half of the moved digits
    wrong for the MLP, about three quarters right for the CNN; and the MLP is step 51's (292 of 297 there too)."""
    (mlp_size, mlp_right, mlp_moved), (cnn_size, cnn_right, cnn_moved) = step.table["MLP"], step.table["CNN"]
    assert (mlp_size, cnn_size) == (64 * 64 + 64 + 64 * 10 + 10, 80 + 16 + (8 * 9 * 16 + 16) + 32 + 650)
    assert round(cnn_size / mlp_size, 1) == 0.4
    assert abs(cnn_right - mlp_right) <= 2 and mlp_right == 292
    assert 0.4 < mlp_moved / 594 < 0.55 and 0.72 < cnn_moved / 594 < 0.8


def test_the_bytes_conv2d_keeps_against_torchs():
    x = step.layer_input.data
    conv = step.cnn_model[4]
    assert step.unfolded == 9 * x.nbytes  # stride 1, padding 1: a window at every pixel, nine values each
    assert step.kept == step.unfolded + conv.weight.data.nbytes
    assert step.kept_by_torch == x.nbytes + conv.weight.data.nbytes  # torch's input and weight, 8 bytes an element


# ----- the exercises ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stride", [1, 2, 3])
def test_exercise_1_the_transposed_convolution_is_torchs_and_conv2ds_input_gradient(stride):
    w = RNG.normal(size=(4, 3, 3, 2))
    x = torch.tensor(RNG.normal(size=(2, 3, 9, 8)), requires_grad=True)
    y = TF.conv2d(x, torch.tensor(w), stride=stride)
    g = RNG.normal(size=tuple(y.shape))
    (y * torch.tensor(g)).sum().backward()
    ours = step.transposed(tinypytorch.Variable(g), tinypytorch.Variable(w), stride).data
    theirs = TF.conv_transpose2d(torch.tensor(g), torch.tensor(w), stride=stride).numpy()
    assert_close_to_torch(ours, theirs)
    covered = theirs.shape[-2:]  # the rows and columns a window reaches; the rest of x gets no gradient
    assert_close_to_torch(ours, x.grad.numpy()[..., :covered[0], :covered[1]])


def test_exercise_2_a_one_by_one_convolution_is_a_linear_layer():
    x, w, b = RNG.normal(size=(3, 5, 4, 6)), RNG.normal(size=(7, 5, 1, 1)), RNG.normal(size=7)
    ours = step.pointwise(*(tinypytorch.Variable(a) for a in (x, w, b))).data
    assert_close_to_torch(ours, TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy())


@pytest.mark.parametrize("how, name", [("avg", "avg_pool2d"), ("max", "max_pool2d")])
@pytest.mark.parametrize("k", [2, 3])
def test_exercise_3_pooling_from_unfold_is_torchs_with_its_gradients(how, name, k):
    x, g = RNG.normal(size=(2, 3, 6, 9)), RNG.normal(size=(2, 3, 6 // k, 9 // k))
    xv = tinypytorch.Variable(x)
    (grad,) = tinypytorch.autograd.grad((step.pool(xv, k, how) * tinypytorch.Variable(g)).sum(), [xv])
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(TF, name)(xt, k)
    (yt * torch.tensor(g)).sum().backward()
    assert_close_to_torch(step.pool(xv, k, how).data, yt.detach().numpy())
    assert_close_to_torch(grad.data, xt.grad.numpy())


def test_the_check_covered_every_operation_and_argument_the_page_names():
    names = " ".join(step.checked)
    for word in ("conv2d", "stride", "padding", "dilation", "groups", "bias", "same", "max_pool2d", "ties",
                 "avg_pool2d", "conv_transpose2d"):
        assert word in names, word
