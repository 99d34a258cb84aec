"""Step 52: tinypytorch.nn.Module (registration by attribute, dotted names, children, modules, buffers, train/eval,
zero_grad), Sequential, ModuleList, Linear, Dropout, the activation and loss modules, state_dict/load_state_dict and
tinypytorch.save/load, against torch.nn 2.13: names, shapes, keys, printouts, outputs, gradients and messages."""
import collections
import io
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, nn
from tinypytorch.layers import BatchNorm1d, Layer, Parameter

pytestmark = [pytest.mark.step52, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype


def both(build):
    """The same architecture in tinypytorch and torch (float64), `build(nn)` called with each framework's nn."""
    return build(nn), build(torch.nn).double()


def copy_weights(ours, theirs):
    """torch's values into ours, through the state dicts (which also checks that their keys agree)."""
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(np.arange(3.0))
        self.inner = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
        self.register_buffer("count", np.zeros(1))
        self.register_buffer("scratch", np.zeros(2), persistent=False)
        self.register_parameter("unused", None)


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(3.0))
        self.inner = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.register_parameter("unused", None)


ARCHITECTURES = {
    "mlp": lambda n: n.Sequential(n.Linear(2, 3), n.ReLU(), n.Linear(3, 1)),
    "no bias": lambda n: n.Sequential(n.Linear(4, 3, bias=False), n.Tanh(), n.Linear(3, 2), n.Sigmoid()),
    "nested": lambda n: n.Sequential(n.Sequential(n.Linear(2, 2), n.Tanh()), n.ModuleList([n.Linear(2, 2)] * 2),
                                     n.Linear(2, 3)),
    "dropout": lambda n: n.Sequential(n.Linear(2, 3), n.Dropout(0.25), n.Linear(3, 3)),
    "list": lambda n: n.ModuleList([n.Linear(2, 2), n.Linear(2, 2), n.Linear(2, 2), n.Tanh(), n.Linear(2, 3)]),
}


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_names_shapes_keys_and_printout_equal_torch_nns(name):
    ours, theirs = both(ARCHITECTURES[name])
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, tuple(p.shape))
                                                                  for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in theirs.modules()]
    assert repr(ours) == repr(theirs)


def test_a_module_with_buffers_and_an_empty_slot_has_torchs_names_keys_and_order():
    ours, theirs = Block(), TorchBlock()
    for method in ("named_parameters", "named_buffers", "named_children", "named_modules"):
        assert [n for n, _ in getattr(ours, method)()] == [n for n, _ in getattr(theirs, method)()], method
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["w", "count", "inner.0.weight", "inner.0.bias"]
    assert [n for n, _ in ours.named_parameters(recurse=False)] == ["w"]
    assert [n for n, _ in ours.named_parameters(prefix="model")][0] == "model.w"
    assert ours.unused is None and len(list(ours.buffers())) == 2


def test_a_shared_parameter_or_module_is_listed_once_as_torch_does():
    def build(n):
        shared = n.Linear(2, 2)
        return n.Sequential(shared, n.Tanh(), shared)
    ours, theirs = both(build)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == ["0.weight",
                                                                                                  "0.bias"]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the state dict lists it under each name


@settings(deadline=None, max_examples=25)
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=5), batch=st.integers(1, 6), seed=st.integers(0, 99))
def test_weights_copied_from_torch_give_its_outputs_and_gradients(sizes, batch, seed):
    def build(n):
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [n.Linear(a, b), n.Tanh()]
        return n.Sequential(*layers[:-1])
    ours, theirs = both(build)
    copy_weights(ours, theirs)
    x = np.random.default_rng(seed).normal(size=(batch, sizes[0]))
    target = np.random.default_rng(seed + 1).normal(size=(batch, sizes[-1]))
    loss = nn.MSELoss()(ours(Variable(x, requires_grad=False)), target)
    loss.backward()
    loss_t = torch.nn.MSELoss()(theirs(torch.from_numpy(x)), torch.from_numpy(target))
    loss_t.backward()
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
    for (name, p), p_t in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_loss_modules_equal_torchs_for_every_reduction(reduction):
    rng = np.random.default_rng(0)
    scores, classes, target = rng.normal(size=(5, 4)), rng.integers(0, 4, 5), rng.normal(size=(5, 4))
    for ours, theirs, t in ((nn.CrossEntropyLoss(reduction=reduction), torch.nn.CrossEntropyLoss(reduction=reduction),
                             classes),
                            (nn.MSELoss(reduction=reduction), torch.nn.MSELoss(reduction=reduction), target)):
        x, x_t = Variable(scores.copy()), torch.tensor(scores, requires_grad=True)
        y, y_t = ours(x, t), theirs(x_t, torch.from_numpy(t))
        np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)
        y.sum().backward() if reduction == "none" else y.backward()
        (y_t.sum() if reduction == "none" else y_t).backward()
        np.testing.assert_allclose(x.grad.data, x_t.grad.numpy(), rtol=1e-12)
        assert repr(ours) == repr(theirs)


def test_activation_modules_equal_torchs():
    x = np.linspace(-3, 3, 7)
    for name in ("ReLU", "Tanh", "Sigmoid"):
        ours, theirs = getattr(nn, name)(), getattr(torch.nn, name)()
        np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).numpy(), rtol=1e-15)
        assert repr(ours) == repr(theirs) == f"{name}()"


def test_linear_draws_torchs_uniform_bound_from_the_frameworks_generator():
    tinypytorch.manual_seed(5)
    a = nn.Linear(16, 8)
    tinypytorch.manual_seed(5)
    b = nn.Linear(16, 8)
    np.testing.assert_array_equal(a.weight.data, b.weight.data)
    assert a.weight.shape == tuple(torch.nn.Linear(16, 8).weight.shape) == (8, 16)
    for p in (a.weight, a.bias):
        assert np.abs(p.data).max() <= 0.25 and np.abs(p.data).max() > 0.2  # 1/sqrt(16)
    assert isinstance(a, nn.Module) and isinstance(a, Layer) and isinstance(a, tinypytorch.layers.Linear)


def test_sequential_indexes_slices_and_iterates_as_torchs():
    ours, theirs = both(ARCHITECTURES["no bias"])
    assert len(ours) == len(theirs) == 4
    for i in range(-4, 4):
        assert repr(ours[i]) == repr(theirs[i])
    for piece in (slice(1, 3), slice(None, None, -1), slice(2, None), slice(0, 0)):
        assert repr(ours[piece]) == repr(theirs[piece])
        assert list(ours[piece].state_dict()) == list(theirs[piece].state_dict())
    assert [type(m).__name__ for m in ours] == [type(m).__name__ for m in theirs]
    for bad in (4, -5):
        with pytest.raises(IndexError, match=f"index {bad} is out of range"):
            ours[bad]
        with pytest.raises(IndexError, match=f"index {bad} is out of range"):
            theirs[bad]
    ordered = nn.Sequential(collections.OrderedDict([("first", nn.Linear(1, 2)), ("act", nn.ReLU())]))
    assert [n for n, _ in ordered.named_parameters()] == ["first.weight", "first.bias"]


def test_module_list_appends_extends_indexes_and_renumbers_a_slice_as_torchs():
    ours, theirs = nn.ModuleList(), torch.nn.ModuleList()
    for m in (ours, theirs):
        n = nn if m is ours else torch.nn
        m.append(n.Linear(1, 2))
        m.extend([n.Tanh(), n.Linear(2, 2)])
        m.append(n.Linear(2, 2))
    assert repr(ours) == repr(theirs)
    assert repr(ours[1:]) == repr(theirs[1:])
    assert list(ours[1:].state_dict()) == list(theirs[1:].state_dict())  # renumbered from 0
    assert repr(ours[-1]) == repr(theirs[-1]) and len(ours) == len(theirs) == 4
    assert [type(m).__name__ for m in ours] == [type(m).__name__ for m in theirs]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got int"):
        ours.extend(3)
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got int"):
        theirs.extend(3)
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList()) == "ModuleList()"


def test_train_eval_switch_every_module_and_dropout_follows():
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Tanh()))
    assert model.eval() is model and not any(m.training for m in model.modules())
    x = Variable(np.ones((3, 2)))
    np.testing.assert_array_equal(model(x).data, model[2](model[0](x)).data)  # dropout passes through
    assert all(m.training for m in model.train().modules())


def test_zero_grad_sets_none_by_default_or_zeros_as_torch():
    ours, theirs = both(ARCHITECTURES["mlp"])
    ours(Variable(np.ones((2, 2)))).sum().backward()
    theirs(torch.ones(2, 2, dtype=torch.float64)).sum().backward()
    ours.zero_grad(set_to_none=False)
    theirs.zero_grad(set_to_none=False)
    for p, p_t in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_array_equal(p.grad.data, p_t.grad.numpy())
    ours.zero_grad()
    theirs.zero_grad()
    assert all(p.grad is None for p in ours.parameters()) and all(p.grad is None for p in theirs.parameters())


def test_state_dict_values_share_memory_are_detached_and_keep_vars_gives_the_parameters():
    model = nn.Linear(2, 3)
    state = model.state_dict()
    assert isinstance(state, collections.OrderedDict)
    assert not state["weight"].requires_grad
    assert np.shares_memory(state["weight"].data, model.weight.data)
    assert model.state_dict(keep_vars=True)["weight"] is model.weight


def test_load_state_dict_copies_in_place_and_reports_keys_as_torch():
    ours, theirs = both(ARCHITECTURES["mlp"])
    weight = ours[0].weight
    result = ours.load_state_dict({k: tinypytorch.from_numpy(v.numpy()) for k, v in theirs.state_dict().items()})
    assert ours[0].weight is weight  # the same Parameter, new values: an optimizer keeps working
    np.testing.assert_array_equal(weight.data, theirs[0].weight.detach().numpy())
    assert repr(result) == repr(theirs.load_state_dict(theirs.state_dict())) == "<All keys matched successfully>"
    partial = {"0.weight": np.zeros((3, 2)), "extra": np.zeros(1)}
    result, result_t = ours.load_state_dict({k: tinypytorch.from_numpy(v) for k, v in partial.items()}, strict=False), \
        theirs.load_state_dict({k: torch.from_numpy(v) for k, v in partial.items()}, strict=False)
    assert (result.missing_keys, result.unexpected_keys) == (result_t.missing_keys, result_t.unexpected_keys)
    np.testing.assert_array_equal(ours[0].weight.data, 0.0)


def messages(state):
    """(ours, torch's) message of load_state_dict(state) into the same model."""
    ours, theirs = both(ARCHITECTURES["mlp"])
    with pytest.raises(RuntimeError) as error:
        ours.load_state_dict({k: tinypytorch.from_numpy(v) for k, v in state.items()})
    with pytest.raises(RuntimeError) as error_t:
        theirs.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    torch_text = str(error_t.value)
    return str(error.value), torch_text


def good_state():
    return {k: v.data.copy() for k, v in nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).state_dict()
            .items()}


def test_missing_unexpected_and_misshapen_keys_raise_torchs_message():
    missing = good_state()
    del missing["0.bias"], missing["2.weight"]
    ours, theirs = messages(missing)
    assert ours == theirs == ('Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: '
                              '"0.bias", "2.weight". ')
    unexpected = dict(good_state(), extra=np.zeros(1))
    del unexpected["2.bias"]
    ours, theirs = messages(unexpected)
    assert ours == theirs
    assert 'Unexpected key(s) in state_dict: "extra". ' in ours
    misshapen = dict(good_state(), **{"0.weight": np.zeros((3, 3))})
    ours, theirs = messages(misshapen)
    assert ours == theirs
    assert "size mismatch for 0.weight: copying a param with shape torch.Size([3, 3]) from checkpoint, the shape " \
           "in current model is torch.Size([3, 2])." in ours
    del misshapen["2.bias"]
    assert messages(misshapen)[0] == messages(misshapen)[1]


def test_load_state_dict_refuses_what_is_not_a_mapping():
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        nn.Linear(1, 1).load_state_dict([("weight", np.zeros((1, 1)))])


def test_assigning_the_wrong_kind_to_a_slot_raises_torchs_type_error():
    ours, theirs = Block(), TorchBlock()
    with pytest.raises(TypeError, match=r"cannot assign 'torch.DoubleTensor' as parameter 'w' \(torch.nn.Parameter "
                                        r"or None expected\)"):
        theirs.w = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"cannot assign 'tinypytorch.core.Variable' as parameter 'w' "
                                        r"\(tinypytorch.nn.Parameter or None expected\)"):
        ours.w = Variable(np.zeros(3))
    with pytest.raises(TypeError, match=r"cannot assign 'int' as parameter 'w' \(tinypytorch.nn.Parameter or None"):
        ours.w = 3
    with pytest.raises(TypeError, match=r"cannot assign 'int' as parameter 'unused'"):
        ours.unused = 3
    with pytest.raises(TypeError, match=r"cannot assign 'int' as child module 'inner' \(tinypytorch.nn.Module or "
                                        r"None expected\)"):
        ours.inner = 3
    with pytest.raises(TypeError, match=r"cannot assign 'int' as child module 'inner' \(torch.nn.Module"):
        theirs.inner = 3
    with pytest.raises(TypeError, match=r"cannot assign 'int' as buffer 'count'"):
        ours.count = 3
    ours.w, ours.inner = None, None  # None empties a slot, as in torch
    theirs.w, theirs.inner = None, None
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["count"]
    ours.w = Parameter(np.ones(2))  # and a Parameter fills it again
    assert [n for n, _ in ours.named_parameters()] == ["w"]
    ours.count = Variable(np.ones(1))  # a buffer takes a tensor (kept as its array)
    np.testing.assert_array_equal(ours.state_dict()["count"].data, 1.0)


def test_register_and_add_module_refuse_bad_names_and_values_as_torch():
    model = Block()
    with pytest.raises(TypeError, match=r"cannot assign 'numpy.ndarray' object to parameter 'p' "
                                        r"\(tinypytorch.nn.Parameter or None required\)"):
        model.register_parameter("p", np.zeros(1))
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        model.add_module("m", 3)
    with pytest.raises(TypeError, match="cannot assign 'int' object to buffer 'b'"):
        model.register_buffer("b", 3)
    with pytest.raises(KeyError, match=r'buffer name can.*t contain "\."'):
        model.register_buffer("a.b", np.zeros(1))
    with pytest.raises(KeyError, match="attribute 'inner' already exists"):
        model.register_parameter("inner", Parameter(np.zeros(1)))
    with pytest.raises(KeyError, match="parameter name can.*t be empty string"):
        model.register_parameter("", None)
    with pytest.raises(TypeError, match="module name should be a string. Got int"):
        model.add_module(1, nn.Tanh())
    model.add_module("extra", nn.Linear(1, 1))
    assert [n for n, _ in model.named_children()] == ["inner", "extra"]


def test_a_module_without_forward_and_a_parameter_before_init_are_refused_as_torch():
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required "forward" function'):
        nn.Module()(1)

    class Early(nn.Module):
        def __init__(self):
            self.w = Parameter(np.zeros(1))
            super().__init__()
    with pytest.raises(AttributeError, match="super"):
        Early()


def test_deleting_an_attribute_unregisters_it():
    model = Block()
    del model.w, model.count
    assert [n for n, _ in model.named_parameters()] == ["inner.0.weight", "inner.0.bias"]
    assert list(model.state_dict()) == ["inner.0.weight", "inner.0.bias"]


def test_a_plain_layer_inside_a_module_is_walked_with_its_buffers():
    model = nn.Sequential(nn.Linear(2, 3), BatchNorm1d(3))
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                        "1.running_var"]
    assert "(1): BatchNorm1d()" in repr(model)


def test_save_and_load_round_trip_through_an_npz_file_without_pickle(tmp_path):
    model = Block()
    path = tmp_path / "block.pt"
    tinypytorch.save(model.state_dict(), path)
    assert path.exists() and not (tmp_path / "block.pt.npz").exists()  # exactly the name given, as torch.save
    state = tinypytorch.load(path)
    assert list(state) == list(model.state_dict())
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(state[key].data, value.data)
        assert not state[key].requires_grad
    buffer = io.BytesIO()
    tinypytorch.save(model.state_dict(), buffer)
    buffer.seek(0)
    assert list(tinypytorch.load(buffer)) == list(state)
    with np.load(path, allow_pickle=False) as archive:  # a plain npz: NumPy reads it without pickle
        assert sorted(archive.files) == sorted(["structure"] + [f"data/{i}" for i in range(len(state))])
        for i, value in enumerate(model.state_dict().values()):  # the arrays in the order saved
            np.testing.assert_array_equal(archive[f"data/{i}"], value.data)


def test_a_model_loaded_from_a_file_gives_the_same_outputs(tmp_path):
    tinypytorch.manual_seed(0)
    model = ARCHITECTURES["nested"](nn)
    tinypytorch.save(model.state_dict(), tmp_path / "m.pt")
    tinypytorch.manual_seed(1)
    other = ARCHITECTURES["nested"](nn)
    x = Variable(np.random.default_rng(0).normal(size=(4, 2)))
    assert not np.array_equal(other[2](other[0](x)).data, model[2](model[0](x)).data)
    other.load_state_dict(tinypytorch.load(tmp_path / "m.pt"))
    np.testing.assert_array_equal(other[2](other[0](x)).data, model[2](model[0](x)).data)


def test_save_pickles_a_module_that_load_gives_back_only_with_weights_only_false(tmp_path):
    torch.save(torch.nn.Linear(1, 1), tmp_path / "theirs.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(tmp_path / "theirs.pt")
    model = nn.Linear(1, 1)
    tinypytorch.save(model, tmp_path / "m.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        tinypytorch.load(tmp_path / "m.pt")
    loaded = tinypytorch.load(tmp_path / "m.pt", weights_only=False)
    assert type(loaded) is nn.Linear and np.array_equal(loaded.weight.data, model.weight.data)


def test_an_optimizer_over_a_modules_parameters_trains_it_like_torch():
    ours, theirs = both(ARCHITECTURES["mlp"])
    copy_weights(ours, theirs)
    optimizer, optimizer_t = tinypytorch.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(),
                                                                                                lr=0.1)
    x = np.random.default_rng(2).normal(size=(6, 2))
    for _ in range(3):
        optimizer.zero_grad()
        nn.MSELoss()(ours(Variable(x)), np.zeros((6, 1))).backward()
        optimizer.step()
        optimizer_t.zero_grad()
        torch.nn.MSELoss()(theirs(torch.from_numpy(x)), torch.zeros(6, 1, dtype=torch.float64)).backward()
        optimizer_t.step()
    for p, p_t in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.data, p_t.detach().numpy(), rtol=1e-12)


step = load_step(52)


def test_the_steps_model_equals_its_torch_twin_and_survives_save_and_load():
    assert repr(step.model) == repr(step.twin)
    for (name, p), p_t in zip(step.model.named_parameters(), step.twin.parameters()):
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=name)
