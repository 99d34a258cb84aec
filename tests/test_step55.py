"""Step 55: convolution as a matrix product over unfolded patches, its backward as fold, pooling's backward, the
modules of a small CNN and what unfolding keeps for backward, each claim of the page held against torch 2.13
(float64) or maths worked out here: the columns are the windows read row by row; W @ unfold(x), reshaped, is torch's
conv2d for every stride, padding, dilation and groups; the output's size is the page's formula; the input's gradient
is fold(W^T G), the windows covering each pixel added up; max pooling sends each window's gradient to its winner,
average pooling spreads it; the page's CNN prints, computes and differentiates as torch.nn's; conv2d keeps the
columns, kh*kw times the input, where torch's node keeps the input and the weight (its own pack hook counts them).

conv_transpose2d, the package's new operation, is held against torch in tests/test_convolution.py.
"""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from reference import assert_close_to_torch
from tinypytorch import Variable, nn
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.nn import functional as F

pytestmark = [pytest.mark.step55, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype

RNG = np.random.default_rng(55)


def test_the_columns_are_the_windows_read_row_by_row():
    """Worked out: column l of unfold(x) is window l (row by row over the windows), read row by row within it."""
    x = np.arange(2 * 5 * 6, dtype=np.float64).reshape(1, 2, 5, 6)
    columns = F.unfold(Variable(x), (2, 3)).data[0]
    expected = [x[0, :, i:i + 2, j:j + 3].reshape(-1) for i in range(4) for j in range(4)]
    np.testing.assert_array_equal(columns, np.stack(expected, axis=1))
    np.testing.assert_array_equal(columns, TF.unfold(torch.tensor(x), (2, 3)).numpy()[0])


CONV_SETTINGS = [  # (x shape, weight shape, stride, padding, dilation, groups)
    ((2, 3, 8, 8), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 3, 8, 7), (4, 3, 3, 2), (2, 1), (1, 2), (1, 2), 1),
    ((1, 1, 8, 8), (2, 1, 5, 5), 2, 2, 1, 1),
    ((2, 4, 6, 6), (6, 2, 3, 3), 1, 0, 2, 2),
]


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, dilation, groups", CONV_SETTINGS)
def test_the_weight_matrix_times_the_columns_reshaped_is_torchs_conv2d(x_shape, w_shape, stride, padding, dilation,
                                                                       groups):
    x, w, b = RNG.normal(size=x_shape), RNG.normal(size=w_shape), RNG.normal(size=w_shape[0])
    args = {"stride": stride, "padding": padding, "dilation": dilation}
    theirs = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), groups=groups, **args).numpy()
    columns = F.unfold(Variable(x), w_shape[2:], **args).data  # (N, C*kh*kw, L)
    n, blocks = x_shape[0], columns.shape[-1]
    per_group = columns.reshape(n, groups, -1, blocks)
    w_matrix = w.reshape(groups, w_shape[0] // groups, -1)
    product = np.einsum("gok,ngkl->ngol", w_matrix, per_group).reshape(n, w_shape[0], blocks)
    assert_close_to_torch(product.reshape(theirs.shape) + b[:, None, None], theirs)
    ours = F.conv2d(Variable(x), Variable(w), Variable(b), groups=groups, **args).data
    assert_close_to_torch(ours, theirs)


def test_the_output_size_formula_is_torchs():
    """floor((H + 2p - d(k - 1) - 1) / s) + 1 against the size of torch's output, over a grid of settings."""
    for size, k, s, p, d in itertools.product((5, 8, 9), (1, 2, 3, 5), (1, 2, 3), (0, 1, 2), (1, 2)):
        formula = (size + 2 * p - d * (k - 1) - 1) // s + 1
        if formula < 1:
            continue
        x, w = torch.zeros(1, 1, size, size, dtype=torch.float64), torch.ones(1, 1, k, k, dtype=torch.float64)
        assert TF.conv2d(x, w, stride=s, padding=p, dilation=d).shape[-1] == formula, (size, k, s, p, d)
        ours = F.conv2d(Variable(np.zeros((1, 1, size, size))), Variable(np.ones((1, 1, k, k))), stride=s,
                        padding=p, dilation=d)
        assert ours.shape[-2:] == (formula, formula)


def covering_windows(size, kernel, stride):
    """How many windows of a sliding kernel (no padding) cover each pixel of a size x size image, counted."""
    counts = np.zeros((size, size))
    for i in range(0, size - kernel + 1, stride):
        for j in range(0, size - kernel + 1, stride):
            counts[i:i + kernel, j:j + kernel] += 1
    return counts


@pytest.mark.parametrize("size, stride", [(4, 1), (5, 2), (7, 2), (6, 3)])
def test_the_input_gradient_is_fold_of_the_columns_gradient(size, stride):
    """A kernel of ones, dL/dy = 1: x.grad counts the windows over each pixel (worked out), as torch's x.grad, and is
    fold(W^T G) in torch's own fold."""
    x = Variable(np.zeros((1, 1, size, size)))
    F.conv2d(x, Variable(np.ones((1, 1, 3, 3))), stride=stride).sum().backward()
    np.testing.assert_array_equal(x.grad.data[0, 0], covering_windows(size, 3, stride))
    xt = torch.zeros(1, 1, size, size, dtype=torch.float64, requires_grad=True)
    yt = TF.conv2d(xt, torch.ones(1, 1, 3, 3, dtype=torch.float64), stride=stride)
    yt.sum().backward()
    g = torch.ones(1, 1, yt.shape[-2] * yt.shape[-1], dtype=torch.float64)
    by_fold = TF.fold(torch.ones(9, 1, dtype=torch.float64) @ g, (size, size), 3, stride=stride)
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    np.testing.assert_array_equal(x.grad.data, by_fold.numpy())


def test_a_random_convolutions_input_gradient_is_fold_of_w_transposed_times_g():
    x, w, g = RNG.normal(size=(2, 3, 7, 6)), RNG.normal(size=(4, 3, 3, 2)), RNG.normal(size=(2, 4, 7, 7))
    xv = Variable(x)
    (F.conv2d(xv, Variable(w), padding=1) * Variable(g)).sum().backward()
    columns_grad = torch.tensor(w.reshape(4, -1)).T @ torch.tensor(g.reshape(2, 4, -1))
    expected = TF.fold(columns_grad, (7, 6), (3, 2), padding=1).numpy()
    assert_close_to_torch(xv.grad.data, expected)


POOL_IMAGE = np.array([[3.0, 1, 0, 2], [4, 2, 5, 1], [0, 6, 1, 1], [2, 1, 3, 0]]).reshape(1, 1, 4, 4)
POOL_GRAD = np.array([[1.0, 2], [3, 4]]).reshape(1, 1, 2, 2)


@pytest.mark.parametrize("name, expected", [
    ("max_pool2d", [[0, 0, 0, 0], [1, 0, 2, 0], [0, 3, 0, 0], [0, 0, 4, 0]]),  # each window's winner
    ("avg_pool2d", [[0.25, 0.25, 0.5, 0.5], [0.25, 0.25, 0.5, 0.5], [0.75, 0.75, 1, 1], [0.75, 0.75, 1, 1]]),
])
def test_max_pooling_sends_the_gradient_to_the_winner_and_average_pooling_spreads_it(name, expected):
    x = Variable(POOL_IMAGE.copy())
    (getattr(F, name)(x, 2) * Variable(POOL_GRAD)).sum().backward()
    xt = torch.tensor(POOL_IMAGE, requires_grad=True)
    (getattr(TF, name)(xt, 2) * torch.tensor(POOL_GRAD)).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy()[0, 0], expected)
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())


def test_overlapping_max_windows_add_their_gradients_at_a_shared_winner_as_torchs():
    """Stride 1: the centre wins all four 3 x 3 windows of a 4 x 4 image that hold it, and gets four gradients."""
    image = np.zeros((1, 1, 4, 4))
    image[0, 0, 1, 1] = image[0, 0, 2, 2] = 1.0
    x, xt = Variable(image.copy()), torch.tensor(image, requires_grad=True)
    F.max_pool2d(x, 3, stride=1).sum().backward()
    TF.max_pool2d(xt, 3, stride=1).sum().backward()
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    assert xt.grad[0, 0, 1, 1] == 4  # the first of two equal winners takes every window


def cnns():
    """The page's CNN in both frameworks, torch's initial weights loaded into the package's."""
    def build(n):
        return n.Sequential(n.Conv2d(1, 8, 3, padding=1), n.BatchNorm2d(8), n.ReLU(), n.MaxPool2d(2),
                            n.Conv2d(8, 16, 3, padding=1), n.BatchNorm2d(16), n.ReLU(), n.MaxPool2d(2),
                            n.Flatten(), n.Linear(16 * 2 * 2, 10))

    torch.manual_seed(0)
    theirs = build(torch.nn).double()
    ours = build(nn)
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_the_pages_cnn_prints_counts_and_computes_as_torchs():
    ours, theirs = cnns()
    assert repr(ours) == repr(theirs)
    assert sum(p.data.size for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters()) == 1946
    x, target = RNG.uniform(0, 1, (16, 1, 8, 8)), RNG.integers(0, 10, 16)
    xv, xt = Variable(x.copy()), torch.tensor(x, requires_grad=True)
    loss = F.cross_entropy(ours(xv), target)
    loss_t = TF.cross_entropy(theirs(xt), torch.tensor(target))
    loss.backward()
    loss_t.backward()
    assert_close_to_torch(loss.data, loss_t.item())
    assert_close_to_torch(xv.grad.data, xt.grad.numpy(), "input")
    for (name, p), (name_t, pt) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert name == name_t
        assert_close_to_torch(p.grad.data, pt.grad.numpy(), name)
    for key, value in theirs.state_dict().items():  # the running statistics after one batch in training mode
        np.testing.assert_allclose(ours.state_dict()[key].data, value.numpy(), rtol=1e-12, atol=1e-15, err_msg=key)


def distinct_saved_bytes(pack_key, size, hooks, work):
    kept = {}

    def pack(t):
        key, nbytes = pack_key(t), size(t)
        kept[key] = nbytes
        return t

    with hooks(pack, lambda t: t):
        work()
    return kept


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_keeps_the_columns_where_torch_keeps_the_input_and_the_weight(stride):
    """The page's measure, again: torch's pack hook is handed the input and the weight (its storages, counted here);
    the package's, the columns (C*kh*kw*L elements per image: 9 x the input at stride 1, worked out) and the
    weight's memory (a view of the parameter)."""
    x = RNG.normal(size=(32, 8, 4, 4))
    w, b = RNG.normal(size=(16, 8, 3, 3)), RNG.normal(size=16)
    xt = torch.tensor(x, requires_grad=True)
    wt, bt = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    theirs = distinct_saved_bytes(lambda t: t.untyped_storage().data_ptr(), lambda t: t.untyped_storage().nbytes(),
                                  torch.autograd.graph.saved_tensors_hooks,
                                  lambda: TF.conv2d(xt, wt, bt, stride=stride, padding=1))
    assert sorted(theirs.values()) == sorted([w.nbytes, x.nbytes])

    def base(v):
        return v.data if v.data.base is None else v.data.base

    xv, wv, bv = Variable(x), Variable(w), Variable(b)
    ours = distinct_saved_bytes(lambda v: id(base(v)), lambda v: base(v).nbytes, saved_tensors_hooks,
                                lambda: F.conv2d(xv, wv, bv, stride=stride, padding=1))
    side = (4 + 2 - 3) // stride + 1
    columns = 32 * (8 * 3 * 3) * side * side * 8  # N * C*kh*kw * L elements of 8 bytes
    assert sorted(ours.values()) == sorted([w.nbytes, columns])
    if stride == 1:
        assert columns == 9 * x.nbytes
