"""Step 53: Module hooks (forward pre-hooks, forward hooks, full backward pre-hooks and hooks) and the optimizer
stepped inside backward, against torch 2.13: the order hooks run in, their arguments, what their return values
replace, the (None,) grad_input case, torch's messages, handles; parameters after in-backward steps."""
import warnings

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, nn, optim

pytestmark = [pytest.mark.step53, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype


def both(build):
    ours, theirs = build(nn), build(torch.nn).double()
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def mlp(n):
    return n.Sequential(n.Linear(3, 4), n.Tanh(), n.Linear(4, 2))


def linear(framework, *sizes):
    """A Linear of either framework, float64 both."""
    return nn.Linear(*sizes) if framework == "tinypytorch" else torch.nn.Linear(*sizes).double()


def leaf(array, framework, requires_grad=True):
    if framework == "torch":
        return torch.tensor(array, requires_grad=requires_grad)
    return Variable(array.copy(), requires_grad=requires_grad)


def numpy_of(value):
    if value is None:
        return None
    return value.detach().numpy() if isinstance(value, torch.Tensor) else np.asarray(value.data)


def record_all(model, log):
    """Every kind of hook on every module of `model`, each logging (kind, module name, arrays it was given)."""
    for name, module in model.named_modules():
        module.register_forward_pre_hook(lambda m, args, name=name: log.append(
            ("pre", name, [numpy_of(a) for a in args])))
        module.register_forward_hook(lambda m, args, out, name=name: log.append(
            ("forward", name, [numpy_of(a) for a in args], [numpy_of(out)])))
        module.register_full_backward_pre_hook(lambda m, go, name=name: log.append(
            ("backward pre", name, [numpy_of(g) for g in go])))
        module.register_full_backward_hook(lambda m, gi, go, name=name: log.append(
            ("backward", name, [numpy_of(g) for g in gi], [numpy_of(g) for g in go])))


def run_logged(model, framework, x, requires_grad=True):
    log = []
    record_all(model, log)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(leaf(x, framework, requires_grad)).sum().backward()
    return log, [str(w.message) for w in caught]


def assert_same_logs(ours, theirs):
    assert [entry[:2] for entry in ours] == [entry[:2] for entry in theirs]
    for a, b in zip(ours, theirs):
        for arrays_a, arrays_b in zip(a[2:], b[2:]):
            assert len(arrays_a) == len(arrays_b)
            for u, v in zip(arrays_a, arrays_b):
                assert (u is None) == (v is None)
                if u is not None:
                    np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_order_and_arguments_equal_torch(requires_grad):
    ours, theirs = both(mlp)
    x = np.random.default_rng(0).normal(size=(5, 3))
    log, warned = run_logged(ours, "tinypytorch", x, requires_grad)
    log_t, warned_t = run_logged(theirs, "torch", x, requires_grad)
    assert_same_logs(log, log_t)
    assert warned == warned_t  # the (None,) case warns, with torch's words, once per module firing at its outputs


def test_no_input_requires_grad_gives_none_and_fires_before_the_parameters_gradients():
    for framework, model in zip(("tinypytorch", "torch"), both(lambda n: n.Linear(3, 2))):
        seen = []
        model.register_full_backward_hook(lambda m, gi, go: seen.append((gi, m.weight.grad)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(leaf(np.ones((2, 3)), framework, False)).sum().backward()
        assert seen[0] == ((None,), None), framework
        assert model.weight.grad is not None


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_none_case_hook_must_return_nones(framework):
    model = linear(framework, 3, 2)
    model.register_full_backward_hook(lambda m, gi, go: (go[0][:, :1] * 0,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = model(leaf(np.ones((2, 3)), framework, False)).sum()
        with pytest.raises(RuntimeError, match="Backward hook for Modules where no input requires gradient should "
                                               r"always return None or None for all gradients\."):
            y.backward()


def _bad_backward(framework, register, replacement):
    model = linear(framework, 3, 2)
    getattr(model, register)(replacement)
    return model(leaf(np.ones((4, 3)), framework)).sum()


BAD = [
    ("register_full_backward_hook", lambda m, gi, go: (gi[0], gi[0]),
     r"^Backward hook returned an invalid number of grad_input, got 2, but expected 1$"),
    ("register_full_backward_hook", lambda m, gi, go: (gi[0][:2],), r"^hook 'hook' has changed the size of value$"),
    ("register_full_backward_pre_hook", lambda m, go: (go[0], go[0]),
     r"^Backward pre hook returned an invalid number of grad_output, got 2, but expected 1$"),
    ("register_full_backward_pre_hook", lambda m, go: (go[0][:, :1],),
     r"^hook 'hook' has changed the size of value$"),
]


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
@pytest.mark.parametrize("register,replacement,message", BAD)
def test_wrong_number_or_shape_of_gradients(framework, register, replacement, message):
    y = _bad_backward(framework, register, replacement)
    with pytest.raises(RuntimeError, match=message):
        y.backward()


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_replacements_are_used(framework):
    """A pre-hook's non-tuple result is wrapped; forward hooks replace the output; backward hooks grad_input and
    grad_output."""
    model = linear(framework, 3, 2)
    model.register_forward_pre_hook(lambda m, args: args[0] * 2)
    model.register_forward_hook(lambda m, args, out: out * 3)
    model.register_full_backward_pre_hook(lambda m, go: (go[0] * 5,))
    model.register_full_backward_hook(lambda m, gi, go: (gi[0] * 7,))
    x = leaf(np.ones((1, 3)), framework)
    model.weight.data[...] = 1.0
    model.bias.data[...] = 0.0
    y = model(x)
    assert numpy_of(y).tolist() == [[18.0, 18.0]]  # 3 * (2 * 1 + 2 + 2)
    y.sum().backward()
    # at the output 1, made 5 by the pre-hook; 15 at the Linear's output (out * 3); W^T 15 = 30 for the input 2x,
    # made 210 by the hook; 420 for x (the pre-hook's doubling stands outside the module's wrapping)
    assert numpy_of(x.grad).tolist() == [[420.0] * 3]
    assert numpy_of(model.weight.grad).tolist() == [[30.0] * 3] * 2  # 15 times the input 2


def test_prepend_and_handle_removal_equal_torch():
    def run(n):
        model, order = (nn.Linear(2, 2) if n is nn else torch.nn.Linear(2, 2).double()), []
        handles = [model.register_forward_hook(lambda *a: order.append("a")),
                   model.register_forward_hook(lambda *a: order.append("b"), prepend=True),
                   model.register_forward_pre_hook(lambda *a: order.append("pre-c")),
                   model.register_forward_pre_hook(lambda *a: order.append("pre-d"), prepend=True),
                   model.register_full_backward_hook(lambda *a: order.append("bw-e")),
                   model.register_full_backward_hook(lambda *a: order.append("bw-f"), prepend=True),
                   model.register_full_backward_pre_hook(lambda *a: order.append("bpre-g")),
                   model.register_full_backward_pre_hook(lambda *a: order.append("bpre-h"), prepend=True)]
        x = np.ones((1, 2))
        model(leaf(x, "torch" if n is torch.nn else "tinypytorch")).sum().backward()
        for handle in handles[::2]:
            handle.remove()
            handle.remove()  # a second time does nothing, as in torch
        order.append("|")
        model(leaf(x, "torch" if n is torch.nn else "tinypytorch")).sum().backward()
        return order
    ours, theirs = run(nn), run(torch.nn)
    assert ours == theirs
    assert ours[:8] == ["pre-d", "pre-c", "b", "a", "bpre-h", "bpre-g", "bw-f", "bw-e"]


def test_a_hook_removed_after_forward_still_fires_in_that_backward():
    """Both frameworks take the list of backward hooks when the module is called."""
    results = []
    for framework, model in zip(("tinypytorch", "torch"), both(lambda n: n.Linear(2, 2))):
        fired = []
        handle = model.register_full_backward_hook(lambda *a: fired.append(1))
        y = model(leaf(np.ones((1, 2)), framework)).sum()
        handle.remove()
        y.backward()
        results.append(fired)
    assert results[0] == results[1] == [1]


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_with_kwargs_and_always_call(framework):
    model, seen = linear(framework, 2, 2), []
    model.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] * 0,), kwargs), with_kwargs=True)
    model.register_forward_hook(lambda m, args, kwargs, out: seen.append(numpy_of(args[0]).sum()),
                                with_kwargs=True)
    model(leaf(np.ones((1, 2)), framework))
    assert seen == [0.0]
    model.register_forward_pre_hook(lambda m, args, kwargs: 3, with_kwargs=True)
    with pytest.raises(RuntimeError, match=r"forward pre-hook must return None or a tuple of \(new_args, "
                                           r"new_kwargs\), but got 3\."):
        model(leaf(np.ones((1, 2)), framework))
    broken, always = linear(framework, 2, 2), []
    broken.register_forward_pre_hook(lambda m, args: (leaf(np.ones((1, 5)), framework),))
    broken.register_forward_hook(lambda m, args, out: always.append(out), always_call=True)
    with pytest.raises(RuntimeError if framework == "torch" else ValueError):
        broken(leaf(np.ones((1, 2)), framework))
    assert always == [None]


def test_optimizer_in_backward_equals_the_usual_loop_and_torch():
    def train(model, params, framework, in_backward, steps=4):
        lib = optim if framework == "tinypytorch" else torch.optim
        rng = np.random.default_rng(1)
        if in_backward:
            opts = {p: lib.Adam([p], lr=0.01) for p in params}

            def hook(p):
                opts[p].step()
                opts[p].zero_grad()
            for p in params:
                p.register_post_accumulate_grad_hook(hook)
        else:
            opt = lib.Adam(params, lr=0.01)
        for _ in range(steps):
            x = leaf(rng.normal(size=(8, 3)), framework, False)
            model(x).pow(2).sum().backward() if framework == "torch" else (model(x) ** 2).sum().backward()
            if not in_backward:
                opt.step()
                opt.zero_grad()
            assert all(p.grad is None for p in params)
        return [numpy_of(p) for p in params]

    results = []
    for in_backward in (False, True):
        torch.manual_seed(0)  # the same starting weights each time
        ours, theirs = both(mlp)
        start = theirs[0].weight.detach().numpy().copy()
        results.append(train(ours, list(ours.parameters()), "tinypytorch", in_backward))
        results.append(train(theirs, list(theirs.parameters()), "torch", in_backward))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert not np.allclose(results[0][0], start)  # the steps did move them


@pytest.mark.parametrize("returned", [(1, 2), "zeros"], ids=["a tuple", "a tensor"])
def test_a_post_accumulate_grad_hook_that_returns_something_raises_torchs_error(returned):
    """torch: TypeError "expected Variable, but hook returned 'tuple'"; for a tensor, RuntimeError "... should
    return None." The hook only looks at .grad: a value returned would otherwise be dropped without a word."""
    messages = []
    for fw in (torch, tinypytorch):
        p = fw.ones(2, requires_grad=True) if fw is torch else Variable(np.ones(2))
        value = fw.zeros(2) if returned == "zeros" else returned
        p.register_post_accumulate_grad_hook(lambda t, value=value: value)
        with pytest.raises((TypeError, RuntimeError)) as caught:
            (p * 2).sum().backward()
        messages.append((type(caught.value), str(caught.value)))
    assert messages[0] == messages[1]
