"""Three behaviours that PyTorch's tutorials rely on, each run on both frameworks, torch 2.13 giving the expected
result: the order of a node's `next_functions` (the reflected operators, `linear`); gradcheck and gradgradcheck with
torch's whole signature, each check catching its wrong backward; and torch.save / torch.load of any object under
torch's weights-only rule.
"""
import io
import pickle
import re

import numpy as np
import pytest
import torch

import tinypytorch
from reference import assert_close_to_torch

pytestmark = pytest.mark.torch
FRAMEWORKS = {"torch": torch, "tinypytorch": tinypytorch}


def _name(node):
    """A node's name in both frameworks (torch names its leaf node torch::autograd::AccumulateGrad)."""
    return None if node is None else node.name().split("::")[-1]


def edges(node):
    """(name, [(name of the next node, output number)]) of a node: what next_functions shows."""
    return _name(node), [(_name(n), nr) for n, nr in node.next_functions]


def two_levels(node):
    """edges of a node and of each node it points to."""
    return edges(node), [edges(n) for n, _ in node.next_functions if n is not None]


# ----- next_functions: the reflected operators list the tensor where torch's nodes do ------------------------------

def sin_of(m, values=(0.5, 1.0, -0.3)):
    a = m.tensor(values, dtype=m.float64, requires_grad=True)
    return a, a.sin()


EXPRESSIONS = {
    "2 * b": lambda m, b: 2 * b,
    "b * 2": lambda m, b: b * 2,
    "b + 1": lambda m, b: b + 1,
    "1 + b": lambda m, b: 1 + b,
    "True + b": lambda m, b: True + b,
    "1 - b": lambda m, b: 1 - b,
    "2.5 - b": lambda m, b: 2.5 - b,
    "b - 1": lambda m, b: b - 1,
    "b / 2": lambda m, b: b / 2,
    "2 / b": lambda m, b: 2 / b,
    "b ** 2": lambda m, b: b ** 2,
    "2 ** b": lambda m, b: 2 ** b,
    "2.0 ** b": lambda m, b: 2.0 ** b,
    "0 ** b": lambda m, b: 0 ** b,
    "b % 2": lambda m, b: b % 2,
    "NumPy 2.0 * b": lambda m, b: np.float64(2.0) * b,
    "NumPy 2.0 - b": lambda m, b: np.float64(2.0) - b,
    "NumPy 2.0 ** b": lambda m, b: np.float64(2.0) ** b,
    "NumPy 2.0 / b": lambda m, b: np.float64(2.0) / b,
    "sum([b, b])": lambda m, b: sum([b, b]),
    "rsub(b, 1)": lambda m, b: m.rsub(b, 1),
    "rsub(b, t)": lambda m, b: m.rsub(b, m.tensor(2.0, dtype=m.float64)),
    "b.__rsub__(t)": lambda m, b: b.__rsub__(m.tensor(2.0, dtype=m.float64)),
    "b.__radd__(t)": lambda m, b: b.__radd__(m.tensor(2.0, dtype=m.float64)),
    "b.__rmul__(t)": lambda m, b: b.__rmul__(m.tensor(2.0, dtype=m.float64)),
    "b.__rtruediv__(t)": lambda m, b: b.__rtruediv__(m.tensor(2.0, dtype=m.float64)),
    "b.__rpow__(t)": lambda m, b: b.__rpow__(m.tensor(2.0, dtype=m.float64)),
    "t * b": lambda m, b: m.tensor(2.0, dtype=m.float64) * b,
    "t - b": lambda m, b: m.tensor(2.0, dtype=m.float64) - b,
    "add(1, b)": lambda m, b: m.add(1, b),
    "mul(2, b)": lambda m, b: m.mul(2, b),
    "sub(1, b)": lambda m, b: m.sub(1, b),
    "pow(2, b)": lambda m, b: m.pow(2, b),
    "b * b": lambda m, b: b * b,
    "2 * a": lambda m, b: 2 * b.grad_fn.next_functions[0][0].variable,
}


@pytest.mark.step33
@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_next_functions_list_the_inputs_as_torchs_do(name):
    expression = EXPRESSIONS[name]
    ours, theirs = (expression(m, sin_of(m)[1]) for m in (tinypytorch, torch))
    assert two_levels(ours.grad_fn) == two_levels(theirs.grad_fn)


@pytest.mark.step33
@pytest.mark.parametrize("name", [n for n in EXPRESSIONS if n != "2 * a"])
def test_the_reordered_operations_give_torchs_values_and_gradients(name):
    expression = EXPRESSIONS[name]
    results = {}
    for key, m in FRAMEWORKS.items():
        a, b = sin_of(m, (0.5, 1.0, 2.0))  # sin > 0: 0 ** b and 2 / b are finite
        y = expression(m, b)
        y.backward(m.ones_like(y))
        results[key] = y, a.grad
    (y, g), (y_t, g_t) = results["tinypytorch"], results["torch"]
    assert str(y.dtype) == str(y_t.dtype)
    assert_close_to_torch(y.data, y_t.detach().numpy())
    assert_close_to_torch(g.data, g_t.numpy())


# (number, tensor values, tensor dtype): the dtypes PyTorch gives a number and an integer or float32 tensor
MIXED = [(2, [1, 2, 3], "int64"), (2.5, [1, 2, 3], "int64"), (2, [1.5, 2.0], "float32"), (-1, [0, 1, 2], "int32"),
         (3, [True, False], "bool")]
REFLECTED = {"number - x": lambda c, x: c - x, "number ** x": lambda c, x: c ** x, "number * x": lambda c, x: c * x,
             "number + x": lambda c, x: c + x, "number / x": lambda c, x: c / x}


@pytest.mark.parametrize("number, values, dtype", MIXED, ids=repr)
@pytest.mark.parametrize("name", list(REFLECTED))
def test_a_reflected_operator_with_integer_and_bool_tensors_gives_torchs_values_and_dtype(name, number, values, dtype):
    results = []
    for m in (tinypytorch, torch):
        x = m.tensor(values, dtype=getattr(m, dtype))
        try:
            results.append(REFLECTED[name](number, x))
        except Exception as error:  # torch's refusals (a bool subtracted; a negative power of an integer)
            results.append(type(error))
    ours, theirs = results
    if isinstance(theirs, type):
        assert ours is theirs
    else:
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def linear_net(m, bias=True):
    """Two linear layers with a ReLU between, as the blitz tutorial's network ends, the same weights in both."""
    torch.manual_seed(0)
    twin = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=bias), torch.nn.ReLU(), torch.nn.Linear(3, 2, bias=bias))
    if m is torch:
        return twin
    net = tinypytorch.nn.Sequential(tinypytorch.nn.Linear(4, 3, bias=bias), tinypytorch.nn.ReLU(),
                                    tinypytorch.nn.Linear(3, 2, bias=bias))
    net.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in twin.state_dict().items()})
    return net


def blitz_chain(m, shape=(5, 4), bias=True):
    """The loss of a linear net and the nodes the blitz tutorial prints: loss.grad_fn, next_functions[0][0], and
    its next_functions[0][0]."""
    net = linear_net(m, bias)
    x = m.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    output = net(x)
    loss = m.nn.MSELoss()(output, m.zeros_like(output))
    last = loss.grad_fn.next_functions[0][0]
    return net, loss, [loss.grad_fn, last, last.next_functions[0][0]]


@pytest.mark.step33
def test_the_blitz_tutorials_walk_from_the_loss_meets_torchs_nodes():
    ours, theirs = (blitz_chain(m)[2] for m in (tinypytorch, torch))
    assert [_name(n) for n in ours] == [_name(n) for n in theirs] == ["MseLossBackward0", "AddmmBackward0",
                                                                      "AccumulateGrad"]


@pytest.mark.step33
@pytest.mark.parametrize("shape, bias", [((5, 4), True), ((5, 4), False), ((2, 5, 4), True)],
                         ids=["a batch", "a batch, no bias", "batches of batches"])
def test_a_linear_node_lists_the_bias_the_input_and_the_weight_as_torchs(shape, bias):
    """torch's node lists weight.t(), a node of its own (TBackward0) leading to the weight; the package's linear
    transposes inside its one node, so it lists the weight's own AccumulateGrad there (a deliberate difference).
    (Batches of batches without a bias: torch's mm is wrapped in an UnsafeViewBackward0, the package's reshape in a
    ViewBackward0.)"""
    (net, _, ours), (twin, _, theirs) = (blitz_chain(m, shape, bias) for m in (tinypytorch, torch))
    node, node_t = ours[1], theirs[1]
    while _name(node_t) not in ("AddmmBackward0", "MmBackward0"):  # a view around it for batches of batches
        assert _name(node) == _name(node_t)
        node, node_t = node.next_functions[0][0], node_t.next_functions[0][0]
    ours_edges, theirs_edges = edges(node), edges(node_t)
    assert ours_edges[0] == theirs_edges[0] == ("AddmmBackward0" if bias else "MmBackward0")
    assert ours_edges[1][:-1] == theirs_edges[1][:-1]  # the bias and the input (ReLU's node, or a view of it)
    weight, weight_t = node.next_functions[-1][0], node_t.next_functions[-1][0]
    assert _name(weight_t) == "TBackward0" and weight_t.next_functions[0][0].variable is twin[2].weight
    assert _name(weight) == "AccumulateGrad" and weight.variable is net[2].weight
    if bias:
        assert node.next_functions[0][0].variable is net[2].bias
        assert node_t.next_functions[0][0].variable is twin[2].bias


@pytest.mark.step33
def test_a_linear_net_still_gives_torchs_gradients():
    grads = []
    for m in (tinypytorch, torch):
        net, loss, _ = blitz_chain(m, (2, 5, 4))
        loss.backward()
        grads.append([p.grad.numpy() if m is torch else p.grad.data for p in net.parameters()])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)  # float32


# ----- gradcheck and gradgradcheck: torch's signature, and each check catches its wrong backward -------------------

def functions_of(m):
    """Custom functions written the same way in both frameworks: right, and wrong in one way each."""

    class Sin(m.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a.sin()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a.cos()

    class Double(Sin):  # the Jacobian is twice the true one
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * g * a.cos()

    class Forgetful(Sin):  # does not multiply by its incoming gradient: right for a one-hot seed of one element
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return a.cos()

    class UndefinedAsOnes(Sin):  # given no gradient (None), returns ones: an undefined gradient is not zero
        @staticmethod
        def forward(ctx, a):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(a)
            return a.sin()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return m.ones_like(a) if g is None else g * a.cos()

    class UndefinedRaises(UndefinedAsOnes):  # given no gradient, fails
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            if g is None:
                raise RuntimeError("no gradient")
            return g * a.cos()

    class Noisy(Sin):  # a different answer on each call, within 1e-8 relative
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            noise = m.tensor(np.random.default_rng().random(tuple(a.shape)), dtype=m.float64)
            return g * a.cos() * (1 + 1e-8 * noise)

    class Float32Gradient(Sin):  # a float32 gradient for a float64 input: both engines cast it back
        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return (g * a.cos()).to(m.float32)

    return {c.__name__: c.apply for c in (Sin, Double, Forgetful, UndefinedAsOnes, UndefinedRaises, Noisy,
                                          Float32Gradient)}


def gradcheck_both(name, values=(0.3, -0.7, 1.1), **options):
    """{framework: gradcheck's verdict (True/False) or the type and first line of what it raised}."""
    verdicts = {}
    for key, m in FRAMEWORKS.items():
        x = m.tensor(values, dtype=m.float64, requires_grad=True)
        fn = functions_of(m)[name] if isinstance(name, str) else name(m)
        try:
            verdicts[key] = m.autograd.gradcheck(fn, (x,), **options)
        except Exception as error:
            verdicts[key] = type(error).__name__, str(error).splitlines()[0] if str(error) else ""
    return verdicts


@pytest.mark.step40
def test_the_census_form_with_check_undefined_grad_false_passes_in_both():
    verdicts = gradcheck_both(lambda m: lambda a: a.sin() * a, check_undefined_grad=False)
    assert verdicts == {"torch": True, "tinypytorch": True}


ALL_OPTIONS = dict(eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0, check_undefined_grad=True,
                   check_grad_dtypes=True, check_batched_grad=False, check_batched_forward_grad=False,
                   check_forward_ad=True, check_backward_ad=True, masked=False)


@pytest.mark.step40
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_gradcheck_takes_torchs_whole_signature(fast_mode):
    verdicts = gradcheck_both(lambda m: lambda a: a.sin() * a, fast_mode=fast_mode, **ALL_OPTIONS)
    assert verdicts == {"torch": True, "tinypytorch": True}


@pytest.mark.step40
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_every_check_runs_on_every_backend(xp, fast_mode):
    x = tinypytorch.Variable(xp.asarray(np.array([0.3, -0.7, 1.1])))
    fn = lambda a: a.sin() * a  # noqa: E731
    assert tinypytorch.autograd.gradcheck(fn, (x,), fast_mode=fast_mode, **ALL_OPTIONS)
    assert tinypytorch.autograd.gradgradcheck(fn, (x,), fast_mode=fast_mode, gen_non_contig_grad_outputs=True,
                                              check_fwd_over_rev=True, check_grad_dtypes=True)
    wrong = tinypytorch.autograd.gradcheck(functions_of(tinypytorch)["Double"], (x,), fast_mode=fast_mode,
                                           raise_exception=False)
    assert wrong is False


# the wrong backward, the options that turn its check on, and the first words of the message
CAUGHT = {
    "Jacobian": ("Double", {}, "Jacobian mismatch for output 0 with respect to input 0,"),
    "multiplied by grad_output": ("Forgetful", {}, "backward not multiplied by grad_output"),
    "undefined gradient taken for ones": ("UndefinedAsOnes", {}, "Expected all input grads to be undefined or zero "
                                                                 "when all output grads are undefined or zero."),
    "undefined gradient refused": ("UndefinedRaises", {}, "Expected backward function to handle undefined output "
                                                          "grads"),
    "not reentrant": ("Noisy", {}, "Backward is not reentrant, i.e., running backward with same input and "
                                   "grad_output multiple times gives different values, although analytical gradient "
                                   "matches numerical gradient."),
}


@pytest.mark.step40
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
@pytest.mark.parametrize("check", list(CAUGHT))
def test_each_check_catches_its_wrong_backward_in_both(check, fast_mode):
    name, options, words = CAUGHT[check]
    values = (0.4,) if name == "Forgetful" else (0.3, -0.7, 1.1)  # one element: the Jacobian test cannot see it
    assert gradcheck_both("Sin", values, fast_mode=fast_mode, **options) == {"torch": True, "tinypytorch": True}
    caught = gradcheck_both(name, values, fast_mode=fast_mode, **options)
    assert caught["torch"][0] == caught["tinypytorch"][0] == "GradcheckError"
    assert caught["torch"][1].startswith(words) and caught["tinypytorch"][1].startswith(words), caught
    quiet = gradcheck_both(name, values, fast_mode=fast_mode, raise_exception=False, **options)
    assert quiet == {"torch": False, "tinypytorch": False}


@pytest.mark.step40
@pytest.mark.parametrize("name, options", [("UndefinedAsOnes", {"check_undefined_grad": False}),
                                           ("UndefinedRaises", {"check_undefined_grad": False}),
                                           ("Noisy", {"nondet_tol": 1e-6}),
                                           ("Float32Gradient", {"check_grad_dtypes": True})])
def test_turning_a_check_off_or_widening_it_passes_in_both(name, options):
    assert gradcheck_both(name, **options) == {"torch": True, "tinypytorch": True}


def sin_with_jvp(m, factor=1):
    """sin as a custom Function of framework m whose jvp is `factor` times the right one (2: a wrong jvp)."""
    class SinWithJvp(m.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            ctx.a = a  # (jvp reads the primal from ctx)
            return a.sin()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a.cos()

        @staticmethod
        def jvp(ctx, t):
            return factor * t * ctx.a.cos()

    return SinWithJvp.apply


def wrong_jvp(m):
    return sin_with_jvp(m, factor=2)


@pytest.mark.step40
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_forward_mode_catches_a_wrong_jvp_in_both(fast_mode):
    assert gradcheck_both(wrong_jvp, fast_mode=fast_mode) == {"torch": True, "tinypytorch": True}
    caught = gradcheck_both(wrong_jvp, fast_mode=fast_mode, check_forward_ad=True, raise_exception=False)
    assert caught == {"torch": False, "tinypytorch": False}


@pytest.mark.step40
@pytest.mark.parametrize("options", [{"check_forward_ad": False, "check_backward_ad": False},
                                     {"check_batched_forward_grad": True},
                                     {"check_batched_grad": True, "check_backward_ad": False,
                                      "check_forward_ad": True}], ids=repr)
def test_contradictory_options_are_refused_as_torch_refuses_them(options):
    verdicts = gradcheck_both("Sin", **options)
    assert verdicts["torch"][0] == "AssertionError" and verdicts["tinypytorch"] == verdicts["torch"]


def is_batched(m, g):
    """Whether g is a batch of gradients that vmap (gradcheck's, PyTorch's legacy one) passes to a backward."""
    return torch._C._functorch.is_legacy_batchedtensor(g) if m is torch else isinstance(g, tinypytorch.batched.BatchedVariable)


def unbatchable(m, kind):
    """Custom functions right one gradient at a time, whose backward fails under vmap in one way each (what
    PyTorch's check_batched_grad catches), or is wrong only for a batch of gradients ("batched only")."""

    class Twice(m.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            if kind == "through numpy":  # leaves autograd for an array: no one sample's array under vmap
                return m.from_numpy(g.numpy() * 2)
            if kind == "into a buffer":  # a batch of gradients written in place into one unbatched tensor
                out = m.zeros_like(a)
                out += 2 * g
                return out
            if kind == "branch on a value":  # data-dependent control flow
                return 2 * g if bool((g != 0).any()) else m.zeros_like(g)
            if kind == "item":
                return 2 * g * (g.sum().item() * 0 + 1)
            return 3 * g if is_batched(m, g) else 2 * g  # "batched only": wrong only for a batch

    return Twice.apply


def gradcheck_both_whole(fn_of, values=(0.3, -0.7, 1.1), **options):
    """{framework: gradcheck's verdict, or (the type, the whole message) of what it raised}."""
    verdicts = {}
    for key, m in FRAMEWORKS.items():
        x = m.tensor(values, dtype=m.float64, requires_grad=True)
        try:
            verdicts[key] = m.autograd.gradcheck(fn_of(m), (x,), **options)
        except Exception as error:
            verdicts[key] = type(error).__name__, str(error)
    return verdicts


@pytest.mark.step40
def test_batched_gradients_of_right_functions_pass_in_both():
    assert gradcheck_both("Sin", check_batched_grad=True) == {"torch": True, "tinypytorch": True}
    assert gradcheck_both(lambda m: lambda a: (a.sin() * a, a.sum() * a[0]), check_batched_grad=True,
                          check_forward_ad=True, check_batched_forward_grad=True) == {"torch": True,
                                                                                      "tinypytorch": True}
    assert gradgradcheck_both(check_batched_grad=True) == {"torch": True, "tinypytorch": True}


@pytest.mark.step40
@pytest.mark.parametrize("kind", ["through numpy", "into a buffer", "branch on a value", "item"])
def test_a_backward_that_fails_under_vmap_fails_check_batched_grad_in_both(kind):
    assert gradcheck_both(lambda m: unbatchable(m, kind)) == {"torch": True, "tinypytorch": True}
    verdicts = gradcheck_both_whole(lambda m: unbatchable(m, kind), check_batched_grad=True)
    for name, message in verdicts.values():
        assert name == "GradcheckError"
        assert message.startswith("While computing batched gradients, got: ")
        assert "gradcheck or gradgradcheck failed while testing batched gradient computation." in message
        assert "check_batched_grad=False" in message
    assert gradcheck_both(lambda m: unbatchable(m, kind), check_batched_grad=True, raise_exception=False) == \
        {"torch": False, "tinypytorch": False}


@pytest.mark.step40
def test_a_backward_wrong_only_for_a_batch_fails_check_batched_grad_in_both():
    """Right one gradient at a time (gradcheck passes), 3 g instead of 2 g for a batch: the batched gradients differ
    from the unbatched ones stacked, which the message shows."""
    assert gradcheck_both(lambda m: unbatchable(m, "batched only")) == {"torch": True, "tinypytorch": True}
    verdicts = gradcheck_both_whole(lambda m: unbatchable(m, "batched only"), check_batched_grad=True)
    for name, message in verdicts.values():
        assert name == "GradcheckError"
        assert message.startswith("For output 0 and input 0:")
        assert "gradcheck or gradgradcheck failed while testing batched gradient computation." in message
        assert "Got:" in message and "Expected:" in message


@pytest.mark.step40
def test_the_batched_check_compares_the_batched_gradients_with_the_stacked_ones():
    """The numbers of the package's message: its 'Got' is 3/2 of its 'Expected' (3 g against 2 g), and 'Expected'
    is 2 v for the two random output gradients v."""
    x = tinypytorch.tensor((0.3, -0.7, 1.1), dtype=tinypytorch.float64, requires_grad=True)
    with pytest.raises(tinypytorch.autograd.GradcheckError) as caught:
        tinypytorch.autograd.gradcheck(unbatchable(tinypytorch, "batched only"), (x,), check_batched_grad=True)
    got, expected = (np.array(re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", part), dtype=float).reshape(2, 3)
                     for part in str(caught.value).split("Got:")[1].split("Expected:"))
    np.testing.assert_allclose(got, 1.5 * expected, rtol=1e-6)
    v = np.random.default_rng(0).standard_normal((2, 3))  # the check's output gradients: seeded with 0
    np.testing.assert_allclose(expected, 2 * v, rtol=1e-6)


@pytest.mark.step40
def test_batched_forward_gradients_of_a_custom_function_are_refused_where_vmap_cannot_run_it():
    """PyTorch's vmap runs a custom Function in forward mode; the package's has no batching rule for one: a clear
    refusal, not a verdict on the function (which gradcheck passes without the batched check)."""
    assert gradcheck_both(sin_with_jvp, check_forward_ad=True) == {"torch": True, "tinypytorch": True}
    verdicts = gradcheck_both_whole(sin_with_jvp, check_forward_ad=True, check_batched_forward_grad=True)
    assert verdicts["torch"] is True
    name, message = verdicts["tinypytorch"]
    assert name == "NotImplementedError"
    assert message.startswith("gradcheck: check_batched_forward_grad=True runs") and "no batching rule" in message


def gradgradcheck_both(**options):
    verdicts = {}
    for key, m in FRAMEWORKS.items():
        x = m.tensor((0.3, -0.7, 1.1), dtype=m.float64, requires_grad=True)
        try:
            verdicts[key] = m.autograd.gradgradcheck(lambda a: a.sin() * a, (x,), **options)
        except Exception as error:
            verdicts[key] = type(error).__name__, str(error)
    return verdicts


@pytest.mark.step40
@pytest.mark.parametrize("options", [
    dict(eps=1e-6, atol=1e-5, rtol=1e-3, gen_non_contig_grad_outputs=True, raise_exception=True, nondet_tol=0.0,
         check_undefined_grad=True, check_grad_dtypes=True, check_batched_grad=False, check_fwd_over_rev=True,
         check_rev_over_rev=True, fast_mode=False, masked=False),
    {"fast_mode": True},
    {"check_rev_over_rev": False, "check_undefined_grad": False, "check_fwd_over_rev": True},
    {"check_rev_over_rev": False},
    {"check_rev_over_rev": False, "check_fwd_over_rev": True},
], ids=["every option", "fast", "forward over reverse only", "no check", "undefined without reverse over reverse"])
def test_gradgradcheck_takes_torchs_whole_signature(options):
    verdicts = gradgradcheck_both(**options)
    assert verdicts["tinypytorch"] == verdicts["torch"]


def undefined_then_sin(m):
    """A node whose backward sends no gradient (None), placed after sin: what reaches sin's node is nothing."""

    class Undefined(m.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.clone()

        @staticmethod
        def backward(ctx, g):
            return None

    return lambda a: Undefined.apply(a.sin() * 3)


@pytest.mark.step40
def test_a_node_that_gets_no_gradient_passes_none_on_as_torchs():
    results = {}
    for key, m in FRAMEWORKS.items():
        x = m.tensor((0.3, -0.7), dtype=m.float64, requires_grad=True)
        y = undefined_then_sin(m)(x)
        unused = m.autograd.grad(y, [x], m.ones_like(y), allow_unused=True)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            m.autograd.grad(undefined_then_sin(m)(x), [x], m.ones_like(y))
        undefined_then_sin(m)(x).sum().backward()
        results[key] = unused, x.grad
    assert results["torch"] == results["tinypytorch"] == ((None,), None)


# ----- torch.save / torch.load of any object ------------------------------------------------------------------------

@pytest.mark.step52
def test_a_whole_module_is_saved_refused_by_default_and_loaded_with_weights_only_false(tmp_path):
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    messages, outputs = {}, {}
    for key, m in FRAMEWORKS.items():
        model, path = linear_net(m), tmp_path / f"{key}.pth"
        m.save(model, path)
        with pytest.raises(pickle.UnpicklingError) as refused:
            m.load(path)
        messages[key] = str(refused.value)
        loaded = m.load(path, weights_only=False)
        assert type(loaded) is type(model) and list(loaded.state_dict()) == list(model.state_dict())
        for k, v in loaded.state_dict().items():
            np.testing.assert_array_equal(v.detach().numpy() if m is torch else v.data,
                                          model.state_dict()[k].detach().numpy() if m is torch
                                          else model.state_dict()[k].data)
        out = loaded(m.from_numpy(x))
        out.sum().backward()  # the loaded module trains: its parameters are leaves that require grad
        assert all(p.grad is not None for p in loaded.parameters())
        outputs[key] = out.detach().numpy() if m is torch else out.data
    np.testing.assert_allclose(outputs["tinypytorch"], outputs["torch"], rtol=1e-6, atol=1e-7)
    for message in messages.values():
        assert message.startswith("Weights only load failed.")
        assert "`weights_only` set to `False` will likely succeed" in message
        assert "Do it only if you got the file from a trusted source." in message
        assert "Unsupported global: GLOBAL" in message and "Sequential was not an allowed global by default" in message


LONE = {"int16": ([1, 2, 3], "int16", False), "float32": ([1.5, -2.0], "float32", False),
        "float64 that requires grad": ([0.25], "float64", True), "a 0-d bool": (True, "bool", False)}


@pytest.mark.step52
@pytest.mark.parametrize("name", list(LONE))
def test_a_lone_tensor_comes_back_with_its_values_dtype_and_requires_grad(tmp_path, name):
    values, dtype, requires_grad = LONE[name]
    loaded = {}
    for key, m in FRAMEWORKS.items():
        m.save(m.tensor(values, dtype=getattr(m, dtype), requires_grad=requires_grad), tmp_path / f"{key}.pt")
        loaded[key] = m.load(tmp_path / f"{key}.pt")
    ours, theirs = loaded["tinypytorch"], loaded["torch"]
    assert type(ours) is tinypytorch.Variable and str(ours.dtype) == str(theirs.dtype)
    assert ours.requires_grad == theirs.requires_grad and ours.is_leaf
    np.testing.assert_array_equal(ours.data, theirs.detach().numpy())


@pytest.mark.step52
def test_a_model_and_its_optimizer_in_one_file_keep_sharing_their_parameters(tmp_path):
    for key, m in FRAMEWORKS.items():
        model = linear_net(m)
        optimizer = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(m.ones(2, 4)).sum().backward()
        optimizer.step()
        m.save({"model": model, "optimizer": optimizer, "epoch": 3}, tmp_path / f"{key}.pt")
        loaded = m.load(tmp_path / f"{key}.pt", weights_only=False)
        assert loaded["epoch"] == 3
        assert all(p is q for p, q in zip(loaded["optimizer"].param_groups[0]["params"],
                                          loaded["model"].parameters()))


@pytest.mark.step52
@pytest.mark.parametrize("map_location", ["cpu", "torch.device('cpu')", {"cuda:0": "cpu"},
                                          lambda storage, location: storage],
                         ids=["'cpu'", "torch.device('cpu')", "{'cuda:0': 'cpu'}", "a function"])  # (no addresses)
def test_the_tutorials_map_locations_load_a_state_dict_and_a_module(tmp_path, map_location):
    for key, m in FRAMEWORKS.items():
        where = m.device("cpu") if map_location == "torch.device('cpu')" else map_location
        model = linear_net(m)
        m.save(model.state_dict(), tmp_path / f"{key}.pt")
        m.save(model, tmp_path / f"{key}-whole.pt")
        state = m.load(tmp_path / f"{key}.pt", map_location=where, weights_only=True)
        whole = m.load(tmp_path / f"{key}-whole.pt", map_location=where, weights_only=False)
        assert list(state) == list(model.state_dict()) == list(whole.state_dict())


@pytest.mark.step52
def test_what_weights_only_allows_is_what_torchs_allows():
    objects = {"set": ({1, 2}, {1, 2}), "complex": (1 + 2j, 1 + 2j), "bytes": (b"ab", b"ab"),
               "bytearray": (bytearray(b"ab"), bytearray(b"ab")), "frozenset": (frozenset([1]), frozenset([1])),
               "slice": (slice(1, 2), slice(1, 2)), "range": (range(3), range(3)), "Ellipsis": (..., ...),
               "dtype": (tinypytorch.float32, torch.float32),
               "device": (tinypytorch.device("cpu"), torch.device("cpu")),
               "Size": (tinypytorch.Size([2, 3]), torch.Size([2, 3]))}
    for name, (ours, theirs) in objects.items():
        verdicts = []
        for m, obj in ((tinypytorch, ours), (torch, theirs)):
            buffer = io.BytesIO()
            m.save(obj, buffer)
            buffer.seek(0)
            try:
                verdicts.append(repr(m.load(buffer)).replace("tinypytorch", "torch"))
            except pickle.UnpicklingError:
                verdicts.append("refused")
        assert verdicts[0] == verdicts[1], name


def test_copy_takes_torchs_keyword():
    # torch 2.13's copy_ takes other= (its documentation says src=, which torch refuses)
    for m in (tinypytorch, torch):
        x = m.zeros(3)
        x.copy_(other=m.ones(3), non_blocking=False)
        assert x.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(TypeError):
        torch.zeros(3).copy_(src=torch.ones(3))

