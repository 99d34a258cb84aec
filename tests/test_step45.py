"""Step 45: concatenate (against torch.cat and NumPy, second derivatives, bad input), BatchNorm1d (training and
evaluation against torch, the running statistics updated once under checkpoint where torch's are updated twice, bad
input), and a memory-efficient DenseNet block (torchvision's bottleneck checkpointed): torch's gradients, and memory
linear in depth."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from memory import counting_saved
from reference import assert_close_to_torch
from test_step44 import copied
from tinypytorch import Variable, autograd, concatenate, recomputation
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint, checkpoint_sequential

pytestmark = [pytest.mark.step45, pytest.mark.torch]


# ----- concatenate -------------------------------------------------------------------------------------------

@st.composite
def concatenations(draw):
    """Arrays that fit together along an axis (sizes 0 to 3 there, 1 to 3 elsewhere), the axis (maybe negative),
    and weights for the output."""
    ndim = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 3)) for _ in range(ndim)]
    axis = draw(st.integers(-ndim, ndim - 1))
    count = draw(st.integers(1, 4))
    sizes = [draw(st.integers(0, 3)) for _ in range(count)]
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    arrays = []
    for size in sizes:
        shape[axis] = size
        arrays.append(rng.standard_normal(tuple(shape)))
    shape[axis] = sum(sizes)
    return arrays, axis, rng.standard_normal(tuple(shape))


@given(concatenations())
def test_concatenate_values_and_gradients_equal_torch_cat(case):
    arrays, axis, w = case
    xs = [Variable(a.copy()) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, y_t = concatenate(xs, axis=axis), torch.cat(ts, dim=axis)
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())  # copies: exact
    (y * w).sum().backward()
    (y_t * torch.from_numpy(w)).sum().backward()
    for x, t, a in zip(xs, ts, arrays, strict=True):
        assert x.grad.shape == a.shape
        np.testing.assert_array_equal(x.grad.data, t.grad.numpy())


@given(concatenations())
def test_concatenate_is_numpys_and_the_gradient_of_each_input_is_its_slice_of_the_weights(case):
    arrays, axis, w = case
    xs = [Variable(a.copy()) for a in arrays]
    y = concatenate(xs, axis=axis)
    np.testing.assert_array_equal(y.data, np.concatenate(arrays, axis=axis))
    (y * w).sum().backward()
    pieces = np.split(w, np.cumsum([a.shape[axis] for a in arrays])[:-1], axis=axis)
    for x, piece in zip(xs, pieces, strict=True):
        np.testing.assert_array_equal(x.grad.data, piece)


def test_concatenate_saves_no_tensor_like_torch_cat():
    counts = []
    for m, make in [(tinypytorch, lambda a: Variable(a)), (torch, lambda a: torch.tensor(a, requires_grad=True))]:
        count = [0]
        hooks = (torch.autograd.graph.saved_tensors_hooks if m is torch else saved_tensors_hooks)(
            lambda v: count.__setitem__(0, count[0] + 1) or v, lambda v: v)
        with hooks:
            (m.cat if m is torch else concatenate)([make(np.ones((2, 3))), make(np.zeros((2, 1)))], 1)
        counts.append(count[0])
    assert counts == [0, 0]


def test_concatenate_has_second_derivatives_like_torch():
    a0, b0 = np.array([[0.5, -1.0], [2.0, 0.3]]), np.array([[1.5], [-0.7]])
    a, b = Variable(a0.copy()), Variable(b0.copy())
    y = (concatenate([a, b], axis=1) ** 3).sum()
    ga, gb = autograd.grad(y, [a, b], create_graph=True)
    gga, ggb = autograd.grad((ga * ga).sum() + gb.sum(), [a, b])
    at, bt = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    yt = (torch.cat([at, bt], 1) ** 3).sum()
    gat, gbt = torch.autograd.grad(yt, [at, bt], create_graph=True)
    ggat, ggbt = torch.autograd.grad((gat * gat).sum() + gbt.sum(), [at, bt])
    assert_close_to_torch(ga.data, 3 * a0**2)
    assert_close_to_torch(gga.data, ggat.numpy())
    assert_close_to_torch(ggb.data, ggbt.numpy())
    assert_close_to_torch(ggb.data, 6 * b0)


def test_concatenate_mixes_arrays_and_variables_and_sends_no_gradient_to_constants():
    x = Variable(np.ones((1, 2)))
    y = concatenate([np.zeros((2, 2)), x], axis=0)
    np.testing.assert_array_equal(y.data, [[0, 0], [0, 0], [1, 1]])
    (y * np.arange(6.0).reshape(3, 2)).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [[4.0, 5.0]])


@pytest.mark.parametrize("shapes, axis, message", [
    ([(2, 3), (2, 4)], 0, r"^concatenate: shapes \(2, 3\) and \(2, 4\) differ outside axis 0$"),
    ([(2, 3), (3, 3)], 1, r"^concatenate: shapes \(2, 3\) and \(3, 3\) differ outside axis 1$"),
    ([(2, 3), (2, 3, 1)], 1, r"^concatenate: shapes \(2, 3\) and \(2, 3, 1\) differ outside axis 1$"),
    ([(2, 3), (2, 3)], 2, r"^concatenate: axis 2 is out of range for 2-d inputs$"),
    ([(2, 3), (2, 3)], -3, r"^concatenate: axis -3 is out of range for 2-d inputs$"),
    ([(), ()], 0, r"^concatenate: axis 0 is out of range for 0-d inputs$"),
])
def test_concatenate_of_shapes_that_do_not_fit_raises_value_error_where_torch_raises(shapes, axis, message):
    with pytest.raises(ValueError, match=message):
        concatenate([Variable(np.ones(s)) for s in shapes], axis=axis)
    with pytest.raises((RuntimeError, IndexError)):
        torch.cat([torch.ones(s) for s in shapes], dim=axis)


def test_concatenate_of_nothing_or_with_an_axis_that_is_not_an_int_raises():
    with pytest.raises(ValueError, match="^concatenate: need at least one variable to concatenate$"):
        concatenate([])
    with pytest.raises(TypeError, match=r"^concatenate: axis must be an int, got 1.0$"):
        concatenate([Variable(np.ones((2, 2)))], axis=1.0)
    with pytest.raises(TypeError, match="^concatenate: axis must be an int, got True$"):
        concatenate([Variable(np.ones((2, 2)))], axis=True)


def test_concatenate_of_a_single_variable_is_refused_not_split_into_rows_like_torch():
    with pytest.raises(TypeError, match="concatenate: expected a sequence of Variables or arrays, got a single Variable"):
        tinypytorch.concatenate(Variable(np.ones((2, 3))))
    with pytest.raises(TypeError):
        torch.cat(torch.ones(2, 3))


# ----- BatchNorm1d -------------------------------------------------------------------------------------------

def norm_pair(features, seed, momentum=0.1, eps=1e-5):
    """Our BatchNorm1d and torch's, with the same weight and bias, away from their initial 1 and 0."""
    rng = np.random.default_rng(seed)
    bn, bn_t = BatchNorm1d(features, eps=eps, momentum=momentum), torch.nn.BatchNorm1d(
        features, eps=eps, momentum=momentum, dtype=torch.float64)
    bn.weight.data, bn.bias.data = rng.uniform(0.5, 1.5, features), rng.uniform(-0.5, 0.5, features)
    copied(bn_t, bn.params())
    return bn, bn_t


def norm_pass(norm, x0, w, m):
    """Output and gradients (input, weight, bias) of sum(w * norm(x))."""
    if m is torch:
        x = torch.tensor(x0, requires_grad=True)
        y = norm(x)
        (y * torch.from_numpy(w)).sum().backward()
        return [y.detach().numpy(), x.grad.numpy(), norm.weight.grad.numpy().copy(), norm.bias.grad.numpy().copy()]
    x = Variable(x0.copy())
    y = norm(x)
    (y * w).sum().backward()
    return [y.data, x.grad.data, norm.weight.grad.data.copy(), norm.bias.grad.data.copy()]


@given(n=st.integers(2, 7), features=st.integers(1, 4), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-2, 1.0, 30.0]))
def test_batchnorm_training_values_gradients_and_statistics_equal_torchs(n, features, seed, scale):
    bn, bn_t = norm_pair(features, seed)
    rng = np.random.default_rng(seed + 1)
    for _ in range(3):
        x0, w = rng.normal(1.0, scale, (n, features)), rng.standard_normal((n, features))
        bn.cleargrads()
        bn_t.zero_grad()
        for ours, theirs in zip(norm_pass(bn, x0, w, tinypytorch), norm_pass(bn_t, x0, w, torch), strict=True):
            assert_close_to_torch(ours, theirs)
        assert_close_to_torch(bn.running_mean, bn_t.running_mean.numpy())
        assert_close_to_torch(bn.running_var, bn_t.running_var.numpy())
    assert bn.num_batches_tracked == bn_t.num_batches_tracked.item() == 3


def test_the_output_is_normalised_and_the_running_statistics_follow_the_formula():
    rng = np.random.default_rng(3)
    bn = BatchNorm1d(3, momentum=0.25)
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(4):
        x0 = rng.normal([1.0, -2.0, 5.0], [1.0, 0.5, 3.0], (6, 3))
        y = bn(Variable(x0)).data
        expected = (x0 - x0.mean(axis=0)) / np.sqrt(x0.var(axis=0) + 1e-5)  # weight 1, bias 0
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
        mean = 0.75 * mean + 0.25 * x0.mean(axis=0)
        var = 0.75 * var + 0.25 * x0.var(axis=0, ddof=1)  # the unbiased variance, as PyTorch
        np.testing.assert_allclose(bn.running_mean, mean, rtol=1e-13)
        np.testing.assert_allclose(bn.running_var, var, rtol=1e-13)
    assert bn.num_batches_tracked == 4


@given(n=st.integers(1, 5), features=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_batchnorm_eval_uses_the_running_statistics_like_torch(n, features, seed):
    bn, bn_t = norm_pair(features, seed)
    rng = np.random.default_rng(seed + 1)
    for _ in range(2):  # move the running statistics first
        x0 = rng.normal(2.0, 3.0, (4, features))
        bn(Variable(x0))
        bn_t(torch.tensor(x0))
    bn.eval()
    bn_t.eval()
    bn.cleargrads()
    x0, w = rng.normal(2.0, 3.0, (n, features)), rng.standard_normal((n, features))
    for ours, theirs in zip(norm_pass(bn, x0, w, tinypytorch), norm_pass(bn_t, x0, w, torch), strict=True):
        assert_close_to_torch(ours, theirs)
    y = bn(Variable(x0)).data
    expected = (x0 - bn.running_mean) / np.sqrt(bn.running_var + 1e-5) * bn.weight.data + bn.bias.data
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    assert bn.num_batches_tracked == 2  # evaluation does not count
    bn.train()
    bn(Variable(x0 if n > 1 else np.vstack([x0, x0 + 1])))
    assert bn.num_batches_tracked == 3


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_under_checkpoint_ours_updates_once_torchs_twice_and_ours_equals_torchs_plain_run(use_reentrant):
    x0, w = np.random.default_rng(5).normal(3.0, 2.0, (6, 4)), np.random.default_rng(6).standard_normal((6, 4))
    bn, bn_t = norm_pair(4, 0)
    _, plain_t = norm_pair(4, 0)
    x = Variable(x0.copy())
    y = checkpoint(bn, x, use_reentrant=use_reentrant)
    (y * w).sum().backward()
    x_t = torch.tensor(x0, requires_grad=True)
    y_t = torch.utils.checkpoint.checkpoint(bn_t, x_t, use_reentrant=use_reentrant)
    (y_t * torch.from_numpy(w)).sum().backward()
    plain = norm_pass(plain_t, x0, w, torch)
    assert bn.num_batches_tracked == 1 and bn_t.num_batches_tracked.item() == 2
    assert plain_t.num_batches_tracked.item() == 1
    assert_close_to_torch(bn.running_mean, plain_t.running_mean.numpy())
    assert_close_to_torch(bn.running_var, plain_t.running_var.numpy())
    # torch's moved twice towards the same batch statistics: 1 - 0.9^2 = 0.19 of the way
    np.testing.assert_allclose(bn_t.running_mean.numpy(), 0.19 * x0.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(bn.running_mean, 0.1 * x0.mean(axis=0), rtol=1e-12)
    # the gradients are those of the plain run, in both
    for ours, theirs in zip([y.data, x.grad.data, bn.weight.grad.data, bn.bias.grad.data], plain, strict=True):
        assert_close_to_torch(ours, theirs)
    assert_close_to_torch(x_t.grad.numpy(), plain[1])
    assert not recomputation.is_recomputing()


def test_batchnorm_inside_checkpoint_sequential_counts_each_batch_once():
    rng = np.random.default_rng(0)
    layers = [Linear(4, 4, rng=rng), BatchNorm1d(4), tinypytorch.tanh, Linear(4, 2, rng=rng), BatchNorm1d(2)]
    for step in range(1, 4):
        x = Variable(np.random.default_rng(step).standard_normal((5, 4)))
        y = checkpoint_sequential(layers, 2, x, use_reentrant=True)  # layers 0-1 checkpointed, 2-4 plain
        (y * y).sum().backward()
        assert layers[1].num_batches_tracked == layers[4].num_batches_tracked == step


@pytest.mark.parametrize("shape, message", [
    ((8, 4), r"^BatchNorm1d: expected an input of shape \(N, 3\), got \(8, 4\)$"),
    ((8,), r"^BatchNorm1d: expected an input of shape \(N, 3\), got \(8,\)$"),
    ((8, 3, 2), r"^BatchNorm1d: expected an input of shape \(N, 3\), got \(8, 3, 2\)$"),
])
def test_batchnorm_on_the_wrong_number_of_features_raises_value_error(shape, message):
    bn = BatchNorm1d(3)
    with pytest.raises(ValueError, match=message):
        bn(Variable(np.ones(shape)))
    assert bn.num_batches_tracked == 0
    bn.eval()
    with pytest.raises(ValueError, match=message):
        bn(Variable(np.ones(shape)))


def test_batchnorm_on_one_row_in_training_raises_like_torch_and_works_in_eval():
    bn, bn_t = norm_pair(3, 0)
    with pytest.raises(ValueError, match=r"^BatchNorm1d: expected more than 1 value per feature in training, "
                                         r"got input of shape \(1, 3\)$"):
        bn(Variable(np.ones((1, 3))))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        bn_t(torch.ones((1, 3), dtype=torch.float64))
    assert bn.num_batches_tracked == 0
    bn.eval()
    bn_t.eval()
    assert_close_to_torch(bn(Variable(np.full((1, 3), 2.0))).data, bn_t(torch.full((1, 3), 2.0,
                                                                                   dtype=torch.float64)).detach())


@pytest.mark.parametrize("size", [0, -2, 2.5, True])
def test_batchnorm_needs_a_positive_int_number_of_features(size):
    with pytest.raises(ValueError, match="^BatchNorm1d: num_features must be a positive int"):
        BatchNorm1d(size)


def test_batchnorm_momentum_none_is_a_cumulative_average_like_torch():
    rng = np.random.default_rng(3)
    ours, theirs = BatchNorm1d(3, momentum=None), torch.nn.BatchNorm1d(3, momentum=None).double()
    for _ in range(4):
        x = rng.standard_normal((5, 3))
        ours(Variable(x))
        theirs(torch.tensor(x))
    np.testing.assert_allclose(ours.running_mean, theirs.running_mean.numpy(), rtol=1e-13)
    np.testing.assert_allclose(ours.running_var, theirs.running_var.numpy(), rtol=1e-13)
    assert ours.num_batches_tracked == theirs.num_batches_tracked.item() == 4


@pytest.mark.parametrize("kwargs, message", [({"momentum": 1.5}, "momentum must be None"),
                                              ({"momentum": -0.1}, "momentum must be None"),
                                              ({"eps": 0.0}, "eps must be a positive number"),
                                              ({"eps": -1e-5}, "eps must be a positive number")])
def test_batchnorm_refuses_a_momentum_outside_0_1_and_an_eps_that_is_not_positive(kwargs, message):
    with pytest.raises(ValueError, match=f"^BatchNorm1d: {message}"):
        BatchNorm1d(3, **kwargs)


# ----- DenseNet's memory-efficient bottleneck -----------------------------------------------------------------

class DenseLayer(Layer):
    """torchvision's _DenseLayer with linear layers for the 1x1 and 3x3 convolutions."""

    def __init__(self, in_features, growth, bn_size, memory_efficient, use_reentrant, rng):
        super().__init__()
        self.norm1 = BatchNorm1d(in_features)
        self.linear1 = Linear(in_features, bn_size * growth, bias=False, rng=rng)
        self.norm2 = BatchNorm1d(bn_size * growth)
        self.linear2 = Linear(bn_size * growth, growth, bias=False, rng=rng)
        self.memory_efficient, self.use_reentrant = memory_efficient, use_reentrant
        for norm in (self.norm1, self.norm2):
            norm.weight.data = rng.uniform(0.5, 1.5, norm.num_features)
            norm.bias.data = rng.uniform(-0.5, 0.5, norm.num_features)

    def bottleneck(self, *features):
        return self.linear1(F.relu(self.norm1(concatenate(features, axis=1))))

    def forward(self, features):
        if self.memory_efficient and any(f.requires_grad for f in features):
            out = checkpoint(self.bottleneck, *features, use_reentrant=self.use_reentrant)
        else:
            out = self.bottleneck(*features)
        return self.linear2(F.relu(self.norm2(out)))


class DenseBlock(Layer):
    def __init__(self, num_layers, in_features, growth, bn_size, memory_efficient, use_reentrant=False, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.layers = []
        for i in range(num_layers):
            layer = DenseLayer(in_features + i * growth, growth, bn_size, memory_efficient, use_reentrant, rng)
            setattr(self, f"denselayer{i + 1}", layer)
            self.layers.append(layer)

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return concatenate(features, axis=1)


class TorchDenseLayer(torch.nn.Module):
    def __init__(self, layer, memory_efficient, use_reentrant):
        super().__init__()
        i, h, g = layer.norm1.num_features, layer.norm2.num_features, layer.linear2.weight.shape[0]
        d = torch.float64
        self.norm1 = copied(torch.nn.BatchNorm1d(i, dtype=d), layer.norm1.params())
        self.relu1 = torch.nn.ReLU()
        self.conv1 = copied(torch.nn.Linear(i, h, bias=False, dtype=d), layer.linear1.params())
        self.norm2 = copied(torch.nn.BatchNorm1d(h, dtype=d), layer.norm2.params())
        self.relu2 = torch.nn.ReLU()
        self.conv2 = copied(torch.nn.Linear(h, g, bias=False, dtype=d), layer.linear2.params())
        self.memory_efficient, self.use_reentrant = memory_efficient, use_reentrant

    def bn_function(self, inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, features):
        if self.memory_efficient and any(f.requires_grad for f in features):
            return self.conv2(self.relu2(self.norm2(torch.utils.checkpoint.checkpoint(
                lambda *inputs: self.bn_function(inputs), *features, use_reentrant=self.use_reentrant))))
        return self.conv2(self.relu2(self.norm2(self.bn_function(features))))


class TorchDenseBlock(torch.nn.Module):
    def __init__(self, block, memory_efficient, use_reentrant=False):
        super().__init__()
        self.layers = torch.nn.ModuleList([TorchDenseLayer(layer, memory_efficient, use_reentrant)
                                           for layer in block.layers])

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


IN, GROWTH, BN_SIZE = 5, 3, 3  # concatenations 5, 8, 11, 14 wide; bottleneck 9; output 5 + 3 L


def block_case(num_layers, seed):
    rng = np.random.default_rng(seed + 100)
    return rng.standard_normal((6, IN)), rng.standard_normal((6, IN + num_layers * GROWTH))


@given(num_layers=st.integers(1, 3), seed=st.integers(0, 2**16), memory_efficient=st.booleans(),
       use_reentrant=st.booleans())
def test_the_dense_block_gives_torchs_gradients_and_statistics(num_layers, seed, memory_efficient, use_reentrant):
    x0, w = block_case(num_layers, seed)
    block = DenseBlock(num_layers, IN, GROWTH, BN_SIZE, memory_efficient, use_reentrant, seed)
    block_t = TorchDenseBlock(block, memory_efficient, use_reentrant)
    plain_t = TorchDenseBlock(block, False)
    x = Variable(x0.copy())
    y = block(x)
    (y * w).sum().backward()
    outputs = []
    for twin in (block_t, plain_t):
        x_t = torch.tensor(x0, requires_grad=True)
        y_t = twin(x_t)
        (y_t * torch.from_numpy(w)).sum().backward()
        outputs.append((y_t.detach().numpy(), x_t.grad.numpy()))
    assert_close_to_torch(y.data, outputs[0][0])
    assert_close_to_torch(x.grad.data, outputs[0][1])
    for p, p_t in zip(block.params(), block_t.parameters(), strict=True):
        assert p.shape == tuple(p_t.shape)
        assert_close_to_torch(p.grad.data, p_t.grad.numpy())
    for layer, t, t_plain in zip(block.layers, block_t.layers, plain_t.layers, strict=True):
        assert layer.norm1.num_batches_tracked == layer.norm2.num_batches_tracked == 1
        assert t.norm1.num_batches_tracked.item() == (2 if memory_efficient else 1)
        assert t.norm2.num_batches_tracked.item() == 1
        for ours, theirs in [(layer.norm1, t_plain.norm1), (layer.norm2, t_plain.norm2)]:
            assert_close_to_torch(ours.running_mean, theirs.running_mean.numpy())
            assert_close_to_torch(ours.running_var, theirs.running_var.numpy())


def block_saved_widths(num_layers, memory_efficient):
    """The widths (second dimension) of the distinct non-parameter 2-d arrays saved, and their total bytes."""
    x0, w = block_case(num_layers, 0)
    block = DenseBlock(num_layers, IN, GROWTH, BN_SIZE, memory_efficient)
    with counting_saved() as (_, arrays):
        loss = (block(Variable(x0)) * w).sum()
    widths = sorted(a.shape[1] for a in arrays.values() if a.ndim == 2)
    total = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    loss.backward()
    return widths, total


@pytest.mark.parametrize("num_layers", [2, 4, 6])
def test_the_efficient_block_keeps_no_array_as_wide_as_a_concatenation(num_layers):
    concatenations = {IN + i * GROWTH for i in range(1, num_layers)}  # a layer's input width, the first excepted
    plain, plain_bytes = block_saved_widths(num_layers, False)
    efficient, efficient_bytes = block_saved_widths(num_layers, True)
    assert concatenations <= set(plain)
    assert not concatenations & set(efficient)
    # what the efficient block keeps: the checkpoints' inputs (x and each layer's output but the last), and the
    # second half of each layer, bottleneck-wide (BN_SIZE * GROWTH), as in the plain block
    assert efficient.count(IN) == 1 and efficient.count(GROWTH) == num_layers - 1
    bottleneck = BN_SIZE * GROWTH
    assert bottleneck not in concatenations | {IN, GROWTH}
    assert efficient.count(bottleneck) == plain.count(bottleneck) > 0
    assert set(efficient) == {IN, GROWTH, bottleneck, IN + num_layers * GROWTH}  # the last: the loss's weights
    assert efficient_bytes < plain_bytes


def test_the_plain_block_grows_quadratically_and_the_efficient_one_linearly():
    plain = [block_saved_widths(n, False)[1] for n in (4, 8, 16)]
    efficient = [block_saved_widths(n, True)[1] for n in (4, 8, 16)]
    # second differences: zero for a linear function of n (n = 4, 8, 16 are not evenly spaced: use slopes)
    slopes_plain = [(plain[1] - plain[0]) / 4, (plain[2] - plain[1]) / 8]
    slopes_efficient = [(efficient[1] - efficient[0]) / 4, (efficient[2] - efficient[1]) / 8]
    assert slopes_efficient[0] == slopes_efficient[1]  # linear: each layer adds the same bytes
    assert slopes_plain[1] > 1.4 * slopes_plain[0]  # quadratic: later layers add more


def test_the_bottleneck_is_checkpointed_only_when_an_input_needs_a_gradient_as_in_torchvision():
    x0, w = block_case(2, 0)
    block = DenseBlock(2, IN, GROWTH, BN_SIZE, memory_efficient=True)
    log = []
    for layer in block.layers:
        layer.bottleneck = lambda *fs, run=layer.bottleneck: log.append(recomputation.is_recomputing()) or run(*fs)
    (block(Variable(x0)) * w).sum().backward()
    assert log == [False, False, True, True]  # each layer runs, then is recomputed in backward
    log.clear()
    (block(Variable(x0, requires_grad=False)) * w).sum().backward()
    assert log == [False, False, True]  # the first layer's only input, the batch, needs no gradient
    log.clear()
    with tinypytorch.no_grad():
        block(Variable(x0))
    assert log == [False, False]  # nothing is recorded, nothing recomputed
