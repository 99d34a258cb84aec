"""Step 65: tinypytorch.func (jvp, vjp, jacfwd, jacrev, hessian) and autograd.functional (jacobian, hvp, vhp),
against torch.func and torch.autograd.functional, and PyTorch's errors on bad input."""
import numpy as np
import pytest

import tinypytorch as tp
from tinypytorch import Variable, func
from tinypytorch.autograd import functional

torch = pytest.importorskip("torch")
import torch.autograd.functional as TF  # noqa: E402
import torch.func as tfunc  # noqa: E402

pytestmark = [pytest.mark.step65, pytest.mark.torch]
RNG = np.random.default_rng(62)
W = RNG.standard_normal((4, 3))
X = RNG.standard_normal(3)


def ours_map(x):
    return tp.tanh(tp.matmul(x.reshape(1, -1), Variable(W.T.copy(), requires_grad=False))).reshape(-1) * x[0:1]


def torch_map(x):
    return torch.tanh(torch.tensor(W) @ x) * x[0:1]


def ours_scalar(x):
    return (tp.sin(x) * x[0:1] + x ** 3).sum()


def torch_scalar(x):
    return (x.sin() * x[0:1] + x ** 3).sum()


def const(a):
    return Variable(np.asarray(a, dtype=float), requires_grad=False)


def torch_error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("name", ["jacfwd", "jacrev", "hessian"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_jacobians_and_hessian_equal_torch_func(name, requires_grad):
    f, g = (ours_scalar, torch_scalar) if name == "hessian" else (ours_map, torch_map)
    ours = getattr(func, name)(f)(Variable(X.copy(), requires_grad=requires_grad))
    np.testing.assert_allclose(ours.data, getattr(tfunc, name)(g)(torch.tensor(X)).numpy(), rtol=1e-10, atol=1e-14)


def test_jacobian_of_a_matrix_input_has_output_then_input_shape():
    x = RNG.standard_normal((2, 3))
    ours = func.jacrev(lambda a: tp.sin(a).sum(axis=0))(const(x))
    assert ours.shape == (3, 2, 3)
    np.testing.assert_allclose(ours.data, tfunc.jacrev(lambda a: a.sin().sum(0))(torch.tensor(x)).numpy(), rtol=1e-10)
    np.testing.assert_allclose(func.jacfwd(lambda a: tp.sin(a).sum(axis=0))(const(x)).data, ours.data, rtol=1e-10)


def test_jvp_and_vjp_equal_torch_func():
    v, u = RNG.standard_normal(3), RNG.standard_normal(4)
    out, tangent = func.jvp(ours_map, (const(X),), (const(v),))
    t_out, t_tangent = tfunc.jvp(torch_map, (torch.tensor(X),), (torch.tensor(v),))
    np.testing.assert_allclose(out.data, t_out.numpy(), rtol=1e-10)
    np.testing.assert_allclose(tangent.data, t_tangent.numpy(), rtol=1e-10)
    out, vjp_fn = func.vjp(ours_map, const(X))
    expected = tfunc.vjp(torch_map, torch.tensor(X))[1](torch.tensor(u))[0]
    np.testing.assert_allclose(vjp_fn(const(u))[0].data, expected.numpy(), rtol=1e-10)


def test_jvp_of_an_output_independent_of_the_input_is_zero_as_torchs():
    ours = func.jvp(lambda a: const(np.ones(2)), (const(X),), (const(X),))[1]
    theirs = tfunc.jvp(lambda a: torch.ones(2, dtype=torch.float64), (torch.tensor(X),), (torch.tensor(X),))[1]
    np.testing.assert_array_equal(ours.data, theirs.numpy())


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_jacobian_of_tuples_equals_torchs(strategy):
    y = RNG.standard_normal(3)

    def ours(a, b):
        return a * b, tp.sin(a)

    def theirs(a, b):
        return a * b, a.sin()
    J = functional.jacobian(ours, (const(X), const(y)), strategy=strategy, vectorize=True)
    T = TF.jacobian(theirs, (torch.tensor(X), torch.tensor(y)), strategy=strategy, vectorize=True)
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(J[i][j].data, T[i][j].numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("name", ["hvp", "vhp"])
def test_hvp_and_vhp_equal_torchs(name):
    v = RNG.standard_normal(3)
    out, ours = getattr(functional, name)(ours_scalar, const(X), const(v))
    t_out, theirs = getattr(TF, name)(torch_scalar, torch.tensor(X), torch.tensor(v))
    np.testing.assert_allclose(out.data, t_out.numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-10)
    assert not ours.requires_grad and not t_out.requires_grad


def test_hvp_with_create_graph_can_be_differentiated_again_as_torchs():
    x, tx = Variable(X.copy()), torch.tensor(X, requires_grad=True)
    ours = functional.hvp(ours_scalar, x, const(np.ones(3)), create_graph=True)[1].sum()
    theirs = TF.hvp(torch_scalar, tx, torch.ones(3, dtype=torch.float64), create_graph=True)[1].sum()
    (g,) = tp.autograd.grad(ours, x)
    np.testing.assert_allclose(g.data, torch.autograd.grad(theirs, tx)[0].numpy(), rtol=1e-10)


def test_jvp_with_the_wrong_number_of_tangents_raises_torchs_error():
    x, tx = const(X), torch.tensor(X)
    for ours_args, torch_args in [(((x,), (x, x)), ((tx,), (tx, tx))), (((x,), x), ((tx,), tx)),
                                  ((x, (x,)), (tx, (tx,)))]:
        kind, message = torch_error(lambda: tfunc.jvp(torch_map, *torch_args))
        with pytest.raises(kind) as info:
            func.jvp(ours_map, *ours_args)
        assert str(info.value) == message


def test_jvp_with_a_tangent_of_the_wrong_shape_raises_torchs_error():
    kind, message = torch_error(lambda: tfunc.jvp(torch_map, (torch.tensor(X),), (torch.ones(2, dtype=torch.float64),)))
    with pytest.raises(kind) as info:
        func.jvp(ours_map, (const(X),), (const(np.ones(2)),))
    assert str(info.value) == message


@pytest.mark.parametrize("name", ["hvp", "vhp"])
def test_v_none_on_a_non_scalar_input_raises_torchs_error(name):
    kind, message = torch_error(lambda: getattr(TF, name)(torch_scalar, torch.tensor(X)))
    with pytest.raises(kind) as info:
        getattr(functional, name)(ours_scalar, const(X))
    assert str(info.value) == message


def test_hvp_of_v_of_the_wrong_size_and_of_a_non_scalar_output_raise_torchs_errors():
    kind, message = torch_error(lambda: TF.hvp(torch_scalar, torch.tensor(X), torch.ones(2, dtype=torch.float64)))
    with pytest.raises(kind) as info:
        functional.hvp(ours_scalar, const(X), const(np.ones(2)))
    assert str(info.value) == message == "v has invalid size: should be torch.Size([3]) but got torch.Size([2])."
    kind, message = torch_error(lambda: TF.hvp(torch_map, torch.tensor(X), torch.ones(3, dtype=torch.float64)))
    with pytest.raises(kind) as info:
        functional.hvp(ours_map, const(X), const(np.ones(3)))
    assert str(info.value) == message


def test_jacobian_of_an_output_independent_of_the_input():
    """strict=True: torch's error; strict=False: zeros, as torch's."""
    t_const = lambda a: torch.ones(2, dtype=torch.float64)  # noqa: E731
    kind, message = torch_error(lambda: TF.jacobian(t_const, torch.tensor(X), strict=True))
    with pytest.raises(kind) as info:
        functional.jacobian(lambda a: const(np.ones(2)), const(X), strict=True)
    assert str(info.value) == message
    ours = functional.jacobian(lambda a: const(np.ones(2)), const(X))
    np.testing.assert_array_equal(ours.data, TF.jacobian(t_const, torch.tensor(X)).numpy())


def test_strict_hvp_of_a_linear_function_raises_torchs_error():
    kind, message = torch_error(lambda: TF.hvp(lambda a: a.sum(), torch.tensor(X), torch.ones(3,
                                dtype=torch.float64), strict=True))
    with pytest.raises(kind) as info:
        functional.hvp(lambda a: a.sum(), const(X), const(np.ones(3)), strict=True)
    assert str(info.value) == message
    np.testing.assert_array_equal(functional.hvp(lambda a: a.sum(), const(X), const(np.ones(3)))[1].data, 0.0)


@pytest.mark.parametrize("kwargs", [dict(strategy="bad"), dict(strategy="forward-mode"),
                                    dict(strategy="forward-mode", vectorize=True, strict=True),
                                    dict(strategy="forward-mode", vectorize=True, create_graph=True)])
def test_jacobian_refuses_what_torch_refuses_with_its_message(kwargs):
    kind, message = torch_error(lambda: TF.jacobian(torch_map, torch.tensor(X), **kwargs))
    with pytest.raises(kind) as info:
        functional.jacobian(ours_map, const(X), **kwargs)
    assert str(info.value) == message
