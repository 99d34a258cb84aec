"""Step 49: custom Functions written PyTorch's way (tinypytorch.autograd.Function), each behaviour against the same
class written as a torch.autograd.Function: gradients, ctx (saved tensors, needs_input_grad, attributes),
materialized gradients, non-differentiable outputs, once_differentiable, higher order, hooks and version checks,
and PyTorch's errors for what backward returns."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import floats, torch_function_of_x
from tinypytorch import Variable, autograd
from tinypytorch.autograd import Function, once_differentiable
from tinypytorch.autograd.graph import saved_tensors_hooks

pytestmark = [pytest.mark.step49, pytest.mark.torch]


def twins(body_ours, body_torch):
    """A tinypytorch Function and a torch.autograd.Function from the same forward and backward bodies.

    Each body is (forward, backward) written against a module `m` (tinypytorch or torch) and a `data` function
    that reads a Variable's array or a tensor's values."""
    def make(base, m, data, body):
        forward, backward = body
        return type("Twin", (base,), {"forward": staticmethod(lambda ctx, *a: forward(ctx, m, data, *a)),
                                      "backward": staticmethod(lambda ctx, *g: backward(ctx, m, data, *g))})
    return (make(Function, tinypytorch, lambda v: v.data, body_ours),
            make(torch.autograd.Function, torch, lambda t: t.detach().numpy(), body_torch))


def exp_forward(ctx, m, data, x):
    y = m.exp(x)
    ctx.save_for_backward(y)
    return y


def exp_backward(ctx, m, data, g):
    (y,) = ctx.saved_tensors
    return g * y


EXP = (exp_forward, exp_backward)
OursExp, TorchExp = twins(EXP, EXP)


def leaf_pair(values):
    return Variable(np.array(values, dtype=np.float64)), torch.tensor(values, dtype=torch.float64, requires_grad=True)


# ----- gradients, ctx and the node -------------------------------------------------------------------------------

@given(arrays(np.float64, st.integers(1, 6), elements=floats(-3, 3)))
def test_a_custom_exp_gives_torchs_values_first_and_second_derivatives(values):
    x, xt = leaf_pair(values)
    y, yt = OursExp.apply(x), TorchExp.apply(xt)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    (g,) = autograd.grad((y * y).sum(), [x], create_graph=True)
    (gt,) = torch.autograd.grad((yt * yt).sum(), [xt], create_graph=True)
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-14)
    (gg,) = autograd.grad((g * g).sum(), [x])
    (ggt,) = torch.autograd.grad((gt * gt).sum(), [xt])
    np.testing.assert_allclose(gg.data, ggt.numpy(), rtol=1e-13)


def test_the_node_is_named_after_the_class_and_is_a_package_function_with_one_edge_per_variable():
    class Scale(Function):
        @staticmethod
        def forward(ctx, x, factor, w):
            return x * factor * w

        @staticmethod
        def backward(ctx, g):
            return g, None, g

    x, w = Variable(np.ones(2)), Variable(np.ones(2))
    y = Scale.apply(x, 3.0, w)
    assert type(y.creator).__name__ == "ScaleBackward"
    assert isinstance(y.creator, tinypytorch.Function)
    assert [node for node, _ in y.creator.edges] == [x, w]

    class TorchScale(torch.autograd.Function):
        forward = staticmethod(lambda ctx, x: x * 2.0)
        backward = staticmethod(lambda ctx, g: g)

    assert type(TorchScale.apply(torch.ones(1, requires_grad=True)).grad_fn).__name__ == "TorchScaleBackward"


@pytest.mark.parametrize("requires", [(True, True), (True, False), (False, True)])
def test_needs_input_grad_is_per_argument_and_false_for_non_variables_like_torch(requires):
    seen = {}

    def body(name):
        def forward(ctx, m, data, x, k, w):
            seen[name] = ctx.needs_input_grad
            return x * w * k

        def backward(ctx, m, data, g):
            return g, None, g
        return forward, backward

    Ours, Torch = twins(body("ours"), body("torch"))
    Ours.apply(Variable(np.ones(2), requires_grad=requires[0]), 2.0, Variable(np.ones(2), requires_grad=requires[1]))
    Torch.apply(torch.ones(2, dtype=torch.float64, requires_grad=requires[0]), 2.0,
                torch.ones(2, dtype=torch.float64, requires_grad=requires[1]))
    assert seen["ours"] == seen["torch"] == (requires[0], False, requires[1])


def test_needs_input_grad_is_all_false_under_no_grad_like_torch():
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(ctx.needs_input_grad)
            return x * 1.0

    with tinypytorch.no_grad():
        y = Probe.apply(Variable(np.ones(2)))
    assert seen == [(False,)] and not y.requires_grad and y.creator is None


def test_forward_runs_without_recording_and_only_the_node_is_in_the_graph():
    class TwoOps(Function):
        @staticmethod
        def forward(ctx, x):
            inner = tinypytorch.sin(x) * 2.0
            assert inner.creator is None  # under no_grad inside forward
            return inner

        @staticmethod
        def backward(ctx, g):
            return g

    y = TwoOps.apply(Variable(np.ones(2)))
    assert type(y.creator).__name__ == "TwoOpsBackward" and y.creator.edges[0][0].creator is None


def test_attributes_set_on_ctx_in_forward_are_there_in_backward():
    class Scaled(Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, g):
            return g * ctx.factor, None

    x = Variable(np.array([1.0, 2.0]))
    Scaled.apply(x, 5.0).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [5.0, 5.0])


# ----- unused outputs, materialize_grads, non-differentiable outputs ----------------------------------------------

def two_outputs(materialize, received):
    def forward(ctx, m, data, x):
        ctx.set_materialize_grads(materialize)
        return x * 2.0, x * 3.0

    def backward(ctx, m, data, g1, g2):
        received.append([None if g is None else np.array(data(g)) for g in (g1, g2)])
        total = 0.0
        if g1 is not None:
            total = total + g1 * 2.0
        if g2 is not None:
            total = total + g2 * 3.0
        return total
    return forward, backward


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("used", [0, 1])
def test_an_unused_output_gets_zeros_or_none_as_in_torch(materialize, used):
    ours_received, torch_received = [], []
    Ours, _ = twins(two_outputs(materialize, ours_received), two_outputs(materialize, []))
    _, Torch = twins(two_outputs(materialize, []), two_outputs(materialize, torch_received))
    x, xt = leaf_pair([1.0, 2.0])
    Ours.apply(x)[used].sum().backward()
    Torch.apply(xt)[used].sum().backward()
    assert [g is None for g in ours_received[0]] == [g is None for g in torch_received[0]]
    for g, gt in zip(ours_received[0], torch_received[0]):
        if g is not None:
            np.testing.assert_array_equal(g, gt)
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())


def doubling_in_a_tuple(base):
    """2x returned as a tuple of one output, a custom Function of `base` (either framework's autograd.Function)."""
    class One(base):
        @staticmethod
        def forward(ctx, x):
            return (x * 2.0,)

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    return One


def test_a_tuple_returned_by_forward_stays_a_tuple_even_of_one_output():
    One, TorchOne = doubling_in_a_tuple(Function), doubling_in_a_tuple(torch.autograd.Function)
    assert isinstance(One.apply(Variable(np.ones(2))), tuple)
    assert isinstance(TorchOne.apply(torch.ones(2, requires_grad=True)), tuple)


def test_a_non_differentiable_output_does_not_require_grad_and_backward_gets_zeros_for_it_like_torch():
    received = {}

    class ArgMax(Function):
        @staticmethod
        def forward(ctx, x):
            index = Variable(x.data.argmax(keepdims=True))
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(x)
            return x.max(keepdims=True), index

        @staticmethod
        def backward(ctx, g_value, g_index):
            received["ours"] = g_index.data.copy()
            (x,) = ctx.saved_tensors
            return Variable((x.data == x.data.max()) * g_value.data)

    class TorchArgMax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            index = x.argmax(keepdim=True)
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(x)
            return x.max().reshape(1), index

        @staticmethod
        def backward(ctx, g_value, g_index):
            received["torch"] = g_index.numpy().copy()
            (x,) = ctx.saved_tensors
            return (x == x.max()) * g_value

    x, xt = leaf_pair([1.0, 3.0, 2.0])
    (value, index), (value_t, index_t) = ArgMax.apply(x), TorchArgMax.apply(xt)
    assert not index.requires_grad and not index_t.requires_grad
    assert index.creator is None and index_t.grad_fn is None
    assert value.requires_grad and value_t.requires_grad
    value.sum().backward()
    value_t.sum().backward()
    np.testing.assert_array_equal(received["ours"], received["torch"])
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())


# ----- what backward returns ---------------------------------------------------------------------------------------

def returning(value, base=Function):
    """y = x * k as a custom Function (tinypytorch's, or torch's with base=torch.autograd.Function) whose
    backward returns value(g)."""
    class Returns(base):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return value(g)
    return Returns


def torch_returning(value):
    return returning(value, torch.autograd.Function)


@pytest.mark.parametrize("value, fragment", [
    (lambda g: g, "returned an incorrect number of gradients (expected 2, got 1)"),
    (lambda g: (g, None, g), "returned an incorrect number of gradients (expected 2, got 3)"),
    (lambda g: (g.sum(), None), "returned an invalid gradient at index 0 - got [] but expected shape compatible "
                                "with [3]"),
    (lambda g: (g, g), "returned a gradient different than None at position 2, but the corresponding forward "
                       "input was not a"),
])
def test_a_wrong_return_from_backward_raises_torchs_error(value, fragment):
    with pytest.raises(RuntimeError) as ours:
        returning(value).apply(Variable(np.ones(3)), 2.0).sum().backward()
    with pytest.raises(RuntimeError) as theirs:
        torch_returning(value).apply(torch.ones(3, requires_grad=True), 2.0).sum().backward()
    assert fragment in str(ours.value)
    assert fragment.replace("Variable", "Tensor") in str(theirs.value)
    assert str(ours.value).split(" returned ")[0].split()[-1] == "ReturnsBackward"


def test_extra_none_gradients_are_allowed_like_torch():
    x = Variable(np.ones(3))
    returning(lambda g: (g, None, None)).apply(x, 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.ones(3))


def test_a_gradient_made_as_a_new_variable_in_backward_does_not_require_grad_like_a_new_tensor():
    # without create_graph no gradient requires grad; with it, a Variable made in backward is a constant (in
    # PyTorch a new tensor does not require grad), so a second backward cannot silently stop at it
    x, xt = leaf_pair([1.0, 2.0])
    returning(lambda g: (Variable(g.data * 2.0), None)).apply(x, 2.0).sum().backward()
    torch_returning(lambda g: (torch.tensor(g.numpy() * 2.0), None)).apply(xt, 2.0).sum().backward()
    assert x.grad.requires_grad is xt.grad.requires_grad is False
    x = Variable(np.array([1.0, 2.0]))
    (g,) = autograd.grad((returning(lambda g: (Variable(g.data * 2.0), None)).apply(x, 2.0) ** 2).sum(), [x],
                         create_graph=True)
    assert not g.requires_grad


def test_a_gradient_that_broadcasts_to_the_input_is_summed_down_to_its_shape_like_torch():
    grow = lambda g: (g * np.ones((2, 3)), None)  # noqa: E731
    x, xt = leaf_pair([1.0, 2.0, 3.0])
    returning(grow).apply(x, 2.0).sum().backward()
    torch_returning(lambda g: (g * torch.ones(2, 3, dtype=torch.float64), None)).apply(xt, 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    np.testing.assert_array_equal(x.grad.data, [2.0, 2.0, 2.0])


def test_a_gradient_of_a_type_that_is_no_array_raises_type_error():
    with pytest.raises(TypeError, match="ReturnsBackward returned a gradient of type str at index 0"):
        returning(lambda g: ("nope", None)).apply(Variable(np.ones(3)), 2.0).sum().backward()


def test_forward_returning_no_variable_and_saving_no_variable_raise_type_error():
    class ReturnsArray(Function):
        @staticmethod
        def forward(ctx, x):
            return x.data * 2

    class SavesNumber(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3.0)
            return x * 2.0

    with pytest.raises(TypeError, match="ReturnsArray.forward must return Variables, but output 0 is of type ndarray"):
        ReturnsArray.apply(Variable(np.ones(2)))
    with pytest.raises(TypeError, match="save_for_backward can only save variables, but argument 1 is of type float"):
        SavesNumber.apply(Variable(np.ones(2)))


def test_a_class_without_forward_or_backward_says_so_like_torch():
    class Empty(Function):
        pass

    class HalfDone(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

    with pytest.raises(NotImplementedError, match="must implement the forward function"):
        Empty.apply(Variable(np.ones(2)))
    with pytest.raises(NotImplementedError, match="must implement either the backward"):
        HalfDone.apply(Variable(np.ones(2))).sum().backward()


# ----- once_differentiable ---------------------------------------------------------------------------------------

class OnceCube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        assert not tinypytorch.Config.enable_backprop  # it runs under no_grad
        return Variable(3 * x.data**2 * g.data)


TorchOnceCube = torch_function_of_x("TorchOnceCube", lambda x: x**3, lambda x, g: 3 * x**2 * g,
                                    once_differentiable=True)


def test_once_differentiable_gives_the_first_derivative():
    x, xt = leaf_pair([1.0, -2.0, 0.5])
    OnceCube.apply(x).sum().backward()
    TorchOnceCube.apply(xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15)


def test_a_second_derivative_through_once_differentiable_raises_torchs_error():
    x, xt = leaf_pair([1.0, 2.0])
    (g,) = autograd.grad((OnceCube.apply(x) ** 2).sum(), [x], create_graph=True)
    (gt,) = torch.autograd.grad((TorchOnceCube.apply(xt) ** 2).sum(), [xt], create_graph=True)
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-15)
    assert g.requires_grad and gt.requires_grad
    with pytest.raises(RuntimeError) as ours:
        g.sum().backward()
    with pytest.raises(RuntimeError) as theirs:
        gt.sum().backward()
    assert str(ours.value) == str(theirs.value)


def test_without_a_graph_of_the_gradient_once_differentiable_returns_plain_gradients_like_torch():
    x, xt = leaf_pair([1.0, 2.0])
    (g,) = autograd.grad(OnceCube.apply(x).sum(), [x], create_graph=True)  # the seed needs no gradient
    (gt,) = torch.autograd.grad(TorchOnceCube.apply(xt).sum(), [xt], create_graph=True)
    assert g.requires_grad is gt.requires_grad is False


# ----- what the package built applies --------------------------------------------------------------------------

def test_saved_tensors_go_through_saved_tensors_hooks_like_torch():
    packed, packed_t = [], []
    x, xt = leaf_pair([0.5, 1.0])
    with saved_tensors_hooks(lambda v: packed.append(v.shape) or v, lambda v: v):
        y = OursExp.apply(x)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed_t.append(tuple(t.shape)) or t, lambda t: t):
        yt = TorchExp.apply(xt)
    assert packed == packed_t == [(2,)]
    y.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15)


def test_a_saved_input_changed_in_place_is_caught_like_torch():
    def forward(ctx, m, data, x):
        ctx.save_for_backward(x)
        return x * x

    def backward(ctx, m, data, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

    Ours, Torch = twins((forward, backward), (forward, backward))
    a, at = leaf_pair([1.0, 2.0])
    b, bt = a * 1.0, at * 1.0
    y, yt = Ours.apply(b), Torch.apply(bt)
    b.add_(1.0)
    bt.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        yt.sum().backward()


def test_backward_twice_raises_and_retain_graph_doubles_like_torch():
    x, xt = leaf_pair([0.5, 1.0])
    y, yt = OursExp.apply(x).sum(), TorchExp.apply(xt).sum()
    y.backward(retain_graph=True)
    y.backward()
    yt.backward(retain_graph=True)
    yt.backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        yt.backward()


def test_anomaly_mode_names_the_custom_function_whose_backward_returns_nan():
    class NaNBack(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * np.nan

    with autograd.set_detect_anomaly(True):
        y = NaNBack.apply(Variable(np.ones(2)))
        with pytest.raises(RuntimeError, match="Function 'NaNBackBackward' returned nan values in its 0th output"):
            y.sum().backward()


def test_a_custom_function_on_the_stand_in_device_keeps_its_gradients_there(xp):
    x = Variable(xp.asarray(np.array([0.5, 1.0])))
    y = OursExp.apply(x)
    y.sum().backward()
    assert tinypytorch.cuda.get_array_module(x.grad.data) is xp
    np.testing.assert_allclose(tinypytorch.cuda.as_numpy(x.grad.data), np.exp([0.5, 1.0]), rtol=1e-15)
