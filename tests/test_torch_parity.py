"""Where a PyTorch program used to run and give a silently different result: each case side by side with torch.

Every case is written twice, once per framework, with the same names; the reference is what
torch 2.13 does (its values, or its error message), never a number taken from tinypytorch.
"""
import threading

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable

pytestmark = pytest.mark.torch


def ours(values, requires_grad=True):
    return Variable(np.array(values, dtype=np.float64), requires_grad=requires_grad)


def theirs(values, requires_grad=True):
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


def message_of(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


# ----- 1. .grad owns its array, and adds up in place ------------------------------------------------

def _shared_sum(m, make, ones):
    x, y = make([1.0, 1.0, 1.0]), make([1.0, 1.0, 1.0])
    z = x + y
    z.backward(ones(3), retain_graph=True)
    x.grad.zero_()  # must not touch y.grad
    z.backward(ones(3))
    return x.grad, y.grad


def test_gradients_of_two_leaves_do_not_share_memory():
    gx, gy = _shared_sum(tinypytorch, ours, np.ones)
    tx, ty = _shared_sum(torch, theirs, lambda n: torch.ones(n, dtype=torch.float64))
    np.testing.assert_array_equal(gx, tx.numpy())
    np.testing.assert_array_equal(gy, ty.numpy())  # [2, 2, 2] in torch


def test_grad_is_not_the_callers_seed():
    for make, seed in [(ours, np.ones(3)), (theirs, torch.ones(3, dtype=torch.float64))]:
        x = make([1.0, 2.0, 3.0])
        (x + 2).backward(seed)
        x.grad.zero_()
        assert seed.sum() == 3  # the caller's array is unchanged


def test_grad_after_sum_can_be_zeroed_in_place():
    x, t = ours([1.0, 2.0]), theirs([1.0, 2.0])
    x.sum().backward()
    t.sum().backward()
    x.grad.zero_()  # after sum, the gradient arrives as a broadcast (read-only) view
    t.grad.zero_()
    np.testing.assert_array_equal(x.grad, t.grad.numpy())


def test_grad_adds_up_in_place_so_a_held_reference_sees_the_sum():
    results = []
    for make in (ours, theirs):
        x = make([1.0, 2.0])
        (x * 2).sum().backward()
        held = x.grad
        (x * 2).sum().backward()
        results.append((np.array(held.tolist()), held is x.grad))
    np.testing.assert_array_equal(results[0][0], results[1][0])  # [4, 4] in torch
    assert results[0][1] == results[1][1]


# ----- 2. integers cannot require grad --------------------------------------------------------------

def test_integer_leaf_that_requires_grad_is_refused_with_torchs_message():
    _, expected = message_of(lambda: torch.tensor([1, 2, 3], requires_grad=True))
    with pytest.raises(RuntimeError, match=expected):
        Variable(np.array([1, 2, 3]), requires_grad=True)
    with pytest.raises(RuntimeError, match=expected):
        Variable(np.array([1, 2, 3]), requires_grad=False).requires_grad_()


def test_integer_variable_by_default_requires_no_grad_so_backward_is_refused():
    x = Variable(np.array([1, 2, 3]))  # the tutorial's default: True only where a gradient can exist
    assert not x.requires_grad
    _, expected = message_of(lambda: (torch.tensor([1, 2, 3]) * 0.5).sum().backward())
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 0.5).sum().backward()
    assert "does not require grad" in expected


def test_integer_output_of_a_float_operation_requires_no_grad():
    x, t = ours([1.5, -2.5]), theirs([1.5, -2.5])
    assert x.long().requires_grad == t.long().requires_grad
    assert x.argmax().requires_grad == t.argmax().requires_grad


# ----- 3. and 4. hooks and retain_grad across an in-place change ------------------------------------

def _retain_then_inplace(m, make, view):
    a = make([2.0, 1.0])
    b = m.sin(a) * 1.0
    target = b[0] if view else b
    target.retain_grad()
    target.mul_(2)
    (3 * target).sum().backward()
    return target.grad


@pytest.mark.parametrize("view", [False, True])
def test_retain_grad_keeps_the_gradient_of_the_newest_version(view):
    np.testing.assert_allclose(_retain_then_inplace(tinypytorch, ours, view),
                               _retain_then_inplace(torch, theirs, view).numpy(), rtol=1e-14)


def _hook_after_inplace(m, make):
    seen = []
    x = make(1.0)
    t = m.sin(x)
    t.register_hook(lambda g: seen.append(("first", g.item())))
    t.mul_(3)
    t.register_hook(lambda g: seen.append(("late", g.item())) or g * g)
    (t * 5).backward()
    return x.grad.item(), seen


def test_hook_registered_after_an_inplace_change_sees_the_new_version():
    ours_grad, ours_seen = _hook_after_inplace(tinypytorch, ours)
    torch_grad, torch_seen = _hook_after_inplace(torch, theirs)
    assert ours_seen == torch_seen  # late hook sees 5; the first hook sees 3 * 25 = 75
    assert ours_grad == pytest.approx(torch_grad, rel=1e-14)


# ----- 5. augmented assignment is in place; comparisons are element-wise ----------------------------

def test_minus_equals_under_no_grad_changes_the_parameter_itself():
    final = []
    for m, make in [(tinypytorch, ours), (torch, theirs)]:
        p = make([1.0, -2.0])
        same = p
        for _ in range(3):
            loss = (p * p).sum()
            loss.backward()
            with m.no_grad():
                p -= 0.1 * p.grad
            p.grad = None
        assert p is same and p.requires_grad
        final.append(np.array(p.tolist()))
    np.testing.assert_allclose(final[0], final[1], rtol=1e-14)


def test_augmented_assignment_on_a_leaf_outside_no_grad_is_refused():
    _, expected = message_of(lambda: theirs([1.0]).__isub__(1.0))
    with pytest.raises(RuntimeError, match=expected):
        p = ours([1.0])
        p -= 1.0


@pytest.mark.parametrize("op", ["__iadd__", "__isub__", "__imul__", "__itruediv__"])
def test_augmented_assignment_on_a_non_leaf_is_recorded(op):
    grads = []
    for make in (ours, theirs):
        x, w = make([1.0, 2.0]), make([3.0, -4.0])
        y = x * 1.0
        y = getattr(y, op)(w)
        (y * y).sum().backward()
        grads.append([np.array(x.grad.tolist()), np.array(w.grad.tolist())])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-14)


@pytest.mark.parametrize("op", ["__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"])
def test_comparisons_are_elementwise_bools_that_require_no_grad(op):
    x, t = ours([1.0, 2.0, 3.0]), theirs([1.0, 2.0, 3.0])
    for other in (2.0, [3.0, 2.0, 1.0]):
        mine = getattr(x, op)(other if np.isscalar(other) else np.array(other))
        torchs = getattr(t, op)(other if np.isscalar(other) else torch.tensor(other, dtype=torch.float64))
        np.testing.assert_array_equal(mine.data, torchs.numpy())
        assert mine.dtype == np.bool_ and not mine.requires_grad and not torchs.requires_grad


def test_accuracy_by_comparison_as_pytorch_programs_write_it():
    pred, target = [0, 2, 1, 1], [0, 1, 1, 1]
    correct = (Variable(np.array(pred)) == Variable(np.array(target))).sum().item()
    assert correct == (torch.tensor(pred) == torch.tensor(target)).sum().item()


def test_equality_with_none_and_identity_still_work():
    x = ours([1.0])
    assert (x == None) is (theirs([1.0]) == None) is False  # noqa: E711 (the comparison is the point)
    assert {x: 1}[x] == 1  # hashes by identity, as a torch tensor


def test_truth_value_as_torch():
    _, expected = message_of(lambda: bool(torch.ones(2)))
    with pytest.raises(RuntimeError, match=expected):
        bool(Variable(np.ones(2)))
    assert bool(Variable(np.array([0.0]))) is bool(torch.zeros(1)) is False


def test_setitem_is_recorded_like_torchs():
    grads = []
    for make in (ours, theirs):
        x, v = make([1.0, 2.0, 3.0, 4.0]), make(5.0)
        y = x * 1.0
        y[1] = v * 2
        y[[0, 3]] = v
        (y * y).sum().backward()
        grads.append((np.array(y.tolist()), x.grad.tolist(), v.grad.item()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-14)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-14)
    assert grads[0][2] == pytest.approx(grads[1][2], rel=1e-14)


def test_setitem_on_a_leaf_under_no_grad_and_outside():
    x, t = ours([1.0, 2.0]), theirs([1.0, 2.0])
    with tinypytorch.no_grad():
        x[0] = 7.0
    with torch.no_grad():
        t[0] = 7.0
    np.testing.assert_array_equal(x.data, t.detach().numpy())
    assert x._version == t._version
    _, expected = message_of(lambda: t.__setitem__(0, 1.0))  # torch: "a view of a leaf Variable ..."
    words = "leaf Variable that requires grad is being used in an in-place operation"
    assert words in expected
    with pytest.raises(RuntimeError, match=words):
        x[0] = 1.0


# ----- 6. grad mode is thread-local ----------------------------------------------------------------

@pytest.mark.parametrize("m, make", [(tinypytorch, ours), (torch, theirs)], ids=["tinypytorch", "torch"])
def test_no_grad_in_one_thread_does_not_stop_another_from_recording(m, make):
    inside, recorded = threading.Event(), []

    def hold_no_grad():
        with m.no_grad():
            inside.set()
            done.wait(5)

    done = threading.Event()
    other = threading.Thread(target=hold_no_grad)
    other.start()
    inside.wait(5)
    recorded.append((make([1.0]) * 2).requires_grad)
    done.set()
    other.join()
    assert recorded == [True]


# ----- also different without telling --------------------------------------------------------------

def test_backward_of_a_non_scalar_needs_its_gradient():
    _, expected = message_of(lambda: (theirs([1.0, 2.0]) * 2).backward())
    with pytest.raises(RuntimeError, match=expected):
        (ours([1.0, 2.0]) * 2).backward()
    with pytest.raises(RuntimeError, match=expected):
        tinypytorch.autograd.grad(ours([1.0, 2.0]) * 2, [ours([1.0])], allow_unused=True)


def test_grad_fn_names_and_next_functions_as_torch():
    x, t = ours([1.0, 2.0]), theirs([1.0, 2.0])
    y, yt = (x * 2).sum(), (t * 2).sum()
    assert y.grad_fn.name() == yt.grad_fn.name() == "SumBackward0"
    mul, mul_t = y.grad_fn.next_functions[0][0], yt.grad_fn.next_functions[0][0]
    assert mul.name() == mul_t.name()
    assert [(type(n).__name__ if n is not None else None, nr) for n, nr in mul.next_functions] == \
           [(type(n).__name__ if n is not None else None, nr) for n, nr in mul_t.next_functions]
    assert mul.next_functions[0][0].variable is x
    assert repr(y).endswith("grad_fn=<SumBackward0>)") and repr(yt).endswith("grad_fn=<SumBackward0>)")
    assert repr(x).endswith("requires_grad=True)") and repr(t).endswith("requires_grad=True)")


def test_tensor_methods_as_torch():
    values = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]
    x, t = ours(values), theirs(values)
    cases = {
        "size": lambda a: tuple(a.size()), "size(1)": lambda a: a.size(1), "numel": lambda a: a.numel(),
        "dim": lambda a: a.dim(), "tolist": lambda a: a.detach().tolist(), "item": lambda a: a.sum().item(),
    }
    for name, case in cases.items():
        assert case(x) == case(t), name
    chains = {
        "view t mm": lambda a: a.view(3, 2).t().mm(a.t()),
        "exp log abs sqrt": lambda a: (a.exp().log().abs() + 1).sqrt(),
        "clamp pow": lambda a: a.clamp(-0.5, 1.0).pow(3),
        "unsqueeze expand flatten": lambda a: a.unsqueeze(0).expand(2, 2, 3).flatten(),
        "clone float double": lambda a: a.clone().float().double() * a,
        "min amax": lambda a: a.min() + a.amax(dim=0).sum(),
        "max(dim) values": lambda a: a.max(dim=1).values.sum() + a.max(1)[0].sum(),
        "norm": lambda a: a.norm() + a.norm(dim=1).sum(),
    }
    for name, chain in chains.items():
        x.grad, t.grad = None, None
        y, yt = chain(x), chain(t)
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-6 if "float" in name else 1e-12,
                                   err_msg=name)
        y.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-6 if "float" in name else 1e-12, err_msg=name)


def test_view_of_non_contiguous_data_is_refused_as_torch():
    _, expected = message_of(lambda: torch.ones(2, 3).t().view(6))
    with pytest.raises(RuntimeError, match=r"view size is not compatible"):
        Variable(np.ones((2, 3))).t().view(6)
    assert "view size is not compatible" in expected


def test_numpy_of_a_variable_that_requires_grad_is_refused_as_torch():
    _, expected = message_of(lambda: torch.ones(2, requires_grad=True).numpy())
    with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
        Variable(np.ones(2)).numpy()
    assert "Can't call numpy()" in expected
    x = Variable(np.ones(2), requires_grad=False)
    assert x.numpy() is x.data  # shares memory, as torch's


def test_autograd_backward_of_several_outputs_as_torch():
    grads = []
    for m, make in [(tinypytorch, ours), (torch, theirs)]:
        x = make([1.0, 2.0])
        y1, y2 = (x * x).sum(), x * 3.0
        seed = np.array([1.0, -1.0]) if m is tinypytorch else torch.tensor([1.0, -1.0], dtype=torch.float64)
        m.autograd.backward([y1, y2], [None, seed])
        grads.append(np.array(x.grad.tolist()))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-14)


def test_post_accumulate_grad_hook_sees_the_updated_grad_and_may_free_it():
    seen = []
    for make in (ours, theirs):
        p = make([1.0, 2.0])
        p.register_post_accumulate_grad_hook(lambda q: seen.append(q.grad.tolist()) or setattr(q, "grad", None))
        (p * p).sum().backward()
        (p * 3.0).sum().backward()
        assert p.grad is None
    assert seen[:2] == seen[2:]  # [[2, 4], [3, 3]] in torch


def shift_function(base):
    """x - x.min() as a custom Function of `base` (either framework's autograd.Function), written PyTorch's way."""
    class Shift(base):
        @staticmethod
        def forward(ctx, x):
            return x - x.min()

        @staticmethod
        def backward(ctx, g):
            return g

    return Shift


def test_a_custom_function_whose_forward_calls_tensor_methods_runs():
    Shift, ShiftT = shift_function(tinypytorch.autograd.Function), shift_function(torch.autograd.Function)
    x, t = ours([3.0, 1.0, 2.0]), theirs([3.0, 1.0, 2.0])
    y, yt = Shift.apply(x), ShiftT.apply(t)
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())


def test_complex_variables_are_refused_rather_than_given_a_gradient_other_than_torchs():
    z = torch.tensor([1 + 2j], requires_grad=True)
    (z * z).abs().sum().backward()  # torch: the conjugate convention, which the package does not follow
    with pytest.raises(RuntimeError, match="complex variables cannot require grad"):
        Variable(np.array([1 + 2j]), requires_grad=True)
    assert not Variable(np.array([1 + 2j])).requires_grad


@pytest.mark.parametrize("m, make", [(tinypytorch, ours), (torch, theirs)], ids=["tinypytorch", "torch"])
def test_saved_tensor_hooks_of_one_thread_do_not_pack_another_threads_tensors(m, make):
    inside, done, packed = threading.Event(), threading.Event(), []

    def hold_hooks():
        with m.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
            inside.set()
            done.wait(5)

    other = threading.Thread(target=hold_hooks)
    other.start()
    inside.wait(5)
    x = make([1.0, 2.0])
    (x * x).sum().backward()
    done.set()
    other.join()
    assert packed == []
