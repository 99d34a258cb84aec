"""nn.Embedding and F.embedding against torch's: the rows looked up, the weight's gradient (repeated indices add up,
padding_idx's row gets none, scale_grad_by_freq), second derivatives, max_norm's renormalisation in place,
initialisation from the framework's generator, from_pretrained, printout, devices, and torch's errors. Every
expected value is torch's, from the same weight and indices."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from reference import assert_refused_as_torch
from tinypytorch import Variable, cuda, nn
from tinypytorch.nn import functional as F

pytestmark = pytest.mark.torch

RNG = np.random.default_rng(17)
WEIGHT = RNG.standard_normal((6, 4))
INDICES = [np.array(3), np.array([0, 5, 5, 2]), np.array([[1, 2, 2], [4, 1, 2]]), np.zeros((2, 0), np.int64)]


@pytest.fixture(autouse=True)
def _leave_the_framework_stream_as_found():
    with tinypytorch.random.fork_rng():
        yield


def both(indices, index_dtype=np.int64):
    idx = indices.astype(index_dtype)
    return (Variable(WEIGHT.copy()), tinypytorch.from_numpy(idx)), (torch.tensor(WEIGHT, requires_grad=True),
                                                                   torch.from_numpy(idx))


@pytest.mark.parametrize("kwargs", [{}, {"padding_idx": 2}, {"padding_idx": -1}, {"scale_grad_by_freq": True},
                                    {"padding_idx": 2, "scale_grad_by_freq": True}], ids=str)
@pytest.mark.parametrize("indices", INDICES, ids=lambda a: str(a.shape))
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_lookup_and_weight_gradient_equal_torchs(indices, kwargs, index_dtype):
    (w, idx), (w_t, idx_t) = both(indices, index_dtype)
    y, y_t = F.embedding(idx, w, **kwargs), TF.embedding(idx_t, w_t, **kwargs)
    assert y.shape == tuple(y_t.shape) and y.dtype == np.float64
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())  # rows copied: exactly
    g = np.random.default_rng(1).standard_normal(y.shape)
    (y * Variable(g)).sum().backward()
    (y_t * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(w.grad.data, w_t.grad.numpy(), rtol=1e-14, atol=0)
    assert y.grad_fn.name() == y_t.grad_fn.name() == "EmbeddingBackward0"


def test_second_derivatives_through_the_lookup_equal_torchs():
    (w, idx), (w_t, idx_t) = both(INDICES[2])
    y, y_t = F.embedding(idx, w, padding_idx=1), TF.embedding(idx_t, w_t, padding_idx=1)
    (g,) = tinypytorch.autograd.grad((y ** 3).sum(), [w], create_graph=True)
    (g_t,) = torch.autograd.grad((y_t ** 3).sum(), [w_t], create_graph=True)
    np.testing.assert_allclose(g.data, g_t.detach().numpy(), rtol=1e-13)
    (g * g).sum().backward()
    (g_t * g_t).sum().backward()
    np.testing.assert_allclose(w.grad.data, w_t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("max_norm, norm_type", [(1.0, 2.0), (0.5, 1.0), (1.5, 3.0), (100.0, 2.0)])
def test_max_norm_renormalises_the_looked_up_rows_in_place_as_torch(max_norm, norm_type):
    w, w_t = tinypytorch.tensor(WEIGHT * 2), torch.tensor(WEIGHT * 2)
    idx = np.array([[0, 3, 3], [5, 0, 1]])
    versions = w._version, w_t._version
    y = F.embedding(tinypytorch.from_numpy(idx), w, max_norm=max_norm, norm_type=norm_type)
    y_t = TF.embedding(torch.from_numpy(idx), w_t, max_norm=max_norm, norm_type=norm_type)
    np.testing.assert_allclose(w.data, w_t.numpy(), rtol=1e-12)  # rows 2 and 4 untouched, the others shrunk
    np.testing.assert_allclose(y.data, y_t.numpy(), rtol=1e-12)
    assert w._version - versions[0] == w_t._version - versions[1] == 1  # one in-place change, over or not


def test_the_module_trains_as_torchs_with_the_same_table():
    ours = nn.Embedding(6, 4, padding_idx=0, dtype=np.float64)
    theirs = torch.nn.Embedding(6, 4, padding_idx=0, dtype=torch.float64)
    ours.load_state_dict({"weight": tinypytorch.from_numpy(theirs.weight.detach().numpy().copy())})
    opt, opt_t = tinypytorch.optim.SGD(ours.parameters(), lr=0.5), torch.optim.SGD(theirs.parameters(), lr=0.5)
    for step in range(3):
        idx = np.random.default_rng(step).integers(0, 6, size=(3, 5))
        loss = (ours(tinypytorch.from_numpy(idx)) ** 2).mean()
        loss_t = (theirs(torch.from_numpy(idx)) ** 2).mean()
        for o, l in ((opt, loss), (opt_t, loss_t)):
            o.zero_grad()
            l.backward()
            o.step()
    np.testing.assert_allclose(ours.weight.data, theirs.weight.detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(ours.weight.data[0], 0.0)  # the padding row never moves


def test_initial_table_is_normal_from_the_framework_generator_with_the_padding_row_zeroed():
    tinypytorch.manual_seed(3)
    table = nn.Embedding(400, 50, padding_idx=7).weight.data
    tinypytorch.manual_seed(3)
    drawn = nn.init.normal_(tinypytorch.zeros(400, 50)).data  # the same draw, by nn.init.normal_
    np.testing.assert_array_equal(np.delete(table, 7, axis=0), np.delete(drawn, 7, axis=0))
    np.testing.assert_array_equal(table[7], 0.0)
    theirs = torch.nn.Embedding(400, 50, padding_idx=7).weight.detach().numpy()
    assert table.dtype == theirs.dtype == np.float32
    for values in (table, theirs):  # the distribution is torch's: N(0, 1)
        assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02


def test_printout_state_dict_and_options_are_torchs():
    for kwargs in [{}, {"padding_idx": -2}, {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True}]:
        ours, theirs = nn.Embedding(5, 3, **kwargs), torch.nn.Embedding(5, 3, **kwargs)
        assert repr(ours) == repr(theirs)
        assert ours.padding_idx == theirs.padding_idx
        assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
        assert ours.weight.shape == tuple(theirs.weight.shape)


def test_from_pretrained_and_freeze_as_torch():
    table = np.arange(12.0).reshape(4, 3)
    for freeze in (True, False):
        ours = nn.Embedding.from_pretrained(tinypytorch.from_numpy(table.copy()), freeze=freeze, padding_idx=1)
        theirs = torch.nn.Embedding.from_pretrained(torch.from_numpy(table.copy()), freeze=freeze, padding_idx=1)
        assert ours.weight.requires_grad == theirs.weight.requires_grad == (not freeze)
        np.testing.assert_array_equal(ours.weight.data, theirs.weight.detach().numpy())  # not zeroed: given
        assert repr(ours) == repr(theirs)
    ours = nn.Embedding(4, 3, _weight=tinypytorch.from_numpy(table.copy()), _freeze=True)
    assert not ours.weight.requires_grad and np.array_equal(ours.weight.data, table)


def on(xp):
    return "cpu" if xp is np else "cuda"


def test_lookup_and_gradient_on_every_backend(xp):
    w = Variable(cuda.to_device(WEIGHT.copy(), on(xp)))
    idx = tinypytorch.from_numpy(INDICES[2]).to(on(xp))
    y = F.embedding(idx, w, padding_idx=2)
    y.sum().backward()
    (w_t, idx_t) = both(INDICES[2])[1]
    TF.embedding(idx_t, w_t, padding_idx=2).sum().backward()
    assert cuda.get_array_module(y.data) is xp and cuda.get_array_module(w.grad.data) is xp
    np.testing.assert_array_equal(cuda.as_numpy(w.grad.data), w_t.grad.numpy())


@pytest.mark.parametrize("make", [
    lambda fw, F_: F_.embedding(fw.tensor([1.0, 2.0]), fw.ones(4, 3)),  # float indices
    lambda fw, F_: F_.embedding([1, 2], fw.ones(4, 3)),
    lambda fw, F_: F_.embedding(fw.tensor([1]), [[1.0]]),
    lambda fw, F_: F_.embedding(fw.tensor([1, 2], dtype=fw.int16), fw.ones(4, 3)),
    lambda fw, F_: F_.embedding(fw.tensor([True]), fw.ones(4, 3)),
    lambda fw, F_: F_.embedding(fw.tensor([1, 4]), fw.ones(4, 3)),  # out of range
    lambda fw, F_: F_.embedding(fw.tensor([-1]), fw.ones(4, 3)),  # negative (NumPy would wrap it)
    lambda fw, F_: F_.embedding(fw.tensor([1]), fw.ones(4, 3), padding_idx=4),
    lambda fw, F_: F_.embedding(fw.tensor([1]), fw.ones(4, 3), padding_idx=-5),
    lambda fw, F_: F_.embedding(fw.tensor([1]), fw.ones(12)),
    lambda fw, F_: fw.nn.Embedding(4, 3, padding_idx=4),
    lambda fw, F_: fw.nn.Embedding(4, 3, _weight=fw.ones(3, 3)),
    lambda fw, F_: fw.nn.Embedding.from_pretrained(fw.ones(3)),
])
def test_bad_input_raises_torchs_error_type_and_words(make):
    assert_refused_as_torch(make, (tinypytorch, F), (torch, TF))


def test_sparse_gradients_are_refused_clearly():
    torch.nn.Embedding(4, 3, sparse=True)  # torch makes a sparse gradient; there are no sparse tensors here
    with pytest.raises(NotImplementedError, match="no sparse tensors"):
        nn.Embedding(4, 3, sparse=True)
    with pytest.raises(NotImplementedError, match="no sparse tensors"):
        F.embedding(tinypytorch.tensor([1]), tinypytorch.ones(4, 3), sparse=True)
