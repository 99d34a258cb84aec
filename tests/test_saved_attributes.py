"""A node's saved tensors under PyTorch's names (`grad_fn._saved_self`, `_saved_other`, `_saved_result`,
`_saved_exponent`), as the saved-tensor hooks tutorial reads them. Each case runs on torch and on the package, and
what torch gives is the expectation: identity with the input, a new tensor for a saved output, None where nothing
was saved, unpack hooks run on every read, and the error once backward has freed them."""
import pytest
import torch

import tinypytorch

pytestmark = [pytest.mark.torch]

FRAMEWORKS = pytest.mark.parametrize("fw", [torch, tinypytorch], ids=["torch", "tinypytorch"])


def _seen(fw, make):
    """Identity and value of every saved attribute the node of `make`'s output shows."""
    a, b = fw.tensor([0.5, 1.5, 2.0], requires_grad=True), fw.tensor([2.0, -1.0, 3.0], requires_grad=True)
    y = make(fw, a, b)
    seen = {}
    for name in ("self", "other", "result"):
        try:
            saved = getattr(y.grad_fn, "_saved_" + name)
        except AttributeError:
            continue
        seen[name] = ("None" if saved is None else "a" if saved is a else "b" if saved is b else "y" if saved is y
                      else "new", None if saved is None else saved.detach().tolist())
    return seen


CASES = {
    "mul": lambda fw, a, b: a * b,
    "mul by a constant": lambda fw, a, b: a * fw.tensor([1.0, 2.0, 3.0]),
    "div": lambda fw, a, b: a / b,
    "exp": lambda fw, a, b: fw.exp(a),
    "sin": lambda fw, a, b: fw.sin(a),
    "cos": lambda fw, a, b: fw.cos(a),
    "log": lambda fw, a, b: fw.log(a),
    "tanh": lambda fw, a, b: fw.tanh(a),
    "sigmoid": lambda fw, a, b: fw.sigmoid(a),
    "sqrt": lambda fw, a, b: fw.sqrt(a),
    "pow": lambda fw, a, b: a.pow(2),
}


@pytest.mark.parametrize("case", CASES)
def test_saved_attributes_are_torchs(case):
    expected, got = _seen(torch, CASES[case]), _seen(tinypytorch, CASES[case])
    assert expected, "torch shows no saved attribute here: the case tests nothing"
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name][0] == expected[name][0], name
        if expected[name][1] is not None:
            assert got[name][1] == pytest.approx(expected[name][1], rel=1e-6), name


@FRAMEWORKS
def test_pows_exponent_is_the_number(fw):
    x = fw.ones(3, requires_grad=True)
    assert x.pow(2).grad_fn._saved_exponent == 2 and (x ** 0.5).grad_fn._saved_exponent == 0.5


@FRAMEWORKS
def test_each_read_unpacks_through_the_hooks(fw):
    calls = []
    a, b = fw.ones(3, requires_grad=True), fw.ones(3, requires_grad=True)

    def pack(x):
        calls.append("pack")
        return x

    def unpack(x):
        calls.append("unpack")
        return x

    with fw.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = a * b
    y.grad_fn._saved_self
    y.grad_fn._saved_self
    assert calls == ["pack", "pack", "unpack", "unpack"]


@FRAMEWORKS
def test_after_backward_a_saved_tensor_is_freed(fw):
    x = fw.ones(3, requires_grad=True)
    y = fw.sin(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="directly access saved tensors after they have already been freed"):
        y.grad_fn._saved_self


@FRAMEWORKS
def test_a_name_the_node_does_not_save_is_an_attribute_error(fw):
    y = fw.sin(fw.ones(3, requires_grad=True))
    with pytest.raises(AttributeError, match="object has no attribute '_saved_other'"):
        y.grad_fn._saved_other
