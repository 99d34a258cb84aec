"""Step 65's transforms on PyTorch's structures: tinypytorch.func (jvp, vjp, jacrev, jacfwd, hessian, grad,
grad_and_value) and tinypytorch.autograd.functional against torch.func and torch.autograd.functional.

Every function is written once and takes the framework module `fw`, so that `fw.sin` is tinypytorch's or
torch's; inputs and outputs are pytrees (tuples, lists, dicts, namedtuples). A result is compared leaf by leaf
in float64 and by its structure, which must print as torch's TreeSpec prints. Errors: torch's exception type, and
its message where the package words it the same.
"""
import collections
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch as tp
from reference import assert_close_to_torch, floats
from tinypytorch import Variable, func
from tinypytorch.autograd import functional
from tinypytorch.utils import pytree

torch = pytest.importorskip("torch")
import torch.autograd.functional as TF  # noqa: E402
import torch.func as tfunc  # noqa: E402
import torch.utils._pytree as tpytree  # noqa: E402

pytestmark = [pytest.mark.step65, pytest.mark.torch]
Pair = collections.namedtuple("Pair", ["first", "second"])
RNG = np.random.default_rng(63)
X, Y = RNG.standard_normal(3), RNG.standard_normal(2)
PARAMS = {"w": RNG.standard_normal((2, 3)), "b": RNG.standard_normal(2)}

with warnings.catch_warnings():  # torch 2.13's forward AD loads its rules with torch.jit.script, which warns
    warnings.simplefilter("ignore", DeprecationWarning)
    tfunc.jvp(torch.sin, (torch.zeros(1),), (torch.ones(1),))


def ours(tree, requires_grad=False):
    """The arrays of `tree` as Variables (copies), in the same structure."""
    return pytree.tree_map(lambda a: Variable(np.array(a, dtype=np.float64), requires_grad=requires_grad), tree)


def theirs(tree, requires_grad=False):
    return pytree.tree_map(lambda a: torch.tensor(np.array(a, dtype=np.float64), requires_grad=requires_grad), tree)


def assert_same(result, expected):
    """Same structure (torch's TreeSpec, printed) and, leaf by leaf, Variables equal to torch's tensors."""
    leaves, spec = pytree.tree_flatten(result)
    t_leaves, t_spec = tpytree.tree_flatten(expected)
    assert str(spec) == str(t_spec)
    for leaf, t_leaf in zip(leaves, t_leaves):
        assert isinstance(leaf, Variable) and leaf.shape == tuple(t_leaf.shape)
        assert_close_to_torch(leaf.data, t_leaf.detach().numpy())


def name_of(value):
    """A test id: a function's name, an input's count of arrays, or the value."""
    return value.__name__ if callable(value) else f"{len(value)}in" if isinstance(value, tuple) else str(value)


def torch_error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def assert_same_error(call, t_call):
    """call raises what t_call raises in torch: the type and the message."""
    kind, message = torch_error(t_call)
    with pytest.raises(kind) as info:
        call()
    assert str(info.value) == message


# ----- functions, written once for both frameworks ------------------------------------------------------


def f_tuple(fw, x):
    return fw.sin(x) * x.sum(), (x ** 2).sum()


def f_list(fw, x):
    return [fw.exp(x), x * 3.0]


def f_dict(fw, x):
    return {"s": fw.tanh(x), "q": (x ** 3).sum()}


def f_namedtuple(fw, x):
    return Pair(fw.cos(x), x * x)


def f_two(fw, x, y):
    return fw.sin(x) * y.sum() + x * x, y * (x ** 2).sum()


def f_params(fw, p, x):  # a layer as a function of its parameters: the neural tangent kernel tutorial's shape
    return fw.tanh((p["w"] * x).sum(dim=1) + p["b"])


def s_params(fw, p):
    return (fw.sin(p["w"]) * p["b"].reshape(2, 1)).sum() + (p["w"] ** 2).sum() * (p["b"] ** 2).sum()


def s_two(fw, x, y):
    return (fw.sin(x) * y.sum()).sum() + (x ** 2).sum() * (y ** 3).sum()


STRUCTURED = [f_tuple, f_list, f_dict, f_namedtuple]


# ----- pytrees -----------------------------------------------------------------------------------------

TREES = [1.5, (1, 2), [1, (2, 3)], {"b": 1, "a": [2, 3]}, Pair(1, {"k": (2,)}), (None, 1), (), {"a": ()},
         collections.OrderedDict(z=1, y=2), ((1, 2),), [[], [1]]]


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_pytree_flattens_prints_and_rebuilds_as_torchs(tree):
    leaves, spec = pytree.tree_flatten(tree)
    t_leaves, t_spec = tpytree.tree_flatten(tree)
    assert leaves == t_leaves
    assert str(spec) == str(t_spec) and spec.num_leaves == t_spec.num_leaves
    assert pytree.treespec_pprint(spec) == tpytree.treespec_pprint(t_spec)
    rebuilt = pytree.tree_unflatten([str(v) for v in leaves], spec)
    assert rebuilt == tpytree.tree_unflatten([str(v) for v in leaves], t_spec)
    assert spec.is_leaf() or type(rebuilt) is type(tree)
    assert pytree.tree_map(lambda v: (v,), tree) == tpytree.tree_map(lambda v: (v,), tree)


@pytest.mark.parametrize("first, second", [({"a": 1, "b": 2}, {"b": 1, "a": 2}), ([1], (1,)), (Pair(1, 2), (1, 2)),
                                           ((1, (2, 3)), (1, (2, 3))), ({"a": 1}, {"a": (1,)}), ((None,), (5,))])
def test_specs_are_equal_when_torchs_are(first, second):
    assert (pytree.tree_flatten(first)[1] == pytree.tree_flatten(second)[1]) == (
        tpytree.tree_flatten(first)[1] == tpytree.tree_flatten(second)[1])


def test_unflatten_refuses_the_wrong_number_of_leaves():
    with pytest.raises(ValueError, match="2 leaves for a structure that holds 3"):
        pytree.tree_unflatten([1, 2], pytree.tree_flatten((1, 2, 3))[1])


# ----- torch.func: structures, argnums, has_aux ---------------------------------------------------------


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("f", STRUCTURED, ids=name_of)
def test_jacobians_of_tuple_list_dict_and_namedtuple_outputs(name, f):
    result = getattr(func, name)(lambda x: f(tp, x))(ours(X))
    assert_same(result, getattr(tfunc, name)(lambda x: f(torch, x))(theirs(X)))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0), (1,)], ids=str)
def test_jacobians_with_argnums_nest_as_torchs(name, argnums):
    result = getattr(func, name)(lambda x, y: f_two(tp, x, y), argnums=argnums)(ours(X), ours(Y))
    assert_same(result, getattr(tfunc, name)(lambda x, y: f_two(torch, x, y), argnums=argnums)(theirs(X), theirs(Y)))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
def test_negative_argnums_count_from_the_end(name):
    """torch.func.jacrev takes argnums=-1 as the last argument; torch 2.13's jacfwd wraps the position for
    slicing but not where it makes the duals, and answers zeros: the expected value is jacrev's."""
    result = getattr(func, name)(lambda x, y: f_two(tp, x, y), argnums=-1)(ours(X), ours(Y))
    assert_same(result, tfunc.jacrev(lambda x, y: f_two(torch, x, y), argnums=-1)(theirs(X), theirs(Y)))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, (0, 1)], ids=str)
def test_jacobians_of_a_dict_of_parameters(name, argnums):
    result = getattr(func, name)(lambda p, x: f_params(tp, p, x), argnums=argnums)(ours(PARAMS), ours(X))
    expected = getattr(tfunc, name)(lambda p, x: f_params(torch, p, x), argnums=argnums)(theirs(PARAMS), theirs(X))
    assert_same(result, expected)


def test_jacobians_of_a_namedtuple_input_and_a_nondifferentiated_number():
    for name in ("jacrev", "jacfwd"):
        result = getattr(func, name)(lambda p, c: f_two(tp, p.first, p.second * c))(Pair(ours(X), ours(Y)), 2.0)
        expected = getattr(tfunc, name)(lambda p, c: f_two(torch, p.first, p.second * c))(Pair(theirs(X), theirs(Y)),
                                                                                          2.0)
        assert_same(result, expected)


def test_chunk_size_gives_the_same_jacobian():
    for chunk_size in (1, 2, 100):
        result = func.jacrev(lambda x: f_tuple(tp, x), chunk_size=chunk_size)(ours(X))
        assert_same(result, tfunc.jacrev(lambda x: f_tuple(torch, x), chunk_size=chunk_size)(theirs(X)))


@pytest.mark.parametrize("f", STRUCTURED + [f_two], ids=name_of)
def test_vjp_takes_and_gives_pytrees(f):
    args = (X, Y) if f is f_two else (X,)
    output, vjp_fn = func.vjp(lambda *a: f(tp, *a), *ours(args))
    t_output, t_vjp_fn = tfunc.vjp(lambda *a: f(torch, *a), *theirs(args))
    assert_same(output, t_output)
    cotangents = pytree.tree_map(lambda y: RNG.standard_normal(y.shape), output)
    assert_same(vjp_fn(ours(cotangents)), t_vjp_fn(theirs(cotangents)))


def test_vjp_of_a_dict_of_parameters_and_no_primals():
    _, vjp_fn = func.vjp(lambda p: f_params(tp, p, ours(X)), ours(PARAMS))
    _, t_vjp_fn = tfunc.vjp(lambda p: f_params(torch, p, theirs(X)), theirs(PARAMS))
    u = RNG.standard_normal(2)
    assert_same(vjp_fn(ours(u)), t_vjp_fn(theirs(u)))
    assert func.vjp(lambda: ours(X) * 2.0)[1](ours(X)) == ()


@pytest.mark.parametrize("f", STRUCTURED, ids=name_of)
def test_jvp_of_structured_outputs(f):
    v = RNG.standard_normal(3)
    assert_same(func.jvp(lambda x: f(tp, x), (ours(X),), (ours(v),)),
                tfunc.jvp(lambda x: f(torch, x), (theirs(X),), (theirs(v),)))


def test_jvp_of_a_dict_of_parameters_and_nested_primals():
    tangent = {"w": np.ones((2, 3)), "b": np.arange(2.0)}
    assert_same(func.jvp(lambda p, x: f_params(tp, p, x), (ours(PARAMS), ours(X)), (ours(tangent), ours(Y[:1] * X))),
                tfunc.jvp(lambda p, x: f_params(torch, p, x), (theirs(PARAMS), theirs(X)),
                          (theirs(tangent), theirs(Y[:1] * X))))
    assert_same(func.jvp(lambda xy: f_two(tp, *xy), ((ours(X), ours(Y)),), ((ours(X), ours(Y)),)),
                tfunc.jvp(lambda xy: f_two(torch, *xy), ((theirs(X), theirs(Y)),), ((theirs(X), theirs(Y)),)))


def aux_function(fw, x):
    return f_dict(fw, x), {"double": x * 2.0, "both": (fw.sin(x), x.sum())}


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
def test_has_aux_passes_aux_through_jacobians(name):
    result = getattr(func, name)(lambda x: aux_function(tp, x), has_aux=True)(ours(X))
    assert_same(result, getattr(tfunc, name)(lambda x: aux_function(torch, x), has_aux=True)(theirs(X)))
    assert not any(leaf.requires_grad for leaf in pytree.tree_flatten(result)[0])


def test_has_aux_passes_aux_through_vjp_and_jvp():
    output, vjp_fn, aux = func.vjp(lambda x: aux_function(tp, x), ours(X), has_aux=True)
    t_output, t_vjp_fn, t_aux = tfunc.vjp(lambda x: aux_function(torch, x), theirs(X), has_aux=True)
    assert_same((output, aux), (t_output, t_aux))
    assert not aux["double"].requires_grad and not t_aux["double"].requires_grad
    u = {"s": np.ones(3), "q": np.array(2.0)}
    assert_same(vjp_fn(ours(u)), t_vjp_fn(theirs(u)))
    assert_same(func.jvp(lambda x: aux_function(tp, x), (ours(X),), (ours(Y[0] * X),), has_aux=True),
                tfunc.jvp(lambda x: aux_function(torch, x), (theirs(X),), (theirs(Y[0] * X),), has_aux=True))


def test_grad_and_grad_and_value_are_transforms():
    assert_same(func.grad(lambda p: s_params(tp, p))(ours(PARAMS)),
                tfunc.grad(lambda p: s_params(torch, p))(theirs(PARAMS)))
    for argnums in (0, 1, (0, 1), (1, 0), -1):
        assert_same(func.grad_and_value(lambda x, y: s_two(tp, x, y), argnums=argnums)(ours(X), ours(Y)),
                    tfunc.grad_and_value(lambda x, y: s_two(torch, x, y), argnums=argnums)(theirs(X), theirs(Y)))
    assert_same(func.grad(lambda x, scale=1.0: s_two(tp, x * scale, ours(Y)))(ours(X), scale=3.0),
                tfunc.grad(lambda x, scale=1.0: s_two(torch, x * scale, theirs(Y)))(theirs(X), scale=3.0))
    assert func.grad is not tp.autograd.grad


def test_grad_with_aux_and_of_an_output_independent_of_the_input():
    def f(fw, x):
        return s_two(fw, x, x[:2]), {"x3": x * 3.0}
    for name in ("grad", "grad_and_value"):
        result = getattr(func, name)(lambda x: f(tp, x), has_aux=True)(ours(X))
        expected = getattr(tfunc, name)(lambda x: f(torch, x), has_aux=True)(theirs(X))
        assert_same(result, expected)
        assert not any(leaf.requires_grad for leaf in pytree.tree_flatten(result)[0])
    constant = func.grad(lambda x: ours(Y).sum())(ours(X))
    assert_same(constant, tfunc.grad(lambda x: theirs(Y).sum())(theirs(X)))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd", "hessian", "grad"])
def test_float32_stays_float32_as_in_torch(name):
    x32 = X.astype(np.float32)
    f = (lambda fw: lambda a: f_tuple(fw, a)[0]) if name in ("jacrev", "jacfwd") else (lambda fw: lambda a: s_two(
        fw, a, a[:2]))
    result = getattr(func, name)(f(tp))(Variable(x32, requires_grad=False))
    expected = getattr(tfunc, name)(f(torch))(torch.tensor(x32))
    assert str(result.dtype) == str(expected.dtype)
    np.testing.assert_allclose(result.data, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_outputs_independent_of_the_input_give_zeros_as_torchs():
    """A constant output: zero blocks; an integer output under jacfwd and jvp: integer zeros, as torch's."""
    for name in ("jacrev", "jacfwd"):
        assert_same(getattr(func, name)(lambda x: (x * 2.0, to_fw(tp, Y)))(ours(X)),
                    getattr(tfunc, name)(lambda x: (x * 2.0, to_fw(torch, Y)))(theirs(X)))
    ints = func.jacfwd(lambda x: to_fw(tp, INTS))(ours(X))
    t_ints = tfunc.jacfwd(lambda x: to_fw(torch, INTS))(theirs(X))
    assert ints.dtype == np.int64 and t_ints.dtype == torch.int64
    np.testing.assert_array_equal(ints.data, t_ints.numpy())
    tangent = func.jvp(lambda x: to_fw(tp, INTS), (ours(X),), (ours(X),))[1]
    np.testing.assert_array_equal(tangent.data, tfunc.jvp(lambda x: to_fw(torch, INTS), (theirs(X),),
                                                          (theirs(X),))[1].numpy())


# ----- transforms inside transforms ----------------------------------------------------------------------


def test_jacfwd_of_jacrev_with_tuple_argnums():
    def inner(fw):
        return lambda x, y: fw.sin(x) * (y ** 2).sum()
    result = func.jacfwd(func.jacrev(inner(tp), argnums=(0, 1)), argnums=(0, 1))(ours(X), ours(Y))
    assert_same(result, tfunc.jacfwd(tfunc.jacrev(inner(torch), argnums=(0, 1)), argnums=(0, 1))(theirs(X), theirs(Y)))


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=str)
def test_hessian_with_argnums(argnums):
    result = func.hessian(lambda x, y: s_two(tp, x, y), argnums=argnums)(ours(X), ours(Y))
    assert_same(result, tfunc.hessian(lambda x, y: s_two(torch, x, y), argnums=argnums)(theirs(X), theirs(Y)))


def test_hessian_of_a_function_of_a_dict_and_jacrev_of_jacrev():
    assert_same(func.hessian(lambda p: s_params(tp, p))(ours(PARAMS)),
                tfunc.hessian(lambda p: s_params(torch, p))(theirs(PARAMS)))
    assert_same(func.jacrev(func.jacrev(lambda p: s_params(tp, p)))(ours(PARAMS)),
                tfunc.jacrev(tfunc.jacrev(lambda p: s_params(torch, p)))(theirs(PARAMS)))


def test_jvp_of_grad_is_a_hessian_vector_product():
    v = {"w": RNG.standard_normal((2, 3)), "b": RNG.standard_normal(2)}
    assert_same(func.jvp(func.grad(lambda p: s_params(tp, p)), (ours(PARAMS),), (ours(v),)),
                tfunc.jvp(tfunc.grad(lambda p: s_params(torch, p)), (theirs(PARAMS),), (theirs(v),)))


def test_grad_of_grad_keeps_the_two_variables_apart():
    """The inner x * y differentiated in y at y = x is x, whose gradient is ones (not 2 x: the inner
    transform differentiates its own copy of x, not the outer variable it closes over)."""
    assert_same(func.grad(lambda x: func.grad(lambda y: (x * y).sum())(x).sum())(ours(X)),
                tfunc.grad(lambda x: tfunc.grad(lambda y: (x * y).sum())(x).sum())(theirs(X)))


def test_a_jacobian_closing_over_an_enclosing_transforms_variable():
    def outer(fn, fw, x):
        return lambda y: fn.jacrev(lambda a: fw.sin(a) * (y ** 2).sum())(x)
    assert_same(func.jacrev(outer(func, tp, ours(X)))(ours(Y)), tfunc.jacrev(outer(tfunc, torch, theirs(X)))(theirs(Y)))


@pytest.mark.parametrize("name", ["jacrev", "grad", "hessian"])
def test_results_on_variables_that_require_grad_are_differentiable(name):
    f = (lambda fw: lambda x: f_tuple(fw, x)[0]) if name == "jacrev" else (lambda fw: lambda x: s_two(fw, x, x[:2]))
    x, t_x = ours(X, requires_grad=True), theirs(X, requires_grad=True)
    result, expected = getattr(func, name)(f(tp))(x), getattr(tfunc, name)(f(torch))(t_x)
    assert_same(result, expected)
    if name == "hessian":  # forward over reverse: the tangents are arrays, the Hessian a constant
        return
    assert result.requires_grad
    (g,) = tp.autograd.grad((result ** 2).sum(), x)
    assert_same(g, torch.autograd.grad((expected ** 2).sum(), t_x)[0])


def test_a_jacobian_closing_over_parameters_is_differentiable_in_them():
    w, t_w = ours(PARAMS["w"], requires_grad=True), theirs(PARAMS["w"], requires_grad=True)
    J = func.jacrev(lambda x: f_params(tp, {"w": w, "b": ours(PARAMS["b"])}, x))(ours(X))
    t_J = tfunc.jacrev(lambda x: f_params(torch, {"w": t_w, "b": theirs(PARAMS["b"])}, x))(theirs(X))
    assert_same(J, t_J)
    assert_same(tp.autograd.grad((J ** 2).sum(), w)[0], torch.autograd.grad((t_J ** 2).sum(), t_w)[0])


@settings(max_examples=25)
@given(st.integers(1, 4).flatmap(lambda n: arrays(np.float64, n, elements=floats(-2.0, 2.0))))
def test_random_inputs_jacobians_and_hessians_equal_torchs(x):
    for name in ("jacrev", "jacfwd"):
        assert_same(getattr(func, name)(lambda a: f_dict(tp, a))(ours(x)),
                    getattr(tfunc, name)(lambda a: f_dict(torch, a))(theirs(x)))
    assert_same(func.hessian(lambda a, b: s_two(tp, a, b), argnums=(0, 1))(ours(x), ours(x[::-1])),
                tfunc.hessian(lambda a, b: s_two(torch, a, b), argnums=(0, 1))(theirs(x), theirs(x[::-1])))


# ----- torch.func's errors ---------------------------------------------------------------------------------

INTS = np.array([1, 2])


def to_fw(fw, value):
    """A float64 tensor of `fw` (an int64 one for INTS)."""
    if fw is tp:
        return Variable(np.array(value), requires_grad=False)
    return torch.tensor(np.array(value))


FUNC_ERRORS = {
    "jacrev of a float": lambda fn, fw: fn.jacrev(lambda a: a * 2)(3.0),
    "jacfwd of a float": lambda fn, fw: fn.jacfwd(lambda a: a * 2)(3.0),
    "vjp of a float": lambda fn, fw: fn.vjp(lambda a: a * 2, 3.0),
    "grad of a float": lambda fn, fw: fn.grad(lambda a: a * 2)(3.0),
    "grad of a dict holding a float": lambda fn, fw: fn.grad(lambda d: d["a"].sum())({"a": to_fw(fw, X), "b": 1.0}),
    "jacfwd of a dict holding a float": lambda fn, fw: fn.jacfwd(lambda d: d["a"])({"a": to_fw(fw, X), "b": 1.0}),
    "jacfwd of integers": lambda fn, fw: fn.jacfwd(lambda a: a * 2)(to_fw(fw, INTS)),
    "jvp of a float": lambda fn, fw: fn.jvp(lambda a: a * 2, (3.0,), (1.0,)),
    "jvp of lists": lambda fn, fw: fn.jvp(lambda a: a * 2, [to_fw(fw, X)], [to_fw(fw, X)]),
    "jvp of no primals": lambda fn, fw: fn.jvp(lambda: to_fw(fw, X), (), ()),
    "jvp with dict keys in another order": lambda fn, fw: fn.jvp(
        lambda d: d["a"] * d["b"], ({"a": to_fw(fw, X), "b": to_fw(fw, X)},),
        ({"b": to_fw(fw, X), "a": to_fw(fw, X)},)),
    "jvp with a list for a tuple": lambda fn, fw: fn.jvp(lambda d: d[0], ([to_fw(fw, X)],), ((to_fw(fw, X),),)),
    "jvp with a tangent of another shape": lambda fn, fw: fn.jvp(lambda a: a, (to_fw(fw, X),), (to_fw(fw, Y),)),
    "jvp strict of a constant": lambda fn, fw: fn.jvp(lambda a: to_fw(fw, Y), (to_fw(fw, X),), (to_fw(fw, X),),
                                                      strict=True),
    "jvp returning None": lambda fn, fw: fn.jvp(lambda a: None, (to_fw(fw, X),), (to_fw(fw, X),)),
    "jvp returning a float": lambda fn, fw: fn.jvp(lambda a: 1.0, (to_fw(fw, X),), (to_fw(fw, X),)),
    "jacfwd returning a float": lambda fn, fw: fn.jacfwd(lambda a: 1.0)(to_fw(fw, X)),
    "jacrev returning a float": lambda fn, fw: fn.jacrev(lambda a: 1.0)(to_fw(fw, X)),
    "jacrev returning an empty tuple": lambda fn, fw: fn.jacrev(lambda a: ())(to_fw(fw, X)),
    "jacrev returning a tuple with None": lambda fn, fw: fn.jacrev(lambda a: (a, None))(to_fw(fw, X)),
    "vjp returning None": lambda fn, fw: fn.vjp(lambda a: None, to_fw(fw, X)),
    "jacrev of integer outputs": lambda fn, fw: fn.jacrev(lambda a: to_fw(fw, INTS))(to_fw(fw, X)),
    "grad of a vector": lambda fn, fw: fn.grad(lambda a: a * 2)(to_fw(fw, X)),
    "grad returning a float": lambda fn, fw: fn.grad(lambda a: 1.0)(to_fw(fw, X)),
    "grad returning a tuple": lambda fn, fw: fn.grad(lambda a: (a.sum(), a.sum()))(to_fw(fw, X)),
    "grad has_aux without aux": lambda fn, fw: fn.grad(lambda a: a.sum(), has_aux=True)(to_fw(fw, X)),
    "grad has_aux with three": lambda fn, fw: fn.grad(lambda a: (a.sum(), a, a), has_aux=True)(to_fw(fw, X)),
    "grad has_aux aux a float": lambda fn, fw: fn.grad(lambda a: (a.sum(), 1.0), has_aux=True)(to_fw(fw, X)),
    "jacrev has_aux without aux": lambda fn, fw: fn.jacrev(lambda a: a * 2, has_aux=True)(to_fw(fw, X)),
    "jacfwd has_aux without aux": lambda fn, fw: fn.jacfwd(lambda a: a * 2, has_aux=True)(to_fw(fw, X)),
    "jvp has_aux without aux": lambda fn, fw: fn.jvp(lambda a: a * 2, (to_fw(fw, X),), (to_fw(fw, X),), has_aux=True),
    "vjp has_aux without aux": lambda fn, fw: fn.vjp(lambda a: a * 2, to_fw(fw, X), has_aux=True),
    "jacrev has_aux aux None": lambda fn, fw: fn.jacrev(lambda a: (a * 2, None), has_aux=True)(to_fw(fw, X)),
    "jacfwd has_aux aux a float": lambda fn, fw: fn.jacfwd(lambda a: (a * 2, 1.0), has_aux=True)(to_fw(fw, X)),
    "jvp has_aux aux a float": lambda fn, fw: fn.jvp(lambda a: (a * 2, 1.0), (to_fw(fw, X),), (to_fw(fw, X),),
                                                     has_aux=True),
    "vjp_fn with a list for a tuple": lambda fn, fw: fn.vjp(lambda a: (a * 2, a), to_fw(fw, X))[1](
        [to_fw(fw, X), to_fw(fw, X)]),
    "vjp_fn with dict keys in another order": lambda fn, fw: fn.vjp(lambda a: {"p": a * 2, "q": a}, to_fw(fw, X))[1](
        {"q": to_fw(fw, X), "p": to_fw(fw, X)}),
    "vjp_fn of one for two": lambda fn, fw: fn.vjp(lambda a: (a * 2, a.sum()), to_fw(fw, X))[1](to_fw(fw, X)),
    "vjp_fn with a float": lambda fn, fw: fn.vjp(lambda a: a * 2, to_fw(fw, X))[1](1.0),
    "vjp_fn with another shape": lambda fn, fw: fn.vjp(lambda a: a * 2, to_fw(fw, X))[1](to_fw(fw, Y)),
    "argnums a list": lambda fn, fw: fn.jacrev(lambda a: a, argnums=[0])(to_fw(fw, X)),
    "argnums a float in a tuple": lambda fn, fw: fn.grad(lambda a, b: (a * b).sum(), argnums=(0, 1.0))(
        to_fw(fw, X), to_fw(fw, X)),
    "argnums out of range": lambda fn, fw: fn.jacfwd(lambda a: a, argnums=1)(to_fw(fw, X)),
    "argnums below range": lambda fn, fw: fn.jacrev(lambda a, b: a, argnums=-3)(to_fw(fw, X), to_fw(fw, X)),
    "argnums repeated": lambda fn, fw: fn.jacfwd(lambda a, b: a, argnums=(0, -2))(to_fw(fw, X), to_fw(fw, X)),
    "argnums empty": lambda fn, fw: fn.grad(lambda a: a.sum(), argnums=())(to_fw(fw, X)),
    "grad without arguments": lambda fn, fw: fn.grad(lambda: to_fw(fw, X).sum())(),
    "chunk_size 0": lambda fn, fw: fn.jacrev(lambda a: a, chunk_size=0),
    "randomness unknown": lambda fn, fw: fn.jacfwd(lambda a: a, randomness="bad")(to_fw(fw, X)),
}


@pytest.mark.parametrize("case", FUNC_ERRORS)
def test_what_torch_func_refuses_is_refused_in_its_words(case):
    assert_same_error(lambda: FUNC_ERRORS[case](func, tp), lambda: FUNC_ERRORS[case](tfunc, torch))


@pytest.mark.parametrize("name", ["jacrev", "vjp", "grad"])
def test_integer_inputs_cannot_require_grad_as_in_torch(name):
    def call(fn, fw):
        if name == "vjp":
            return fn.vjp(lambda a: a * 2, to_fw(fw, INTS))
        return getattr(fn, name)(lambda a: (a * 2).sum())(to_fw(fw, INTS))
    kind, _ = torch_error(lambda: call(tfunc, torch))
    with pytest.raises(kind, match="floating point"):
        call(func, tp)


def test_what_is_not_offered_raises_a_clear_error():
    x, v = ours(X), ours(Y[0] * X)
    with pytest.raises(NotImplementedError, match="forward mode inside forward mode"):
        func.jacfwd(func.jacfwd(lambda a: tp.sin(a).sum()))(x)
    with pytest.raises(NotImplementedError, match="reverse mode over forward mode"):
        func.jacrev(func.jacfwd(lambda a: tp.sin(a).sum()))(x)
    with pytest.raises(NotImplementedError, match="reverse mode over forward mode"):
        func.grad(lambda a: func.jvp(lambda b: tp.sin(b).sum(), (a,), (v,))[1])(x)


# ----- torch.autograd.functional ----------------------------------------------------------------------------


def one_input(fw, x):
    return fw.sin(x) * x.sum()


def two_outputs(fw, x):
    return fw.sin(x), (x ** 2).sum()


def two_inputs(fw, x, y):
    return fw.tanh(x) * (y ** 2).sum()


def two_by_two(fw, x, y):
    return x * y.sum(), fw.exp(y) * x[0]


def scalar_one(fw, x):
    return (fw.sin(x) * x.sum()).sum()


def scalar_two(fw, x, y):
    return s_two(fw, x, y)


ONE, TWO = (X,), (X, Y)
JACOBIANS = [(one_input, ONE), (two_outputs, ONE), (two_inputs, TWO), (two_by_two, TWO)]
STRATEGIES = [{}, {"vectorize": True}, {"strategy": "forward-mode", "vectorize": True}]


def as_inputs(arrays, make):
    """One Variable (tensor) for one array, a tuple for several: the two forms functional takes."""
    return make(arrays[0]) if len(arrays) == 1 else tuple(make(a) for a in arrays)


@pytest.mark.parametrize("kwargs", STRATEGIES, ids=str)
@pytest.mark.parametrize("f, arrays", JACOBIANS, ids=name_of)
def test_jacobian_nests_as_torchs(f, arrays, kwargs):
    result = functional.jacobian(lambda *a: f(tp, *a), as_inputs(arrays, ours), **kwargs)
    assert_same(result, TF.jacobian(lambda *a: f(torch, *a), as_inputs(arrays, theirs), **kwargs))


@pytest.mark.parametrize("kwargs", [{}, {"vectorize": True},
                                    {"outer_jacobian_strategy": "forward-mode", "vectorize": True}], ids=str)
@pytest.mark.parametrize("f, arrays", [(scalar_one, ONE), (scalar_two, TWO)], ids=name_of)
def test_hessian_nests_as_torchs(f, arrays, kwargs):
    result = functional.hessian(lambda *a: f(tp, *a), as_inputs(arrays, ours), **kwargs)
    assert_same(result, TF.hessian(lambda *a: f(torch, *a), as_inputs(arrays, theirs), **kwargs))


PRODUCTS = [("vjp", one_input, ONE, "out"), ("vjp", two_by_two, TWO, "out"), ("vjp", two_outputs, ONE, "out"),
            ("jvp", one_input, ONE, "in"), ("jvp", two_by_two, TWO, "in"), ("jvp", two_outputs, ONE, "in"),
            ("vhp", scalar_one, ONE, "in"), ("vhp", scalar_two, TWO, "in"),
            ("hvp", scalar_one, ONE, "in"), ("hvp", scalar_two, TWO, "in")]


def product_vector(f, arrays, side):
    """v shaped as the inputs ("in") or as the outputs ("out"), one Variable or a tuple."""
    if side == "in":
        return tuple(RNG.standard_normal(a.shape) for a in arrays)
    outputs = f(torch, *theirs(arrays))
    return tuple(RNG.standard_normal(tuple(y.shape)) for y in (outputs if isinstance(outputs, tuple) else (outputs,)))


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("name, f, arrays, side", PRODUCTS, ids=name_of)
def test_products_equal_torchs(name, f, arrays, side, create_graph):
    v = product_vector(f, arrays, side)
    inputs = as_inputs(arrays, lambda a: ours(a, create_graph))
    t_inputs = as_inputs(arrays, lambda a: theirs(a, create_graph))
    result = getattr(functional, name)(lambda *a: f(tp, *a), inputs, as_inputs(v, ours), create_graph=create_graph)
    expected = getattr(TF, name)(lambda *a: f(torch, *a), t_inputs, as_inputs(v, theirs), create_graph=create_graph)
    assert_same(result, expected)
    leaves, t_leaves = pytree.tree_flatten(result[1])[0], tpytree.tree_flatten(expected[1])[0]
    assert [y.requires_grad for y in leaves] == [y.requires_grad for y in t_leaves]
    if create_graph:  # differentiable, as torch's
        x, t_x = pytree.tree_flatten(inputs)[0], pytree.tree_flatten(t_inputs)[0]
        gradient = tp.autograd.grad(sum((y ** 2).sum() for y in leaves), x, allow_unused=True)
        t_gradient = torch.autograd.grad(sum((y ** 2).sum() for y in t_leaves), t_x, allow_unused=True)
        assert_same([g for g in gradient if g is not None], [g for g in t_gradient if g is not None])


@pytest.mark.parametrize("name", ["jacobian", "hessian"])
def test_jacobian_and_hessian_with_create_graph_are_differentiable(name):
    f = one_input if name == "jacobian" else scalar_one
    x, t_x = ours(X, requires_grad=True), theirs(X, requires_grad=True)
    result = getattr(functional, name)(lambda a: f(tp, a), x, create_graph=True)
    expected = getattr(TF, name)(lambda a: f(torch, a), t_x, create_graph=True)
    assert_same(result, expected)
    assert_same(tp.autograd.grad((result ** 2).sum(), x)[0], torch.autograd.grad((expected ** 2).sum(), t_x)[0])


def test_create_graph_differentiates_a_copy_of_the_input_not_the_variable_the_function_closes_over():
    """With create_graph the input is a view of the caller's Variable (torch's view_as): a * x differentiated in a
    at a = x is diag(x), not 2 diag(x)."""
    x, t_x = ours(X, requires_grad=True), theirs(X, requires_grad=True)
    assert_same(functional.jacobian(lambda a: a * x, x, create_graph=True),
                TF.jacobian(lambda a: a * t_x, t_x, create_graph=True))
    assert_same(functional.vjp(lambda a: (a * x).sum(), x, create_graph=True),
                TF.vjp(lambda a: (a * t_x).sum(), t_x, create_graph=True))


def test_v_may_be_none_for_one_element():
    t = np.array([0.7])
    for name, f in (("vjp", lambda fw, a: (fw.sin(a) * a).sum()), ("jvp", lambda fw, a: fw.sin(a) * a),
                    ("vhp", lambda fw, a: (fw.sin(a) * a).sum()), ("hvp", lambda fw, a: (fw.sin(a) * a).sum())):
        assert_same(getattr(functional, name)(lambda a, f=f: f(tp, a), ours(t)),
                    getattr(TF, name)(lambda a, f=f: f(torch, a), theirs(t)))


def lin(fw, x):
    return x * 2.0


def quad(fw, x):
    return (x * x).sum()


def const(fw, x):
    return to_fw(fw, Y)


def const_scalar(fw, x):
    return to_fw(fw, Y).sum()


FUNCTIONAL_ERRORS = {
    "jacobian of a list": lambda F, fw: F.jacobian(lambda a, b: a * b, [to_fw(fw, X), to_fw(fw, X)]),
    "jacobian of a float": lambda F, fw: F.jacobian(lambda a: a * 2, 3.0),
    "jacobian of a tuple holding a float": lambda F, fw: F.jacobian(lambda a, b: a * 2, (to_fw(fw, X), 3.0)),
    "jacobian of a dict": lambda F, fw: F.jacobian(lambda a: a, {"a": to_fw(fw, X)}),
    "jacobian returning a float": lambda F, fw: F.jacobian(lambda a: 1.0, to_fw(fw, X)),
    "jacobian returning a list": lambda F, fw: F.jacobian(lambda a: [a * 2, a], to_fw(fw, X)),
    "jacobian returning a tuple holding a float": lambda F, fw: F.jacobian(lambda a: (a * 2, 1.0), to_fw(fw, X)),
    "forward-mode jacobian returning a float": lambda F, fw: F.jacobian(lambda a: 1.0, to_fw(fw, X),
                                                                        strategy="forward-mode", vectorize=True),
    "forward-mode jacobian of a float": lambda F, fw: F.jacobian(lambda a: a, 1.0, strategy="forward-mode"),
    "jacobian strict, vectorize": lambda F, fw: F.jacobian(lambda a: a * a, to_fw(fw, X), strict=True,
                                                           vectorize=True),
    "jacobian strict, an input unused": lambda F, fw: F.jacobian(lambda a, b: a * 2, (to_fw(fw, X), to_fw(fw, Y)),
                                                                 strict=True),
    "jacobian strict, a constant": lambda F, fw: F.jacobian(lambda a: const(fw, a), to_fw(fw, X), strict=True),
    "jacobian strict, create_graph, linear": lambda F, fw: F.jacobian(lambda a: lin(fw, a), to_fw(fw, X),
                                                                      strict=True, create_graph=True),
    "hvp of floats": lambda F, fw: F.hvp(lambda a: a * a, 3.0, 1.0),
    "hvp of a float v": lambda F, fw: F.hvp(lambda a: quad(fw, a), to_fw(fw, X), 1.0),
    "hvp of lists": lambda F, fw: F.hvp(lambda a, b: (a * b).sum(), [to_fw(fw, X)] * 2, [to_fw(fw, X)] * 2),
    "hvp of a list v": lambda F, fw: F.hvp(lambda a, b: (a * b).sum(), (to_fw(fw, X),) * 2, [to_fw(fw, X)] * 2),
    "hvp returning a float": lambda F, fw: F.hvp(lambda a: 1.0, to_fw(fw, X), to_fw(fw, X)),
    "hvp returning a tuple": lambda F, fw: F.hvp(lambda a: (a.sum(),), to_fw(fw, X), to_fw(fw, X)),
    "hvp of a vector function": lambda F, fw: F.hvp(lambda a: a * a, to_fw(fw, X), to_fw(fw, X)),
    "vhp of floats": lambda F, fw: F.vhp(lambda a: a * a, 3.0, 1.0),
    "vjp of a list": lambda F, fw: F.vjp(lambda a, b: a * b, [to_fw(fw, X)] * 2, to_fw(fw, X)),
    "vjp of a float v": lambda F, fw: F.vjp(lambda a: a * 3, to_fw(fw, X), 1.0),
    "vjp returning a float": lambda F, fw: F.vjp(lambda a: 3.0, to_fw(fw, X), to_fw(fw, X)),
    "vjp without v of a vector": lambda F, fw: F.vjp(lambda a: a * 3, to_fw(fw, X)),
    "vjp of one v for two outputs": lambda F, fw: F.vjp(lambda a: (a * 3, a), to_fw(fw, X), to_fw(fw, X)),
    "vjp of v of another shape": lambda F, fw: F.vjp(lambda a: a * 3, to_fw(fw, X), to_fw(fw, Y)),
    "vjp strict, an input unused": lambda F, fw: F.vjp(lambda a, b: a * 3, (to_fw(fw, X), to_fw(fw, Y)),
                                                       to_fw(fw, X), strict=True),
    "vjp strict, a constant": lambda F, fw: F.vjp(lambda a: const(fw, a), to_fw(fw, X), to_fw(fw, Y), strict=True),
    "vjp strict, create_graph, linear": lambda F, fw: F.vjp(lambda a: lin(fw, a), to_fw(fw, X), to_fw(fw, X),
                                                            strict=True, create_graph=True),
    "jvp of a list": lambda F, fw: F.jvp(lambda a, b: a * b, [to_fw(fw, X)] * 2, [to_fw(fw, X)] * 2),
    "jvp returning a float": lambda F, fw: F.jvp(lambda a: 3.0, to_fw(fw, X), to_fw(fw, X)),
    "jvp without v of a vector": lambda F, fw: F.jvp(lambda a: a * 3, to_fw(fw, X)),
    "jvp of v of another shape": lambda F, fw: F.jvp(lambda a: a * 3, to_fw(fw, X), to_fw(fw, Y)),
    "jvp of entry 1 of another shape": lambda F, fw: F.jvp(lambda a, b: a * b.sum(), (to_fw(fw, X),) * 2,
                                                           (to_fw(fw, X), to_fw(fw, Y))),
    "jvp strict, an input unused": lambda F, fw: F.jvp(lambda a, b: a * 3, (to_fw(fw, X), to_fw(fw, Y)),
                                                       (to_fw(fw, X), to_fw(fw, Y)), strict=True),
    "jvp strict, a constant": lambda F, fw: F.jvp(lambda a: const(fw, a), to_fw(fw, X), to_fw(fw, X), strict=True),
    "jvp strict, create_graph, linear": lambda F, fw: F.jvp(lambda a: lin(fw, a), to_fw(fw, X), to_fw(fw, X),
                                                            strict=True, create_graph=True),
    "hessian of a list": lambda F, fw: F.hessian(lambda a, b: (a * b).sum(), [to_fw(fw, X)] * 2),
    "hessian returning a float": lambda F, fw: F.hessian(lambda a: 1.0, to_fw(fw, X)),
    "hessian returning a tuple": lambda F, fw: F.hessian(lambda a: (quad(fw, a),), to_fw(fw, X)),
    "hessian of a vector function": lambda F, fw: F.hessian(lambda a: a ** 3, to_fw(fw, X)),
    "hessian, an unknown strategy": lambda F, fw: F.hessian(lambda a: quad(fw, a), to_fw(fw, X),
                                                            outer_jacobian_strategy="bad"),
    "hessian, forward mode without vectorize": lambda F, fw: F.hessian(lambda a: quad(fw, a), to_fw(fw, X),
                                                                       outer_jacobian_strategy="forward-mode"),
    "hessian strict, linear": lambda F, fw: F.hessian(lambda a: a.sum(), to_fw(fw, X), strict=True),
    "hessian strict, an input unused": lambda F, fw: F.hessian(lambda a, b: quad(fw, a), (to_fw(fw, X),) * 2,
                                                               strict=True),
    "hessian strict, create_graph, quadratic": lambda F, fw: F.hessian(lambda a: quad(fw, a), to_fw(fw, X),
                                                                       strict=True, create_graph=True),
    "vhp strict, linear": lambda F, fw: F.vhp(lambda a: a.sum(), to_fw(fw, X), to_fw(fw, X), strict=True),
    "hvp strict, linear": lambda F, fw: F.hvp(lambda a: a.sum(), to_fw(fw, X), to_fw(fw, X), strict=True),
    "vhp strict, a constant": lambda F, fw: F.vhp(lambda a: const_scalar(fw, a), to_fw(fw, X), to_fw(fw, X),
                                                  strict=True),
    "hvp strict, create_graph, quadratic": lambda F, fw: F.hvp(lambda a: quad(fw, a), to_fw(fw, X), to_fw(fw, X),
                                                               strict=True, create_graph=True),
    "vhp strict, create_graph, quadratic": lambda F, fw: F.vhp(lambda a: quad(fw, a), to_fw(fw, X), to_fw(fw, X),
                                                               strict=True, create_graph=True),
    "vhp of v of the wrong length": lambda F, fw: F.vhp(lambda a, b: (a * b).sum(), (to_fw(fw, X),) * 2,
                                                        (to_fw(fw, X),)),
}


@pytest.mark.parametrize("case", FUNCTIONAL_ERRORS)
def test_what_torch_autograd_functional_refuses_is_refused_in_its_words(case):
    assert_same_error(lambda: FUNCTIONAL_ERRORS[case](functional, tp), lambda: FUNCTIONAL_ERRORS[case](TF, torch))


def test_strict_answers_what_torch_answers_where_it_does_not_refuse():
    """strict=True passes a quadratic's Hessian, a linear jvp, a Jacobian with create_graph; zeros without it."""
    cases = [("hessian", quad, {"strict": True}), ("jvp", lin, {"strict": True}),
             ("jacobian", lambda fw, a: a * a, {"strict": True, "create_graph": True}),
             ("jacobian", const, {}), ("hessian", lambda fw, a: a.sum(), {})]
    for name, f, kwargs in cases:
        args = (ours(X),) + ((ours(X),) if name == "jvp" else ())
        t_args = (theirs(X),) + ((theirs(X),) if name == "jvp" else ())
        assert_same(getattr(functional, name)(lambda a, f=f: f(tp, a), *args, **kwargs),
                    getattr(TF, name)(lambda a, f=f: f(torch, a), *t_args, **kwargs))
