"""Bools and integers where NumPy and PyTorch part ways, and the other differences tests/test_differential.py found
in the same operations, each held to torch's own behaviour as it runs here: subtraction and negation of bools,
relu of bools, %, // and ** whose result type is bool, integers to negative integer powers, pow's gradients at 0-d
operands and integer bases, softmax of a 0-d tensor, and PyTorch's functions given a number for a tensor."""
import numpy as np
import pytest
import torch

import tinypytorch as tp
from reference import assert_close_to_torch

pytestmark = [pytest.mark.torch]


def assert_same_outcome(call):
    """call(fw) on torch and on the package: the same exception type and message, or the same dtype and values."""
    try:
        theirs = call(torch)
    except Exception as error:  # noqa: BLE001 (the type is what is compared)
        with pytest.raises(type(error)) as ours:
            call(tp)
        assert str(ours.value) == str(error)
        return
    ours = call(tp)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


def b(fw):
    return fw.tensor([True, False])


def b0(fw):
    return fw.tensor(True)


def x(fw):
    return fw.tensor([1.5, 2.0])


def i(fw):
    return fw.tensor([1, 2])


# ----- subtraction and negation of bools: torch refuses (RuntimeError), NumPy computes or raises TypeError ------------

@pytest.mark.parametrize("call", [
    lambda fw: b(fw) - 1, lambda fw: 1 - b(fw), lambda fw: x(fw) - True, lambda fw: True - x(fw),
    lambda fw: b(fw) - b(fw), lambda fw: b(fw) - True, lambda fw: b0(fw) - True, lambda fw: i(fw) - b(fw),
    lambda fw: b(fw) - x(fw), lambda fw: x(fw) - b0(fw), lambda fw: b(fw) - 1.5, lambda fw: fw.sub(b(fw), 1),
    lambda fw: b(fw).sub_(1), lambda fw: x(fw).sub_(True), lambda fw: x(fw).sub_(b(fw)), lambda fw: i(fw).sub_(b0(fw)),
    lambda fw: x(fw).__isub__(True), lambda fw: x(fw) - 1, lambda fw: 1 - i(fw),
], ids=["b - 1", "1 - b", "x - True", "True - x", "b - b", "b - True", "b0 - True", "i - b", "b - x", "x - b0",
        "b - 1.5", "sub(b, 1)", "b.sub_(1)", "x.sub_(True)", "x.sub_(b)", "i.sub_(b0)", "x -= True", "x - 1 (no bool)",
        "1 - i (no bool)"])
def test_subtraction_with_a_bool_is_refused_in_torchs_words(call):
    assert_same_outcome(call)


@pytest.mark.parametrize("call", [lambda fw: -b(fw), lambda fw: -b0(fw), lambda fw: fw.neg(b(fw)), lambda fw: -i(fw)],
                         ids=["-b", "-b0", "neg(b)", "-i (no bool)"])
def test_negation_of_a_bool_is_refused_in_torchs_words(call):
    assert_same_outcome(call)


@pytest.mark.parametrize("call", [lambda fw: fw.relu(b(fw)), lambda fw: fw.relu(b0(fw)), lambda fw: b(fw).relu(),
                                  lambda fw: fw.nn.functional.relu(b(fw)), lambda fw: fw.relu(fw.tensor([-1, 2]))],
                         ids=["relu(b)", "relu(b0)", "b.relu()", "F.relu(b)", "relu(int)"])
def test_relu_of_a_bool_is_refused_in_torchs_words(call):
    assert_same_outcome(call)


# ----- %, // and ** whose result type is bool ------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda fw: b(fw) % b(fw), lambda fw: b(fw) // b(fw), lambda fw: b(fw) % True, lambda fw: b(fw) // True,
    lambda fw: True % b(fw), lambda fw: True // b(fw), lambda fw: b0(fw) % b0(fw),
    lambda fw: fw.remainder(b(fw), b(fw)), lambda fw: fw.floor_divide(b(fw), b(fw)), lambda fw: b(fw) ** b(fw),
    lambda fw: True ** b(fw), lambda fw: b(fw) ** b0(fw), lambda fw: b(fw) ** True, lambda fw: b(fw) ** False,
    lambda fw: b0(fw) ** True, lambda fw: fw.pow(b(fw), True),
    lambda fw: b(fw) % 2, lambda fw: b(fw) // 2, lambda fw: b(fw) ** 2, lambda fw: b(fw) ** 0,
    lambda fw: i(fw) ** b(fw),
], ids=["b % b", "b // b", "b % True", "b // True", "True % b", "True // b", "b0 % b0", "remainder(b, b)",
        "floor_divide(b, b)", "b ** b", "True ** b", "b ** b0", "b ** True", "b ** False", "b0 ** True",
        "pow(b, True)", "b % 2", "b // 2", "b ** 2", "b ** 0", "i ** b"])
def test_remainder_floor_division_and_powers_of_bools_are_torchs(call):
    assert_same_outcome(call)


# ----- integers to negative integer powers: computed for a tensor exponent, refused for a number --------------------

@pytest.mark.parametrize("call", [
    lambda fw: fw.tensor(2) ** fw.tensor(-1), lambda fw: fw.tensor([1, 2]) ** fw.tensor(-1),
    lambda fw: 2 ** fw.tensor([-1, 2]), lambda fw: -2 ** fw.tensor([-1, -2, -3]),
    lambda fw: (-2) ** fw.tensor([-1, -2, -3]), lambda fw: fw.pow(-1, fw.tensor([-1, -2, -3, 0, 3])),
    lambda fw: fw.tensor([-1, 1, 0, 2, -2]) ** fw.tensor(-1), lambda fw: fw.tensor([-1, 1, 0, 2, -2]) ** fw.tensor(-2),
    lambda fw: fw.tensor([[-1], [1], [0], [3]]) ** fw.tensor([-3, -2, 0, 2]),
    lambda fw: fw.tensor([2, 3], dtype=fw.int32) ** fw.tensor(-1, dtype=fw.int32),
    lambda fw: fw.tensor([3]) ** fw.tensor([-1], dtype=fw.int32), lambda fw: b(fw) ** fw.tensor(-1),
    lambda fw: True ** fw.tensor([-1]), lambda fw: b(fw) ** fw.tensor([-1, 2]),
    lambda fw: fw.tensor([2]) ** -1, lambda fw: fw.tensor([2], dtype=fw.int32) ** -1,
    lambda fw: fw.tensor([True]) ** -2, lambda fw: fw.tensor([True, False]) ** -2, lambda fw: fw.tensor(1) ** -1,
    lambda fw: fw.tensor([2]) ** -1.0,
], ids=["0-d 2 ** 0-d -1", "[1, 2] ** -1 tensor", "2 ** [-1, 2]", "-(2 ** [-1, -2, -3])", "(-2) ** [-1, -2, -3]",
        "pow(-1, tensor)", "[-1, 1, 0, 2, -2] ** -1 tensor", "[-1, 1, 0, 2, -2] ** -2 tensor", "broadcast",
        "int32 ** int32", "int64 ** int32", "b ** -1 tensor", "True ** [-1]", "b ** [-1, 2]", "[2] ** -1",
        "int32 ** -1", "[True] ** -2", "[True, False] ** -2", "0-d 1 ** -1", "[2] ** -1.0"])
def test_integers_to_negative_integer_powers_are_torchs(call):
    assert_same_outcome(call)


# ----- pow's gradients ------------------------------------------------------------------------------------------------

def grads_of_pow(fw, base, exponent):
    """The gradients of sum(base ** exponent * weights) with respect to whichever of the two require grad."""
    y = base ** exponent
    weights = fw.arange(y.numel()).reshape(y.shape) % 3 - 1.5
    leaves = [v for v in (base, exponent) if isinstance(v, (torch.Tensor, tp.Variable)) and v.requires_grad]
    (y * weights).sum().backward()
    return y, [leaf.grad for leaf in leaves]


def assert_same_grads(make, rtol=1e-10):
    """rtol 1e-10 in float64 (assert_close_to_torch): a logarithm taken in float32 shows."""
    (theirs, their_grads), (ours, our_grads) = grads_of_pow(torch, *make(torch)), grads_of_pow(tp, *make(tp))
    close = assert_close_to_torch if rtol == 1e-10 else (
        lambda a, b: np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=rtol))
    assert str(ours.dtype) == str(theirs.dtype)
    close(ours.detach().numpy(), theirs.detach().numpy())
    for g, t in zip(our_grads, their_grads, strict=True):
        assert str(g.dtype) == str(t.dtype)
        close(g.numpy(), t.numpy())


def leaf(fw, value, dtype="float64"):
    return fw.tensor(value, dtype=getattr(fw, dtype), requires_grad=True)


@pytest.mark.parametrize("make", [
    lambda fw: (leaf(fw, 0.5),) * 2,
    lambda fw: (leaf(fw, 2.0),) * 2,
    lambda fw: (leaf(fw, [0.5, 2.0, 0.0]), leaf(fw, 2.0)),
    lambda fw: (leaf(fw, [0.5, 2.0, 0.0]), fw.tensor(0.0, dtype=fw.float64)),
    lambda fw: (fw.tensor(1.5, dtype=fw.float64), leaf(fw, 0.5)),
    lambda fw: (leaf(fw, 1.5), leaf(fw, [0.0, 2.0])),
    lambda fw: (leaf(fw, 0.0), leaf(fw, 0.0)),
], ids=["x ** x 0-d", "x ** x at 2", "vector ** 0-d e", "vector ** 0-d 0 constant", "0-d ** 0-d e",
        "0-d x ** vector", "0 ** 0"])
def test_pow_with_a_0d_operand_differentiates_as_torch(make):
    assert_same_grads(make)


@pytest.mark.parametrize("base", ["[2]", "[[2], [3]]", "[True, False]", "2", "0-d int32"])
@pytest.mark.parametrize("exponent, dtype", [(0.0, "float64"), ([0.0, 1.5], "float64"), (0.5, "float16"),
                                             ([0.5, 1.0], "float32")])
def test_an_integer_base_gives_the_exponent_the_gradient_in_its_own_dtype(base, exponent, dtype):
    """(Not a Python bool base: torch's own backward fails there, unknown ivalue tag 4.)"""
    def make(fw):
        x = fw.tensor(3, dtype=fw.int32) if base == "0-d int32" else eval(base)  # (the test's own literals)
        return (fw.tensor(x) if isinstance(x, list) else x), leaf(fw, exponent, dtype)

    # float16 and float32: each framework rounds each step of base ** e * log(base) in its own order
    assert_same_grads(make, rtol={"float64": 1e-10, "float32": 1e-6, "float16": 2e-3}[dtype])


def test_x_to_the_power_zero_sends_back_zeros_even_from_an_infinite_gradient():
    for dtype in ("float16", "float64"):
        grads = []
        for fw in (torch, tp):
            x = leaf(fw, [0.0, 1.0, 2.0], dtype)
            ((x ** 0.0) / x.detach()).sum().backward()  # 1 / 0 is inf: inf * 0 would be NaN
            grads.append(x.grad.numpy())
        np.testing.assert_array_equal(grads[1], grads[0])


# ----- softmax and log_softmax of a 0-d tensor ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax_of_a_0d_tensor_along_dim_0_or_minus_1_is_torchs(name, dim, dtype):
    results = []
    for fw in (torch, tp):
        x = leaf(fw, 2.0, dtype)
        for y in (getattr(fw, name)(x, dim), getattr(x, name)(dim), getattr(fw.nn.functional, name)(x, dim=dim)):
            (y * 3).backward()
            results.append((str(y.dtype), tuple(y.shape), y.item(), x.grad.item()))
    assert results[3:] == results[:3]


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_a_0d_tensor_along_another_dim_is_refused_as_torch(name):
    for fw in (torch, tp):
        with pytest.raises(IndexError):
            getattr(fw, name)(fw.tensor(2.0), 1)


# ----- PyTorch's functions given a number where they take a tensor ----------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda fw: fw.exp(2.0), lambda fw: fw.sin(1), lambda fw: fw.cos(0.5), lambda fw: fw.tanh(0.0),
    lambda fw: fw.log(2.0), lambda fw: fw.sqrt(2), lambda fw: fw.abs(-1), lambda fw: fw.square(2),
    lambda fw: fw.sigmoid(1.0), lambda fw: fw.relu(1.0), lambda fw: fw.exp(True), lambda fw: fw.exp(np.float64(2.0)),
    lambda fw: fw.neg(2.0), lambda fw: fw.sum(2.0), lambda fw: fw.mean(2.0), lambda fw: fw.logsumexp(2.0, 0),
    lambda fw: fw.softmax(2.0, 0), lambda fw: fw.log_softmax(2.0, 0), lambda fw: fw.nn.functional.relu(2.0),
    lambda fw: fw.maximum(1, 2), lambda fw: fw.maximum(x(fw), 2), lambda fw: fw.minimum(2.0, x(fw)),
    lambda fw: fw.matmul(2, 3),
], ids=["exp(2.0)", "sin(1)", "cos", "tanh", "log", "sqrt", "abs", "square", "sigmoid", "relu", "exp(True)",
        "exp(np.float64)", "neg", "sum", "mean", "logsumexp", "softmax", "log_softmax", "F.relu", "maximum(1, 2)",
        "maximum(x, 2)", "minimum(2.0, x)", "matmul(2, 3)"])
def test_a_number_for_a_tensor_is_refused_in_torchs_words(call):
    assert_same_outcome(call)


@pytest.mark.parametrize("call", [lambda fw: fw.clamp(2.0, 0, 1), lambda fw: fw.pow(2, 3),
                                  lambda fw: fw.remainder(5, 3)], ids=["clamp", "pow", "remainder"])
def test_a_number_for_every_tensor_is_refused_with_a_type_error_as_torch(call):
    for fw in (torch, tp):
        with pytest.raises(TypeError):
            call(fw)


@pytest.mark.parametrize("call", [
    lambda fw: fw.add(1, 2), lambda fw: fw.mul(2, 3), lambda fw: fw.sub(1, 2), lambda fw: fw.div(1, 2),
    lambda fw: fw.floor_divide(5, 3), lambda fw: fw.where(b(fw), 1, 2), lambda fw: fw.remainder(5, x(fw)),
    lambda fw: fw.pow(2, x(fw)), lambda fw: fw.add(x(fw), 1),
], ids=["add(1, 2)", "mul(2, 3)", "sub(1, 2)", "div(1, 2)", "floor_divide(5, 3)", "where(b, 1, 2)",
        "remainder(5, x)", "pow(2, x)", "add(x, 1)"])
def test_the_functions_that_take_numbers_in_torch_take_them(call):
    ours, theirs = call(tp), call(torch)
    assert str(ours.dtype) == str(theirs.dtype)
    assert_close_to_torch(ours.numpy(), theirs.numpy())


# ----- forward mode through a promotion -------------------------------------------------------------------------------

def test_a_tangent_goes_through_an_input_that_promotion_casts():
    def jvp(fw):
        x, v = fw.tensor([1.0, 0.0, 0.0]), fw.tensor([0.0, 0.5, 1.0])
        c = fw.tensor([0.5, -1.0, 2.0], dtype=fw.float64)  # x * c is float64: x is cast, its tangent must go along
        return fw.func.jvp(lambda x: fw.sin(x * c), (x,), (v,))

    outs = [jvp(torch), jvp(tp)]
    for ours, theirs in zip(outs[1], outs[0], strict=True):
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
