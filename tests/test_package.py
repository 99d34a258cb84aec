"""Tests of the tinypytorch package as packaged in step 23 (core, functions, cuda, utils), with the
stage-3 plumbing it has since gained: gradients as Variables and `create_graph` (step 27),
broadcasting in `+ - * /` (step 30), and PyTorch's `requires_grad` rules (step 33) where they
change what a step-23 test may expect.

Expected values come from PyTorch (float64), from numerical gradients, or from maths
worked out here; never from the package itself.
"""
import fractions
import gc
import pathlib
import re
import subprocess
import sys
import textwrap
import tracemalloc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes

import tinypytorch
from memory import assert_graph_freed_by_reference_counting
from reference import (
    assert_close_to_torch, evaluate, floats, operation_lists, torch_derivatives, torch_grad_after_reusing_the_output,
)
from tinypytorch import Config, Function, Variable, cuda, no_grad, using_config
from tinypytorch.utils import gradient_check, numerical_diff

pytestmark = [pytest.mark.step23, pytest.mark.torch]


# ----- the array backend: the xp fixture (tests/conftest.py), the cupy case marked gpu ---------

def test_grads_on_each_backend_equal_torch(xp):
    data = np.array([0.5, -1.0, 2.0])
    x = Variable(xp.asarray(data))
    y = tinypytorch.exp(x) * 2.0 - 1.0 / (x + 3.0) + x**3
    y.sum().backward()
    assert cuda.get_array_module(y) is xp and cuda.get_array_module(x.grad) is xp
    t = torch.tensor(data, requires_grad=True)
    (torch.exp(t) * 2.0 - 1.0 / (t + 3.0) + t**3).sum().backward()
    np.testing.assert_allclose(cuda.as_numpy(x.grad), t.grad.numpy(), rtol=1e-12)


def test_get_array_module_is_numpy_for_numpy_data_variables_and_numbers():
    array = np.ones(3)
    assert cuda.get_array_module(array) is np
    assert cuda.get_array_module(Variable(array)) is np
    assert cuda.get_array_module(2.0) is np
    assert cuda.get_array_module(Variable(array), 2.0) is np


def test_as_numpy_unwraps_variables_and_numbers():
    array = np.arange(3.0)
    assert cuda.as_numpy(Variable(array)) is array
    assert cuda.as_numpy(2.5).shape == () and cuda.as_numpy(2.5) == 2.5


@pytest.mark.skipif(cuda.GPU, reason="needs a machine without a usable GPU")
def test_as_cupy_without_a_gpu_raises_a_clear_error():
    with pytest.raises(RuntimeError, match="as_cupy: CuPy with a usable GPU is required"):
        cuda.as_cupy(np.ones(2))


def _import_in_fresh_python(cupy_init):
    """Import tinypytorch in a new interpreter where `import cupy` runs `cupy_init` (None: absent)."""
    setup = "import sys; sys.modules['cupy'] = None" if cupy_init is None else textwrap.dedent(f"""
        import sys, types, importlib.abc, importlib.util
        class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path, target=None):
                return importlib.util.spec_from_loader(name, self) if name in ('cupy', 'cupyx') else None
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                if module.__name__ == 'cupy':  # cupyx, CuPy's extras, comes with it: an empty module here
                    exec({cupy_init!r}, module.__dict__)
        sys.meta_path.insert(0, Finder())
    """)
    code = setup + "\nimport tinypytorch\nprint(tinypytorch.cuda.GPU, tinypytorch.cuda.cupy is None)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_import_works_without_cupy():
    assert _import_in_fresh_python(None) == ["False", "True"]


def test_import_works_when_importing_cupy_fails_with_any_error():
    # CuPy can fail at import with OSError or RuntimeError when CUDA libraries are missing
    assert _import_in_fresh_python("raise OSError('libcuda.so: cannot open shared object file')") == ["False", "True"]


def test_gpu_flag_asks_is_available_not_whether_import_succeeded():
    fake = "class ndarray: pass\ndef is_available(): return False"
    assert _import_in_fresh_python(fake) == ["False", "False"]


# ----- bad input ----------------------------------------------------------------------

@pytest.mark.parametrize("data, name", [(1.0, "float"), ([1, 2], "list"), (np.float64(1.0), "float64"), ("1", "str")])
def test_variable_rejects_non_arrays_naming_the_type(data, name):
    with pytest.raises(TypeError, match=f"got {name}$"):
        Variable(data)


@pytest.mark.parametrize("operation, op, typename", [
    (lambda x: x + "abc", "add", "str"),
    (lambda x: "abc" + x, "add", "str"),  # str.__add__ returns NotImplemented, so x.__radd__ runs
    (lambda x: x * {}, "mul", "dict"),
    (lambda x: {} * x, "mul", "dict"),
    (lambda x: x - object(), "sub", "object"),
    (lambda x: [1] - x, "sub", "list"),
    (lambda x: x / [1], "div", "list"),
    (lambda x: None / x, "div", "NoneType"),
    (lambda x: tinypytorch.exp("abc"), "exp", "str"),
    (lambda x: -x + (1,), "add", "tuple"),
    (lambda x: x + fractions.Fraction(1, 2), "add", "Fraction"),  # would become an object array
])
def test_operators_reject_unsupported_operands_naming_op_and_type(operation, op, typename):
    with pytest.raises(TypeError, match=f"^{op}: unsupported operand type {typename}$"):
        operation(Variable(np.array([1.0, 2.0])))


@pytest.mark.parametrize("operation, op", [
    (lambda a, b: a + b, "add"), (lambda a, b: a - b, "sub"), (lambda a, b: a * b, "mul"), (lambda a, b: a / b, "div"),
])
@pytest.mark.parametrize("shape0, shape1", [((2,), (3,)), ((2, 3), (3, 2)), ((2, 3), (2,)), ((4, 1, 3), (2, 2))])
def test_binary_ops_reject_shapes_that_do_not_broadcast_naming_op_and_both_shapes(operation, op, shape0, shape1):
    with pytest.raises(ValueError):
        np.broadcast_shapes(shape0, shape1)  # the pair really is incompatible
    a, b = Variable(np.ones(shape0)), Variable(np.ones(shape1))
    message = "^" + re.escape(f"{op}: shapes {shape0} and {shape1} do not broadcast") + "$"
    with pytest.raises(ValueError, match=message):
        operation(a, b)
    with pytest.raises(ValueError, match=message):
        operation(a, np.ones(shape1))  # an ndarray operand is checked the same way
    with pytest.raises(ValueError, match=message):
        operation(np.ones(shape0), b)  # and on the left, through the reflected method, in written order


def test_function_without_forward_or_backward_raises_not_implemented():
    class Forgetful(Function):
        pass

    class NoBackward(Function):
        def forward(self, x):
            return x * 2

    with pytest.raises(NotImplementedError, match="^Forgetful.forward is not implemented$"):
        Forgetful()(np.array(1.0))
    y = NoBackward()(Variable(np.array(1.0)))  # a Variable: a bare array would be a constant (step 33)
    with pytest.raises(NotImplementedError, match="^NoBackward.backward is not implemented$"):
        y.backward()


def test_using_config_rejects_unknown_options_and_changes_nothing():
    with pytest.raises(ValueError, match="using_config: unknown option 'no_such'; known options: enable_backprop"):
        with using_config("no_such", 1):
            pass
    assert not hasattr(Config, "no_such") and Config.enable_backprop is True


def test_using_config_restores_the_old_value_even_on_error():
    with pytest.raises(KeyError):
        with using_config("enable_backprop", False):
            assert Config.enable_backprop is False
            raise KeyError("inside the block")
    assert Config.enable_backprop is True


@pytest.mark.parametrize("exponent, typename", [("2", "str"), (1j, "complex")])
def test_pow_rejects_an_exponent_that_is_not_a_tensor_or_a_real_number(exponent, typename):
    with pytest.raises(TypeError, match=f"^pow: the exponent must be a number or a tensor, got {typename}$"):
        Variable(np.array(3.0)) ** exponent


@pytest.mark.parametrize("case", ["tensor ** tensor", "number ** tensor", "tensor ** array"])
def test_a_tensor_exponent_or_a_number_base_gives_torchs_values_and_gradients(case):
    base, exponent = np.array([0.5, 2.0, 0.0, 3.0]), np.array([2.0, -1.5, 2.0, 0.0])

    def run(fw, leaf):
        b, e = leaf(base), leaf(exponent)
        y = {"tensor ** tensor": lambda: b ** e, "number ** tensor": lambda: 2.0 ** e,
             "tensor ** array": lambda: b ** (exponent if fw is tinypytorch else torch.from_numpy(exponent))}[case]()
        y.sum().backward()
        return y, b.grad, e.grad

    ours = run(tinypytorch, lambda v: tinypytorch.tensor(v, dtype=np.float64, requires_grad=True))
    theirs = run(torch, lambda v: torch.tensor(v, requires_grad=True))
    assert ours[0].grad_fn.name() == theirs[0].grad_fn.name()  # PowBackward1, or PowBackward2 for a number base
    for a, b in zip(ours, theirs):
        if b is None:
            assert a is None
        else:
            assert_close_to_torch(a.data, b.detach().numpy())


def test_len_of_a_0d_variable_raises_and_len_of_an_array_is_its_first_axis():
    with pytest.raises(TypeError, match=r"^len\(\) of a 0-d Variable$"):
        len(Variable(np.array(1.0)))
    assert len(Variable(np.zeros((4, 2)))) == 4


# ----- Variable's ergonomics and repr (the contract notebooks rely on) -----------------

# float64 data is not the default dtype: torch's repr adds ", dtype=torch.float64" before requires_grad, as here
@pytest.mark.parametrize("data, name, expected", [
    (None, None, "variable(None)"),
    (np.array(1.5), None, "variable(1.5000, dtype=torch.float64, requires_grad=True)"),  # a leaf that requires grad
    (np.array(2.0), "x", "variable(2.0000, name='x', dtype=torch.float64, requires_grad=True)"),  # says so, as torch
    (np.array([1.0, 2.0]), None, "variable([1.0000, 2.0000], dtype=torch.float64, requires_grad=True)"),
    (np.array([[1.0, 2.0], [3.0, 4.0]]), None,
     "variable([[1.0000, 2.0000],\n          [3.0000, 4.0000]], dtype=torch.float64, requires_grad=True)"),
    (np.array([1, 2, 3]), None, "variable([1, 2, 3])"),  # integers require no grad; int64 is implied
])
def test_repr_is_fixed_precision_and_aligned(data, name, expected):
    assert repr(Variable(data, name=name)) == expected


REPR_DTYPES = ["float16", "float32", "float64", "int32", "int64", "bool", "complex64", "complex128"]


@pytest.mark.parametrize("default", ["float32", "float64"])
@pytest.mark.parametrize("name", REPR_DTYPES)
def test_repr_names_the_dtype_exactly_where_torchs_does(name, default):
    """torch's repr leaves out the dtypes a literal gets (the default float, its complex, int64, bool) and prints
    ", dtype=torch.float64" for the others, before grad_fn or requires_grad: the same suffix here, under either
    default dtype."""
    tinypytorch.set_default_dtype(getattr(tinypytorch, default))
    torch.set_default_dtype(getattr(torch, default))
    try:
        ours, theirs = tinypytorch.tensor([1, 0], dtype=getattr(tinypytorch, name)), \
            torch.tensor([1, 0], dtype=getattr(torch, name))
        pairs = [(ours, theirs)]
        if name.startswith("float"):  # and with what follows the dtype
            pairs += [(ours.requires_grad_(), theirs.requires_grad_()), (ours * 2, theirs * 2)]
        for x, t in pairs:
            suffix = re.search(r"\]((, dtype=torch\.\w+)?(, (grad_fn=<\w+>|requires_grad=True))?)\)$", repr(t))
            assert suffix is not None, repr(t)
            assert repr(x).endswith("]" + suffix.group(1) + ")"), (repr(x), repr(t))
        assert str(ours.dtype) == str(theirs.dtype) == f"torch.{name}"
    finally:
        tinypytorch.set_default_dtype(tinypytorch.float32)
        torch.set_default_dtype(torch.float32)


def test_properties_mirror_the_array():
    data = np.zeros((2, 3), dtype=np.float32)
    x = Variable(data, name="w")
    assert (x.shape, x.ndim, x.numel(), x.dtype, x.name) == ((2, 3), 2, 6, np.float32, "w")
    assert (x.size(), x.size(1), x.dim()) == ((2, 3), 3, 2)  # PyTorch's size(), not NumPy's
    assert x.grad is None and x.creator is None and x.generation == 0


def test_function_records_generation_creator_edges_and_weak_outputs():
    x = Variable(np.array(2.0))
    h = tinypytorch.exp(x)
    f = h.creator
    xh = x * h
    y = xh * 3.0
    g = xh.creator
    assert (x.generation, f.generation, h.generation, g.generation, xh.generation) == (0, 0, 1, 1, 2)
    # step 35: an edge per input, to where its gradient goes: the leaf itself, (creator, output index), or
    # nothing for a constant
    assert f.edges == ((x, 0),) and g.edges == ((x, 0), (f, 0)) and y.creator.edges == ((g, 0), (None, 0))
    assert all(isinstance(ref, weakref.ref) for ref in g.outputs) and not hasattr(g, "inputs")
    assert f.outputs[0]() is h and f.output_meta == (((), np.float64),)


def test_array_protocol_gives_the_data_so_numpy_accepts_a_variable():
    data = np.array([[1.5, -2.0], [0.25, 3.0]])
    x = Variable(data)
    converted = np.asarray(x)
    assert type(converted) is np.ndarray and converted.dtype == np.float64
    np.testing.assert_array_equal(converted, data)
    as_float32 = np.asarray(x, dtype=np.float32)
    assert as_float32.dtype == np.float32
    np.testing.assert_array_equal(as_float32, data.astype(np.float32))
    # a list of 0-d Variables (gradients, say) becomes a float array, not an array of objects
    pair = np.array([Variable(np.array(1.5)), Variable(np.array(-2.0))])
    assert pair.dtype == np.float64 and pair.tolist() == [1.5, -2.0]


def test_array_protocol_refuses_a_copy_free_conversion():
    with pytest.raises(ValueError, match=r"^Variable.__array__: a copy-free conversion is not supported$"):
        np.asarray(Variable(np.ones(2)), copy=False)


@pytest.mark.parametrize("spec", [".4f", ".3e", ">10.2f", "+.1f", "g"])
def test_a_format_spec_formats_a_0d_variable_as_torch_formats_a_0d_tensor(spec):
    value = -2.0 / 3.0
    expected = format(torch.tensor(value, dtype=torch.float64), spec)
    assert format(Variable(np.array(value)), spec) == expected == format(value, spec)


def test_format_without_a_spec_is_the_repr_and_a_spec_on_an_array_is_a_type_error_as_in_torch():
    x = Variable(np.array(2.0 / 3.0))
    assert f"{x}" == "variable(0.6667, dtype=torch.float64, requires_grad=True)" == repr(x)
    with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
        format(torch.ones(2), ".2f")
    with pytest.raises(TypeError, match="unsupported format string passed to Variable.__format__"):
        format(Variable(np.ones(2)), ".2f")


@pytest.mark.parametrize("data", [np.array(2.5), np.array([2.5]), np.array([[-0.75]]), np.array(3), np.array([7])])
def test_item_and_float_of_a_one_element_variable_equal_torchs(data):
    x, t = Variable(data), torch.tensor(data)
    assert x.item() == t.item() and type(x.item()) is type(t.item())  # float for floats, int for ints
    assert float(x) == float(t) and type(float(x)) is float


@pytest.mark.parametrize("conversion", [Variable.item, float], ids=["item", "float"])
def test_item_and_float_of_several_elements_raise_as_torch(conversion):
    with pytest.raises(Exception) as theirs:
        conversion(torch.tensor([1.0, 2.0]))
    # (torch 2.13's item() message prints a method where the count belongs: its fixed words are compared)
    words = "elements cannot be converted to Scalar" if conversion is Variable.item else str(theirs.value)
    with pytest.raises(theirs.type, match=words):
        conversion(Variable(np.array([1.0, 2.0])))


# ----- memory: no cycles, deep graphs, no_grad -----------------------------------------

def test_no_reference_cycle_keeps_a_graph_alive():
    assert_graph_freed_by_reference_counting(lambda y, x: y.backward())


def test_a_100000_deep_chain_backpropagates_and_is_freed_without_recursion():
    x = Variable(np.array(1.0))
    y = x
    for _ in range(100_000):
        y = y + 1.0
    y.backward()  # a recursive backward would raise RecursionError at about 1,000 levels
    assert x.grad.item() == 1.0 and y.generation == 100_000
    first = weakref.ref(_first_function_of(y))
    gc.disable()
    try:
        del y  # frees 100,000 nested objects: must not overflow the C stack
        assert first() is None
    finally:
        gc.enable()


def _first_function_of(y):
    f = y.creator
    while isinstance(f.edges[0][0], Function):
        f = f.edges[0][0]
    return f


def test_no_grad_records_no_creator_and_holds_no_intermediate():
    x = Variable(np.ones(1000))
    with no_grad():
        f = tinypytorch.functions.Exp()
        h = f(x)
        y = tinypytorch.square(h)
    assert y.creator is None and h.creator is None and not hasattr(f, "inputs")
    intermediate = weakref.ref(h)
    del h
    assert intermediate() is None  # nothing in y's graph refers to it
    with_graph = tinypytorch.exp(x)
    y = tinypytorch.square(with_graph)
    kept = weakref.ref(with_graph)
    del with_graph
    assert kept() is not None  # the recorded graph does hold it


def test_no_grad_saves_the_memory_of_intermediates():
    def held_bytes(enable):
        x = Variable(np.ones(100_000))
        tracemalloc.start()
        with using_config("enable_backprop", enable):
            y = x
            for _ in range(10):
                y = tinypytorch.square(y * 0.5)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return held

    one_array = 100_000 * 8
    # step 35: each Square saves its input for backward (10 arrays; a Mul by a number saves no
    # tensor), and y itself survives: 11 arrays. Recorded without saving, it would be 20 + 1.
    assert 10.5 * one_array < held_bytes(True) < 11.5 * one_array
    assert held_bytes(False) < 2 * one_array  # only y survives


def test_backward_of_a_variable_without_creator_behaves_as_in_torch():
    # DeZero PR #41: backward on a variable without a creator died with an AttributeError
    x = Variable(np.array([1.0, 2.0]))
    x.backward(np.ones(2))  # a leaf: dx/dx is ones, as torch's leaf.backward(ones) gives
    t = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    t.backward(torch.ones_like(t))
    assert isinstance(x.grad, Variable)
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())
    # a result of no_grad has no graph behind it and no leaf to fill: a clear RuntimeError (step 33)
    with no_grad():
        y = x * 3.0
    with torch.no_grad():
        yt = t * 3.0
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        yt.backward(torch.ones_like(yt))
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        y.backward()
    np.testing.assert_array_equal(x.grad.data, [1.0, 1.0])  # untouched


# ----- random graphs with shared sub-expressions, against torch -------------------------

UNARY = {
    "neg": lambda m, a: -a,
    "square": lambda m, a: m.square(a),
    "exp": lambda m, a: m.exp(a * 0.25),
    "pow3": lambda m, a: a**3,
    "pow-1": lambda m, a: a**-1,
    "1.5 + a": lambda m, a: 1.5 + a,
    "2 - a": lambda m, a: 2.0 - a,
    "a * 0.5": lambda m, a: a * 0.5,
    "1 / a": lambda m, a: 1.0 / a,
}
BINARY = {
    "add": lambda m, a, b: a + b,
    "sub": lambda m, a, b: a - b,
    "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b,
}


@st.composite
def expression_graphs(draw):
    """Inputs (2-3 arrays, one maybe 0-d) and a list of operations on earlier nodes, reused freely."""
    shape = draw(st.sampled_from([(), (3,), (2, 2)]))
    count = draw(st.integers(2, 3))
    shapes = [shape] * count
    if draw(st.booleans()):
        shapes[-1] = ()  # a 0-d input mixed with arrays
    inputs = [draw(arrays(np.float64, s, elements=floats(0.5, 2.0))) for s in shapes]
    return inputs, draw(operation_lists(UNARY, BINARY, max_size=12))


def moderate_torch_nodes(graph):
    """The graph's leaf tensors and all its nodes in torch. A graph with a node that overflows or comes
    close to it (x - x then 1 / that gives inf in both frameworks) is skipped (assume)."""
    inputs, operations = graph
    tensors = [torch.tensor(a, requires_grad=True) for a in inputs]
    nodes_t = evaluate(torch, tensors, operations, UNARY, BINARY)
    assume(all(bool(torch.isfinite(t).all()) and float(t.detach().abs().max()) < 1e8 for t in nodes_t))
    return tensors, nodes_t


def assert_grads_equal(variables, tensors):
    expected = [None if t.grad is None else t.grad.numpy() for t in tensors]
    # Where terms cancel (x / x has gradient 1/x - x/x^2 = 0), a different order of operations
    # leaves a rounding error of about 1e-16 times the terms; atol allows that, scaled like them.
    scale = max([1.0] + [float(np.abs(e).max()) for e in expected if e is not None])
    for variable, grad in zip(variables, expected):
        if grad is None:
            assert variable.grad is None
        else:
            np.testing.assert_allclose(variable.grad, grad, rtol=1e-10, atol=1e-12 * scale)


@given(expression_graphs())
def test_random_graphs_with_shared_nodes_match_torch_and_repeated_backward_accumulates(graph):
    inputs, operations = graph
    tensors, nodes_t = moderate_torch_nodes(graph)
    out_t = nodes_t[-1]
    variables = [Variable(a.copy()) for a in inputs]
    out = evaluate(tinypytorch, variables, operations, UNARY, BINARY)[-1]
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), rtol=1e-10)
    assert out.shape == tuple(out_t.shape)
    for _ in range(2):  # the second call adds the same gradients again, as in torch
        out.sum().backward(retain_graph=True)
        out_t.backward(torch.ones_like(out_t), retain_graph=True)
        assume(all(t.grad is None or torch.isfinite(t.grad).all() for t in tensors))
        assert_grads_equal(variables, tensors)


@given(expression_graphs())
def test_retain_grad_keeps_intermediate_grads_equal_to_torch(graph):
    inputs, operations = graph
    _, nodes_t = moderate_torch_nodes(graph)
    intermediates_t = nodes_t[len(inputs):-1]
    for t in intermediates_t:
        t.retain_grad()
    nodes_t[-1].backward(torch.ones_like(nodes_t[-1]))
    assume(all(t.grad is None or torch.isfinite(t.grad).all() for t in nodes_t[:-1]))

    nodes = evaluate(tinypytorch, [Variable(a.copy()) for a in inputs], operations, UNARY, BINARY)
    nodes[-1].sum().backward()
    assert all(node.grad is None for node in nodes[len(inputs):])  # by default only leaves keep grads

    nodes = evaluate(tinypytorch, [Variable(a.copy()) for a in inputs], operations, UNARY, BINARY)
    nodes[-1].sum().backward(retain_grad=True)
    assert_grads_equal(nodes[len(inputs):-1], intermediates_t)  # unused ones stay None, as in torch
    assert_grads_equal(nodes[: len(inputs)], nodes_t[: len(inputs)])


def test_backward_on_a_variable_that_later_becomes_an_intermediate_matches_torch():
    # y.backward() must not leave a seed on y that a later pass through y would add to
    x = Variable(np.array(1.0))
    y = x * 2
    y.backward()
    (y * 3).backward()
    assert y.grad is None and x.grad.item() == torch_grad_after_reusing_the_output() == 8.0  # 2 + 3 * 2


def test_gradients_of_0d_variables_are_variables_holding_0d_arrays_not_numpy_scalars():
    x = Variable(np.array(3.0))
    y = tinypytorch.square(x) * x + x  # 0-d arithmetic returns NumPy scalars; grads must hold ndarrays
    y.backward()
    assert isinstance(x.grad, Variable) and type(x.grad.data) is np.ndarray
    assert x.grad.shape == () and x.grad.item() == 3 * 9.0 + 1


def test_a_reused_non_leaf_gets_the_sum_of_its_paths():
    # micrograd PR #64's counterexample: b = a + a; c = b + b; dc/da = 4
    a = Variable(np.array(3.0))
    b = a + a
    c = b + b
    c.backward()
    assert a.grad.item() == 4.0


def test_adding_a_variable_to_itself_does_not_share_one_grad_array():
    # Add.backward returns the same array for both inputs; accumulation must not write into it
    x, y = Variable(np.array([1.0, 2.0])), Variable(np.array([3.0, 4.0]))
    z = x + y
    w = z + x
    w.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, 2.0])
    np.testing.assert_array_equal(y.grad, [1.0, 1.0])


# ----- a 0-d operand with an array -----------------------------------------------------

@given(
    s=floats(0.5, 2.0),
    a=arrays(np.float64, st.sampled_from([(3,), (2, 3)]), elements=floats(0.5, 2.0)),
    op=st.sampled_from(sorted(BINARY)),
    scalar_first=st.booleans(),
)
def test_0d_operand_with_an_array_gets_the_summed_gradient_like_torch(s, a, op, scalar_first):
    sv, av = Variable(np.array(s)), Variable(a.copy())
    st_, at = torch.tensor(s, dtype=torch.float64, requires_grad=True), torch.tensor(a, requires_grad=True)
    f = BINARY[op]
    out = f(None, sv, av) if scalar_first else f(None, av, sv)
    out_t = f(None, st_, at) if scalar_first else f(None, at, st_)
    out.sum().backward()
    out_t.backward(torch.ones_like(out_t))
    assert out.shape == a.shape and sv.grad.shape == () and av.grad.shape == a.shape
    assert isinstance(sv.grad, Variable) and type(sv.grad.data) is np.ndarray
    np.testing.assert_allclose(sv.grad, st_.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(av.grad, at.grad.numpy(), rtol=1e-12)


@given(a=arrays(np.float64, (3,), elements=floats(-3.0, 3.0)), c=st.sampled_from([0, 1, 2, 3, -1, -2, 0.5, 2.5]))
def test_pow_gradient_equals_torch_including_exponent_zero(a, c):
    if c != int(c):
        a = np.abs(a) + 0.1  # a fractional power of a negative number is nan in both
    if c < 0:
        a = np.where(np.abs(a) < 0.1, 0.5, a)
    x, t = Variable(a.copy()), torch.tensor(a, requires_grad=True)
    (x**c).sum().backward()
    (t**c).backward(torch.ones_like(t))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12)


def test_mixing_with_ndarrays_and_numpy_scalars_on_either_side():
    x = Variable(np.array([1.0, 2.0]))
    for y in (np.array(2.0) + x, np.float64(2.0) * x, np.array([1.0, 1.0]) - x, 4.0 / x):
        assert isinstance(y, Variable)
    y = np.array([3.0, 5.0]) / x
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [-3.0, -5.0 / 4.0], rtol=1e-15)  # d(c/x)/dx = -c/x^2


# ----- broadcasting in + - * / (step 30) --------------------------------------------------

BROADCAST_EXPRESSIONS = dict(BINARY, **{
    "a * b - a / (b + 1)": lambda m, a, b: a * b - a / (b + 1.0),  # each input reaches the output twice
    "square(a + b) * exp(b * 0.25)": lambda m, a, b: m.square(a + b) * m.exp(b * 0.25),
})


def compare_broadcast_with_torch(expression, v0, v1):
    x0, x1 = Variable(v0.copy()), Variable(v1.copy())
    out = expression(tinypytorch, x0, x1)
    out.sum().backward()
    t0, t1 = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    out_t = expression(torch, t0, t1)
    out_t.backward(torch.ones_like(out_t))
    assert out.shape == tuple(out_t.shape) == np.broadcast_shapes(v0.shape, v1.shape)
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), rtol=1e-12)
    for x, t in [(x0, t0), (x1, t1)]:
        assert isinstance(x.grad, Variable) and x.grad.shape == x.shape  # summed back to the input's shape
        np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape0, shape1", [
    ((2, 3), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3)), ((3, 1), (2, 1, 4)), ((1,), (2, 3)), ((2, 3, 4), (3, 1)),
    ((1, 1), ()), ((2, 3), (2, 3)),
])
@pytest.mark.parametrize("name", sorted(BROADCAST_EXPRESSIONS))
def test_broadcasting_values_and_grads_equal_torch_for_fixed_shape_pairs(name, shape0, shape1):
    rng = np.random.default_rng(0)
    v0, v1 = rng.uniform(0.5, 2.0, shape0), rng.uniform(0.5, 2.0, shape1)
    compare_broadcast_with_torch(BROADCAST_EXPRESSIONS[name], v0, v1)


@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3),
    name=st.sampled_from(sorted(BROADCAST_EXPRESSIONS)),
    data=st.data(),
)
def test_broadcasting_values_and_grads_equal_torch_for_random_shape_pairs(shapes, name, data):
    v0, v1 = (data.draw(arrays(np.float64, shape, elements=floats(0.5, 2.0))) for shape in shapes.input_shapes)
    compare_broadcast_with_torch(BROADCAST_EXPRESSIONS[name], v0, v1)


# ----- higher-order derivatives: create_graph (step 27) ----------------------------------

UNARY_SMOOTH = {
    "x ** 4": lambda m, x: x**4,
    "sin(x)": lambda m, x: m.sin(x),
    "cos(x)": lambda m, x: m.cos(x),
    "tanh(x)": lambda m, x: m.tanh(x),
    "x ** 3 * exp(x) - 2 / x": lambda m, x: x**3 * m.exp(x) - 2.0 / x,
    "sin(x ** 2) / (1 + tanh(x))": lambda m, x: m.sin(x**2) / (1.0 + m.tanh(x)),
}


@given(name=st.sampled_from(sorted(UNARY_SMOOTH)), value=floats(0.3, 2.0))
def test_create_graph_gives_second_and_third_derivatives_equal_to_torch(name, value):
    expression = UNARY_SMOOTH[name]
    x = Variable(np.array(value))
    expression(tinypytorch, x).backward(create_graph=True)
    derivatives = [x.grad.item()]
    for _ in range(2):
        g = x.grad
        assert g.creator is not None  # the gradient carries a graph of its own
        x.cleargrad()  # else the next pass adds to the lower derivative
        g.backward(create_graph=True)
        derivatives.append(x.grad.item())
    expected = torch_derivatives(lambda t: expression(torch, t), value, 3)[1:]  # f', f'', f'''
    # a derivative may cross zero in [0.3, 2] (tanh''' at 0.66, -sin''' = cos at pi/2):
    # there the different order of operations leaves rounding at the scale of the terms
    scale = max(1.0, *map(abs, expected))
    np.testing.assert_allclose(derivatives, expected, rtol=1e-10, atol=1e-13 * scale)


def test_without_create_graph_the_gradient_records_no_graph_as_in_torch():
    x = Variable(np.array(0.5))
    tinypytorch.sin(x * x).backward()
    xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    torch.sin(xt * xt).backward()
    assert x.grad.creator is None and x.grad.generation == 0  # nothing of the backward pass is kept
    assert not xt.grad.requires_grad
    assert x.grad.item() == pytest.approx(xt.grad.item(), rel=1e-15)


def test_double_backprop_through_a_gradient_equals_torch():
    # y = x^2, z = (dy/dx)^3 + y = 8 x^3 + x^2, dz/dx = 24 x^2 + 2 x = 100 at x = 2 (DeZero's step 36)
    x = Variable(np.array(2.0))
    y = x**2
    y.backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    z = gx**3 + y
    z.backward()
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    yt = xt**2
    (gxt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (gxt**3 + yt).backward()
    assert x.grad.item() == xt.grad.item() == 24 * 4 + 2 * 2


@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    data=st.data(),
)
def test_second_derivatives_through_broadcasting_equal_torch(shapes, data):
    # the gradients of a broadcast are sums (SumTo); differentiating them again runs
    # SumTo.backward (broadcast_to) and BroadcastTo.backward (sum_to) on a second graph
    v0, v1 = (data.draw(arrays(np.float64, shape, elements=floats(0.5, 2.0))) for shape in shapes.input_shapes)

    def f(a, b):
        return a * a * b + a / b

    a, b = Variable(v0.copy()), Variable(v1.copy())
    f(a, b).sum().backward(create_graph=True)
    ga, gb = a.grad, b.grad
    a.cleargrad()
    b.cleargrad()
    (ga * gb).sum().backward()
    at, bt = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    out_t = f(at, bt)
    gat, gbt = torch.autograd.grad(out_t, [at, bt], torch.ones_like(out_t), create_graph=True)
    expected = torch.autograd.grad((gat * gbt).sum(), [at, bt])
    # gb = a^2 - a/b^2 (summed over broadcast axes) can cancel: tolerances as tests/reference.py explains
    assert_close_to_torch(ga.data, gat.detach().numpy())
    assert_close_to_torch(gb.data, gbt.detach().numpy())
    for x, e in [(a, expected[0]), (b, expected[1])]:
        assert x.grad.shape == x.shape
        assert_close_to_torch(x.grad.data, e.numpy())


# ----- utils -----------------------------------------------------------------------------

def test_numerical_diff_matches_the_analytic_derivative():
    a = np.array([[-1.0, 0.0], [0.5, 2.0]])
    numeric = numerical_diff(lambda v: tinypytorch.exp(v) * v, a)
    # d(x e^x)/dx = (1 + x) e^x, zero at x = -1; central differences are off by O(eps^2) = 1e-8
    np.testing.assert_allclose(numeric, (1.0 + a) * np.exp(a), rtol=1e-7, atol=1e-8)
    assert numeric.shape == a.shape and numeric.dtype == np.float64


def test_numerical_diff_of_a_non_scalar_output_is_the_gradient_of_its_sum():
    a = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(numerical_diff(tinypytorch.square, a), 2 * a, rtol=1e-9)


def test_gradient_check_accepts_a_right_backward_and_rejects_a_wrong_one():
    class WrongSquare(Function):
        def forward(self, x):
            self.save_for_backward(x)
            return x**2

        def backward(self, gy):
            (x,) = self.saved_tensors
            return 3 * x.data * gy  # should be 2 x

    x = Variable(np.array([0.5, 1.5]))
    assert gradient_check(lambda v: tinypytorch.exp(v) / (v + 2.0), x)
    assert not gradient_check(lambda v: WrongSquare()(v), x)
    assert x.grad is None  # the check does not touch the caller's Variable


def test_public_api():
    for name in ["Variable", "Function", "Config", "using_config", "no_grad", "as_array", "as_variable", "add",
                 "mul", "neg", "sub", "rsub", "div", "rdiv", "pow", "square", "exp", "functions", "utils", "cuda",
                 "sin", "cos", "tanh", "reshape", "sum", "broadcast_to", "sum_to"]:  # steps 26-30
        assert hasattr(tinypytorch, name) and name in tinypytorch.__all__
    assert tinypytorch.__version__ == "0.1.0"
    assert tinypytorch.as_array(2).shape == () and tinypytorch.as_array(np.float32(2)).dtype == np.float32
    assert Variable.__array_priority__ == 200


@pytest.mark.parametrize(
    "fn",
    [lambda x: x * 2.0, lambda x: 2.0 * x, lambda x: x + 1, lambda x: 3 - x, lambda x: x / 4.0, lambda x: 1.5 / x,
     lambda x: (x * 0.5 + 2) ** 2],
    ids=["x*2.0", "2.0*x", "x+1", "3-x", "x/4.0", "1.5/x", "(x*0.5+2)**2"],
)
def test_python_numbers_keep_float32_data_float32_like_torch(fn):
    data = np.array([0.5, 1.25, -2.0], dtype=np.float32)
    x, t = Variable(data), torch.tensor(data, requires_grad=True)
    y, yt = fn(x), fn(t)
    y.sum().backward()
    yt.backward(torch.ones_like(yt))
    assert str(y.dtype) == str(yt.dtype) == "torch.float32"
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-6)


def test_python_numbers_follow_torchs_promotion_for_integer_data():
    x, t = Variable(np.array([1, 2])), torch.tensor([1, 2])
    assert (x * 2).dtype == np.int64 and (t * 2).dtype == torch.int64  # an int stays int
    assert (x * 2.5).dtype == np.float32 and (t * 2.5).dtype == torch.float32  # the default float (NumPy: float64)
    np.testing.assert_array_equal((x * 2.5).data, (t * 2.5).numpy())


def test_no_file_holds_a_merge_conflicts_markers():
    root = pathlib.Path(__file__).resolve().parents[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    marker = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)
    texts = [p for p in tracked if p.endswith((".py", ".md", ".txt", ".toml", ".cfg", ".yml", ".yaml"))]
    assert [p for p in texts if marker.search((root / p).read_text(errors="replace"))] == []
