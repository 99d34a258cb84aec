"""nn.BatchNorm1d on (N, C) and (N, C, L), and nn.BatchNorm2d on (N, C, H, W), against torch: outputs, gradients of
the input, weight and bias, running statistics and num_batches_tracked after several training batches, evaluation
mode, momentum=None, affine=False, bias=False, track_running_stats=False, state dicts, float32 and float16,
devices, and torch's errors. Every expected value is torch's, from the same module with the same parameters."""
import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, cuda, nn

pytestmark = [pytest.mark.torch, pytest.mark.step56]

CLASSES = {"BatchNorm1d": (nn.BatchNorm1d, torch.nn.BatchNorm1d), "BatchNorm2d": (nn.BatchNorm2d, torch.nn.BatchNorm2d)}
SHAPES = [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)), ("BatchNorm2d", (2, 3, 4, 5)),
          ("BatchNorm2d", (1, 3, 2, 2))]  # one image: its pixels still make a batch of statistics
OPTIONS = [{}, {"momentum": 0.7, "eps": 1e-3}, {"momentum": None}, {"affine": False}, {"bias": False},
           {"track_running_stats": False}, {"affine": False, "track_running_stats": False}]


def pair(name, dtype=np.float64, **kwargs):
    """Our module and torch's, of dtype, with the same weight and bias, away from their initial 1 and 0."""
    ours_class, torch_class = CLASSES[name]
    ours = ours_class(3, dtype=dtype, **kwargs)
    theirs = torch_class(3, dtype=getattr(torch, np.dtype(dtype).name), **kwargs)
    rng = np.random.default_rng(5)
    for p, pt in zip(ours.parameters(), theirs.parameters(), strict=True):
        values = rng.normal(size=3).astype(dtype)
        p.data[...] = values
        with torch.no_grad():
            pt.copy_(torch.from_numpy(values))
    return ours, theirs


def batches(n, shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=i, scale=1 + i, size=shape).astype(dtype) for i in range(n)]


def assert_state_equal(ours, theirs, rtol):
    state, state_t = ours.state_dict(), theirs.state_dict()
    assert list(state) == list(state_t)
    for key, value_t in state_t.items():
        assert state[key].dtype == value_t.numpy().dtype, key
        np.testing.assert_allclose(state[key].data, value_t.numpy(), rtol=rtol, atol=rtol, err_msg=key)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("name, shape", SHAPES, ids=str)
def test_training_batches_outputs_gradients_and_running_statistics_equal_torchs(name, shape, options):
    ours, theirs = pair(name, **options)
    weights = np.random.default_rng(9).normal(size=shape)  # a loss that weighs every output differently
    for x in batches(4, shape):
        v, t = Variable(x), torch.from_numpy(x).requires_grad_()
        y, y_t = ours(v), theirs(t)
        np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-10, atol=1e-12)
        ours.zero_grad()
        theirs.zero_grad()
        (y * Variable(weights)).sum().backward()
        (y_t * torch.from_numpy(weights)).sum().backward()
        np.testing.assert_allclose(v.grad.data, t.grad.numpy(), rtol=1e-9, atol=1e-12)
        for p, pt in zip(ours.parameters(), theirs.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.data, pt.grad.numpy(), rtol=1e-10, atol=1e-12)
        assert_state_equal(ours, theirs, rtol=1e-12)
    ours.eval(), theirs.eval()  # the running statistics now (or the batch's, without them)
    x = batches(1, shape, seed=3)[0]
    np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("name, shape", [("BatchNorm1d", (4, 3, 5)), ("BatchNorm2d", (2, 3, 2, 3))], ids=str)
def test_second_derivatives_equal_torchs(name, shape):
    ours, theirs = pair(name)
    x = batches(1, shape)[0]
    v, t = Variable(x), torch.from_numpy(x).requires_grad_()
    y, y_t = ours(v), theirs(t)
    (g,) = tinypytorch.autograd.grad((y * y * y).sum(), [v], create_graph=True)
    (g_t,) = torch.autograd.grad((y_t * y_t * y_t).sum(), [t], create_graph=True)
    np.testing.assert_allclose(g.data, g_t.detach().numpy(), rtol=1e-9, atol=1e-12)
    (g * g).sum().backward()
    (g_t * g_t).sum().backward()
    np.testing.assert_allclose(v.grad.data, t.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_statistics_kept_but_no_longer_tracked_still_serve_evaluation_as_in_torch():
    ours, theirs = pair("BatchNorm2d")
    for x in batches(2, (2, 3, 2, 2)):
        ours(Variable(x)), theirs(torch.from_numpy(x))
    ours.track_running_stats = theirs.track_running_stats = False
    x = batches(1, (2, 3, 2, 2), seed=4)[0]
    np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-10)
    assert_state_equal(ours, theirs, rtol=1e-12)  # training without tracking leaves them alone
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("name, shape", [("BatchNorm1d", (8, 3, 6)), ("BatchNorm2d", (4, 3, 5, 5))], ids=str)
def test_float32_equals_torchs_to_float32_precision(name, shape):
    ours, theirs = pair(name, np.float32)
    for x in batches(3, shape, np.float32):
        v, t = Variable(x), torch.from_numpy(x).requires_grad_()
        y, y_t = ours(v), theirs(t)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-4, atol=1e-5)
        y.sum().backward()
        y_t.sum().backward()
        np.testing.assert_allclose(v.grad.data, t.grad.numpy(), rtol=1e-3, atol=1e-5)
    assert_state_equal(ours, theirs, rtol=1e-5)


def test_a_float16_input_is_normalised_in_float32_as_torchs():
    """float16 images through a float32 module (torch's mixed CPU rule) and through a float16 one: float16
    outputs within one float16 rounding of torch's, float32 or float16 statistics as the module's."""
    for module_dtype in (np.float32, np.float16):
        ours, theirs = pair("BatchNorm2d", module_dtype)
        x = batches(1, (2, 3, 4, 4), np.float16)[0]
        y, y_t = ours(Variable(x)), theirs(torch.from_numpy(x))
        assert y.dtype == np.float16 and y_t.dtype == torch.float16
        np.testing.assert_allclose(y.data.astype(np.float64), y_t.detach().numpy().astype(np.float64),
                                   rtol=2e-3, atol=2e-3)
        assert_state_equal(ours, theirs, rtol=2e-3)


def test_printout_parameters_and_state_dict_keys_are_torchs():
    for kwargs in [{}, {"affine": False}, {"bias": False}, {"track_running_stats": False}, {"momentum": None}]:
        ours, theirs = nn.BatchNorm2d(4, **kwargs), torch.nn.BatchNorm2d(4, **kwargs)
        assert repr(ours) == repr(theirs)
        assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
        assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for key, value in theirs.state_dict().items():
            assert ours.state_dict()[key].dtype == value.numpy().dtype
        assert (ours.running_mean is None) == (theirs.running_mean is None)


def test_a_state_dict_of_torchs_loads_and_evaluates_as_torch():
    theirs = torch.nn.BatchNorm2d(3).double()
    for x in batches(3, (2, 3, 3, 3)):
        theirs(torch.from_numpy(x))
    ours = nn.BatchNorm2d(3, dtype=np.float64)
    ours.load_state_dict({k: tinypytorch.from_numpy(v.numpy().copy()) for k, v in theirs.state_dict().items()})
    ours.eval(), theirs.eval()
    x = batches(1, (2, 3, 3, 3), seed=8)[0]
    np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    assert int(ours.num_batches_tracked) == 3


def on(xp):
    return "cpu" if xp is np else "cuda"


def test_the_statistics_live_and_move_with_the_module_on_every_backend(xp):
    ours, theirs = pair("BatchNorm2d")
    ours.to(on(xp))
    for x in batches(2, (2, 3, 2, 2)):
        y = ours(Variable(cuda.to_device(x, on(xp))))
        y_t = theirs(torch.from_numpy(x))
    assert cuda.get_array_module(y.data) is xp and cuda.get_array_module(ours.running_mean) is xp
    np.testing.assert_allclose(cuda.as_numpy(y.data), y_t.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cuda.as_numpy(ours.running_var), theirs.running_var.numpy(), rtol=1e-12)


@pytest.mark.parametrize("make, shape", [
    (lambda m, **kw: m.BatchNorm1d(3, **kw), (2, 3, 4, 1)),  # 4-D into BatchNorm1d
    (lambda m, **kw: m.BatchNorm1d(3, **kw), (3,)),
    (lambda m, **kw: m.BatchNorm2d(3, **kw), (2, 3, 4)),  # 3-D into BatchNorm2d
    (lambda m, **kw: m.BatchNorm2d(3, **kw), (1, 3, 1, 1)),  # one value per channel in training
    (lambda m, **kw: m.BatchNorm1d(3, **kw), (1, 3, 1)),
    (lambda m, **kw: m.BatchNorm2d(3, **kw), (2, 4, 2, 2)),  # the wrong number of channels
    (lambda m, **kw: m.BatchNorm2d(3, track_running_stats=False, **kw), (2, 4, 2, 2)),
])
def test_bad_input_raises_torchs_error_type_and_words(make, shape):
    x = np.ones(shape)
    with pytest.raises(Exception) as theirs:
        make(torch.nn, dtype=torch.float64)(torch.from_numpy(x))
    with pytest.raises(type(theirs.value)) as ours:
        make(nn, dtype=np.float64)(Variable(x))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("module_dtype, input_dtype", [(np.float32, np.float64), (np.float16, np.float32),
                                                       (np.float32, np.int64)])
def test_mixed_dtypes_raise_torchs_error(module_dtype, input_dtype):
    x = np.ones((2, 3, 2, 2), dtype=input_dtype)
    with pytest.raises(Exception) as theirs:
        torch.nn.BatchNorm2d(3, dtype=getattr(torch, np.dtype(module_dtype).name))(torch.from_numpy(x))
    with pytest.raises(type(theirs.value)) as ours:
        nn.BatchNorm2d(3, dtype=module_dtype)(Variable(x))
    assert str(ours.value) == str(theirs.value)
