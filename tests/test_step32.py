"""Step 32: Parameter, Layer, Linear, MLP, the optimizers (SGD; Adam, which the page's second exercise writes),
activations and the MSE loss, against PyTorch (float64)."""
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import tinypytorch
import tinypytorch.functions as F
from reference import floats, train_twins
from steploader import load_step
from tinypytorch import Parameter, Variable
from tinypytorch.layers import MLP, Layer, Linear
from tinypytorch.optimizers import SGD, Adam
from twins import torch_twin

pytestmark = [pytest.mark.step32, pytest.mark.torch]
step = load_step(32)

sides = st.integers(1, 5)
seeds = st.integers(0, 2**32 - 1)


def uniform(seed, shape, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


# ----- activations and the loss ----------------------------------------------------------------

@given(arrays(np.float64, array_shapes(min_dims=0, max_dims=3), elements=floats(-50.0, 50.0)), seeds)
def test_sigmoid_and_relu_values_and_grads_equal_torch(data, seed):
    for ours, theirs in [(F.sigmoid, torch.sigmoid), (F.relu, torch.relu)]:
        x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
        w = uniform(seed, data.shape)
        y = ours(x)
        (y * w).sum().backward()
        yt = theirs(t)
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-14, atol=1e-300)
        # y (1 - y) cancels where sigmoid is within an ulp of 1, in torch as here: allow that rounding
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_sigmoid_of_huge_inputs_is_exact_and_silent():
    x = np.array([-1e308, -1000.0, -745.0, -40.0, 40.0, 745.0, 1000.0, 1e308])
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        y = F.sigmoid(Variable(x))
    # at -745 the true value e^-745 is the smallest subnormal, 5e-324; torch rounds it to 0
    np.testing.assert_allclose(y.data, torch.sigmoid(torch.tensor(x)).numpy(), rtol=1e-15, atol=1e-323)


def test_sigmoid_keeps_full_precision_for_very_negative_inputs():
    x = np.array([-40.0, -300.0])
    # sigmoid(x) = e^x / (1 + e^x), and e^x / (1 + e^x) = e^x (1 - e^x + ...) = e^x to 17 digits here
    np.testing.assert_allclose(F.sigmoid(Variable(x)).data, np.exp(x), rtol=1e-15)


def test_relu_gradient_at_zero_is_zero_as_in_torch():
    x, t = Variable(np.array([-1.0, 0.0, 2.0])), torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    F.relu(x).sum().backward()
    torch.relu(t).sum().backward()
    np.testing.assert_array_equal(x.grad, t.grad.numpy())
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 1.0])


@given(shape=array_shapes(min_dims=0, max_dims=3), seed=seeds)
def test_mean_squared_error_and_its_grads_equal_torch_mse_loss(shape, seed):
    a, b = uniform(seed, shape), uniform(seed + 1, shape)
    x0, x1 = Variable(a.copy()), Variable(b.copy())
    loss = F.mean_squared_error(x0, x1)
    loss.backward()
    t0, t1 = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    loss_t = torch.nn.functional.mse_loss(t0, t1)
    loss_t.backward()
    assert loss.shape == ()
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
    np.testing.assert_allclose(x0.grad, t0.grad.numpy(), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(x1.grad, t1.grad.numpy(), rtol=1e-12, atol=1e-16)


def test_mean_squared_error_of_different_shapes_raises_value_error():
    with pytest.raises(ValueError, match=re.escape("mean_squared_error: shapes (3, 1) and (3,) differ")):
        F.mean_squared_error(np.zeros((3, 1)), np.zeros(3))


@given(seed=seeds)
def test_second_derivatives_through_sigmoid_relu_and_mse_equal_torch(seed):
    a, b = uniform(seed, (4, 3), -2.0, 2.0), uniform(seed + 1, (4, 3))
    x = Variable(a.copy())
    F.mean_squared_error(F.sigmoid(x) * F.relu(x) + F.sigmoid(x * 3.0), b).backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    (gx * gx).sum().backward()
    t = torch.tensor(a, requires_grad=True)
    loss = torch.nn.functional.mse_loss(torch.sigmoid(t) * torch.relu(t) + torch.sigmoid(t * 3.0), torch.tensor(b))
    (gt,) = torch.autograd.grad(loss, t, create_graph=True)
    (gt * gt).sum().backward()
    np.testing.assert_allclose(gx.data, gt.detach().numpy(), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-10, atol=1e-14)


# ----- Parameter and Layer -----------------------------------------------------------------------

def test_parameter_is_an_exported_variable_subclass():
    p = tinypytorch.Parameter(np.ones(2), name="w")
    assert isinstance(p, Variable) and p.name == "w" and tinypytorch.Parameter is Parameter
    (p * 3.0).sum().backward()
    np.testing.assert_array_equal(p.grad, [3.0, 3.0])


class Block(Layer):
    def __init__(self, shared=None):
        super().__init__()
        self.first = Parameter(np.zeros(1), name="first")
        self.plain = Variable(np.zeros(1))  # a Variable, not a Parameter: not registered
        self.inner = Linear(2, 3, rng=np.random.default_rng(0))
        self.numbers = [Parameter(np.zeros(1))]  # a list is not searched, as in PyTorch
        self.last = Parameter(np.zeros(2), name="last") if shared is None else shared


def test_layer_registers_parameters_and_sub_layers_in_assignment_order():
    block = Block()
    # what a layer registers shows in params() and modules(): own parameters in assignment order, then the
    # sub-layers' (as torch); a plain Variable and a list of parameters are not among them
    assert [p.name for p in block.params()] == ["first", "last", "weight", "bias"]
    assert [type(m).__name__ for m in block.modules()] == ["Block", "Linear"]
    assert not any(p is block.plain or p is block.numbers[0] for p in block.params())


def test_params_order_matches_torch_module_parameters_order():
    class TorchBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Parameter(torch.zeros(1))
            self.inner = torch.nn.Linear(2, 3)
            self.last = torch.nn.Parameter(torch.zeros(2))

    ours = [tuple(p.shape) for p in Block().params()]
    assert ours == [tuple(p.shape) for p in TorchBlock().parameters()]


def test_replacing_a_parameter_by_something_else_unregisters_it():
    block = Block()
    block.last = None
    block.inner = "gone"
    assert [p.name for p in block.params()] == ["first"] and list(block.modules()) == [block]
    block.last = Parameter(np.ones(1), name="again")
    assert [p.name for p in block.params()] == ["first", "again"]


def test_a_shared_parameter_is_listed_once():
    block = Block()
    outer = Block(shared=block.first)
    outer.sub = block
    ids = [id(p) for p in outer.params()]
    # outer.first, outer.last (= block.first), outer.inner's 2, block.last, block.inner's 2; block.first not again
    assert len(ids) == len(set(ids)) == 7
    assert ids.count(id(block.first)) == 1


def test_cleargrads_and_zero_grad_clear_every_parameter():
    model = MLP((2, 3, 1), rng=np.random.default_rng(0))
    model(np.ones((4, 2))).sum().backward()
    assert all(p.grad is not None for p in model.params())
    model.cleargrads()
    assert all(p.grad is None for p in model.params())
    model(np.ones((4, 2))).sum().backward()
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_assigning_a_parameter_before_layer_init_raises_attribute_error():
    class Forgetful(Layer):
        def __init__(self):
            self.w = Parameter(np.zeros(2))

    with pytest.raises(AttributeError, match=re.escape("Forgetful: call super().__init__() before assigning 'w'")):
        Forgetful()


def test_a_layer_without_forward_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="^Layer.forward is not implemented$"):
        Layer()(np.zeros(1))


# ----- Linear and MLP -----------------------------------------------------------------------------

@given(n=sides, n_in=sides, n_out=sides, bias=st.booleans(), seed=seeds)
def test_linear_layer_equals_torch_nn_linear_with_the_same_weights(n, n_in, n_out, bias, seed):
    layer = Linear(n_in, n_out, bias=bias, rng=np.random.default_rng(seed))
    twin = torch.nn.Linear(n_in, n_out, bias=bias).double()
    with torch.no_grad():
        for p, pt in zip(layer.params(), twin.parameters(), strict=True):
            assert p.shape == tuple(pt.shape)
            pt.copy_(torch.tensor(p.data))
    data, w = uniform(seed, (n, n_in)), uniform(seed + 1, (n, n_out))
    (layer(data) * w).sum().backward()
    (twin(torch.tensor(data)) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(layer(data).data, twin(torch.tensor(data)).detach().numpy(), rtol=1e-12)
    for p, pt in zip(layer.params(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.grad, pt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_linear_initial_weights_are_uniform_within_one_over_sqrt_in_size_like_torch():
    layer = Linear(16, 200, rng=np.random.default_rng(0))
    k = 1 / 4.0
    for p in layer.params():
        assert p.data.min() >= -k and p.data.max() <= k
        assert p.data.max() - p.data.min() > 1.9 * k  # spread over the whole interval
    assert layer.weight.shape == (200, 16) and layer.bias.shape == (200,)
    again = Linear(16, 200, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(again.weight.data, layer.weight.data)


def test_linear_without_bias_has_one_parameter():
    layer = Linear(3, 2, bias=False, rng=np.random.default_rng(0))
    assert layer.bias is None and [p.name for p in layer.params()] == ["weight"]


@pytest.mark.parametrize("sizes, message", [((0, 2), "Linear: in_size must be a positive int, got 0"),
                                            ((2, 1.5), "Linear: out_size must be a positive int, got 1.5"),
                                            ((True, 2), "Linear: in_size must be a positive int, got True")])
def test_linear_with_bad_sizes_raises_value_error(sizes, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        Linear(*sizes)


def test_linear_with_a_wrong_input_size_names_both_shapes():
    with pytest.raises(ValueError, match=re.escape("linear: input of shape (4, 3) does not fit weight of shape (2, 5)")):
        Linear(5, 2, rng=np.random.default_rng(0))(np.ones((4, 3)))


@given(sizes=st.lists(sides, min_size=2, max_size=4), relu=st.booleans(), seed=seeds)
def test_mlp_loss_and_parameter_grads_equal_the_same_torch_model(sizes, relu, seed):
    model = MLP(sizes, activation=F.relu if relu else F.sigmoid, rng=np.random.default_rng(seed))
    twin = torch_twin(model, torch.nn.ReLU if relu else torch.nn.Sigmoid)
    x, y = uniform(seed, (6, sizes[0])), uniform(seed + 1, (6, sizes[-1]))
    loss = F.mean_squared_error(model(x), y)
    loss.backward()
    loss_t = torch.nn.functional.mse_loss(twin(torch.tensor(x)), torch.tensor(y))
    loss_t.backward()
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
    for p, pt in zip(model.params(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.grad, pt.grad.numpy(), rtol=1e-11, atol=1e-15)


def test_mlp_needs_two_sizes():
    with pytest.raises(ValueError, match=re.escape("MLP: sizes needs an input and an output size, got (3,)")):
        MLP((3,))


# ----- optimizers ---------------------------------------------------------------------------------

def run_twins(our_class, torch_class, kwargs, steps, seed, sizes=(2, 4, 1)):
    model = MLP(sizes, rng=np.random.default_rng(seed))
    twin = torch_twin(model)
    optimizer, optimizer_t = our_class(model.params(), **kwargs), torch_class(twin.parameters(), **kwargs)
    train_twins(model, twin, optimizer, optimizer_t, uniform(seed, (8, sizes[0])), uniform(seed + 1, (8, sizes[-1])),
                steps)
    return model, twin


@given(lr=floats(0.001, 1.0), steps=st.integers(1, 5), seed=seeds)
def test_sgd_steps_equal_torch_optim_sgd(lr, steps, seed):
    model, twin = run_twins(SGD, torch.optim.SGD, {"lr": lr}, steps, seed)
    for p, pt in zip(model.params(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-11, atol=1e-14)


@given(lr=floats(0.0001, 0.1), beta1=floats(0.0, 0.99), beta2=floats(0.5, 0.9999),
       eps=st.sampled_from([1e-8, 1e-6, 1e-3]), steps=st.integers(1, 6), seed=seeds)
def test_adam_steps_equal_torch_optim_adam(lr, beta1, beta2, eps, steps, seed):
    kwargs = {"lr": lr, "betas": (beta1, beta2), "eps": eps}
    model, twin = run_twins(Adam, torch.optim.Adam, kwargs, steps, seed)
    for p, pt in zip(model.params(), twin.parameters(), strict=True):
        np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-10, atol=1e-13)


def test_first_adam_step_moves_each_element_by_lr_against_the_gradients_sign():
    g = np.array([1e-3, -5.0, 1e3])
    p = Parameter(np.ones(3))
    (p * g).sum().backward()
    Adam([p], lr=0.1).step()
    # at t = 1, m_hat = g and sqrt(v_hat) = |g|: the step is lr * g / (|g| + eps)
    np.testing.assert_allclose(p.data, 1.0 - 0.1 * g / (np.abs(g) + 1e-8), rtol=1e-14)
    np.testing.assert_allclose(p.data, [0.9, 1.1, 0.9], rtol=2e-6)


def test_adam_skips_a_parameter_without_grad_and_keeps_its_step_count_like_torch():
    a0, b0 = np.array([1.0, -2.0]), np.array([0.5])
    a, b = Parameter(a0.copy()), Parameter(b0.copy())
    at, bt = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    ours, theirs = Adam([a, b], lr=0.1), torch.optim.Adam([at, bt], lr=0.1)
    for use_b in (False, False, True, True):
        ours.zero_grad()
        theirs.zero_grad()
        ((a * a).sum() + ((b * 3.0).sum() if use_b else 0.0)).backward()
        ((at * at).sum() + ((bt * 3.0).sum() if use_b else 0.0)).backward()
        ours.step()
        theirs.step()
    np.testing.assert_allclose(a.data, at.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.data, bt.detach().numpy(), rtol=1e-12)  # b's t went 1, 2, not 3, 4
    assert ours.state[b]["step"] == 2


def test_optimizers_update_arrays_in_place_and_record_no_graph():
    p = Parameter(np.array([1.0, 2.0]))
    data = p.data
    (p * p).sum().backward()
    SGD([p], lr=0.5).step()
    assert p.data is data and p.creator is None
    np.testing.assert_array_equal(p.data, [0.0, 0.0])  # 1 - 0.5 * 2, 2 - 0.5 * 4


def test_optimizer_takes_a_generator_once():
    model = MLP((1, 2, 1), rng=np.random.default_rng(0))
    optimizer = SGD(model.params(), lr=0.1)
    assert len(optimizer.params) == 4


@pytest.mark.parametrize("make, message", [
    (lambda: SGD([], lr=0.1), "optimizer got an empty parameter list"),
    (lambda: SGD([Parameter(np.zeros(1))], lr=-1.0), "Invalid learning rate: -1.0"),
    (lambda: Adam([Parameter(np.zeros(1))], betas=(0.9, 1.0)), "Invalid beta parameter at index 1: 1.0"),
    (lambda: Adam([Parameter(np.zeros(1))], betas=(0.9,)), "Adam: betas must be a pair (beta1, beta2), got (0.9,)"),
    (lambda: Adam([Parameter(np.zeros(1))], eps=-1e-8), "Invalid epsilon value: -1e-08"),
])
def test_optimizers_reject_bad_arguments_with_value_error(make, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        make()


# ----- the step's training run ------------------------------------------------------------------

def test_the_steps_training_reaches_the_noise_level_after_a_plateau():
    noise = np.mean((np.sin(2 * np.pi * step.x) - step.y) ** 2)
    assert 0.008 < noise < 0.012  # sigma = 0.1
    losses = np.array(step.sgd_losses)
    assert len(losses) == 10_000 and losses[-1] < 2 * noise
    assert np.all(np.diff(losses) <= 0)  # SGD with this small a step only goes down, as torch's run does
    line = np.hstack([step.x, np.ones_like(step.x)])
    best_line = np.mean((line @ np.linalg.lstsq(line, step.y, rcond=None)[0] - step.y) ** 2)
    # the plateau: from step 503 to step 4,000 the loss stays within 10% of the best straight line's
    assert np.all(np.abs(losses[500:4000] / best_line - 1) < 0.1)
    assert step.sgd_below == next(i for i, v in enumerate(losses) if v < 0.05) > 4000


def test_the_steps_fitted_curve_follows_the_sine():
    grid = np.linspace(0.05, 0.95, 50).reshape(-1, 1)
    with tinypytorch.no_grad():
        prediction = step.sgd_model(grid).data
    assert np.abs(prediction - np.sin(2 * np.pi * grid)).max() < 0.15


@pytest.mark.slow
def test_the_steps_whole_training_run_equals_torchs():
    """The step prints SGD's loss after 10,000 steps to four decimals and the first step below 0.05: torch's run
    of the same network, from the same weights, agrees at every step to 10 digits."""
    model = MLP((1, 10, 1), rng=np.random.default_rng(1))  # the step's initial weights
    twin = torch_twin(model)
    optimizer_t = torch.optim.SGD(twin.parameters(), lr=0.15)
    xt, yt = torch.tensor(step.x), torch.tensor(step.y)
    losses_t = []
    for _ in range(10_000):
        loss = torch.nn.functional.mse_loss(twin(xt), yt)
        optimizer_t.zero_grad()
        loss.backward()
        optimizer_t.step()
        losses_t.append(loss.item())
    np.testing.assert_allclose(step.sgd_losses, losses_t, rtol=1e-10)
    assert step.sgd_below == next(i for i, v in enumerate(losses_t) if v < 0.05)
