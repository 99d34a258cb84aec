"""Step 48: the package on a GPU. Every test that takes `xp` runs on NumPy, on the strict stand-in for CuPy
(tests/strict_cupy.py, so every device code path runs in CI) and on CuPy where a GPU is usable (marked gpu):
devices and moves, training with each optimizer, BatchNorm in both modes, checkpointing with dropout,
reversible blocks and columns, save_on_cpu, the device's generator and the memory pool."""
import gc

import numpy as np
import pytest
import torch

import tinypytorch
from reference import train_twins
from tinypytorch import Variable, cuda, random
from tinypytorch import functions as F
from tinypytorch.autograd.graph import save_on_cpu
from tinypytorch.layers import MLP, BatchNorm1d, Dropout, Layer, Linear, Parameter
from tinypytorch.optimizers import SGD, Adam
from tinypytorch.reversible import AdditiveCoupling, ReversibleColumns, ReversibleSequential, RevColumn
from tinypytorch.utils.checkpoint import checkpoint, checkpoint_sequential
from twins import torch_twin

pytestmark = [pytest.mark.step48, pytest.mark.torch]


def on(xp):
    """The device string of the xp fixture's backend."""
    return "cpu" if xp is np else "cuda"


def host(v):
    return cuda.as_numpy(v)


# ----- devices ----------------------------------------------------------------------------------------------

def test_device_names_and_equality_follow_pytorch():
    assert repr(cuda.device("cpu")) == repr(torch.device("cpu")) == "device(type='cpu')"
    assert repr(cuda.device("cuda:0")) == repr(torch.device("cuda:0")) == "device(type='cuda', index=0)"
    assert str(cuda.device("cuda", 1)) == str(torch.device("cuda", 1)) == "cuda:1"
    assert cuda.device("cuda:0") == "cuda:0" and cuda.device("cuda") != cuda.device("cuda:0")  # as torch's
    assert (torch.device("cuda") != torch.device("cuda:0")) is True
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda device type at start of device string: gpu"):
        cuda.device("gpu")
    with pytest.raises(TypeError, match="device: expected a string"):
        cuda.device(0)


def test_a_variable_knows_its_device_and_moves_differentiably(xp):
    x = Variable(np.array([1.0, -2.0, 3.0]))
    assert x.device == "cpu" and x.to("cpu") is x and x.cpu() is x  # nothing to move: x itself, as in torch
    y = x.to(on(xp))
    assert cuda.get_array_module(y.data) is xp and y.device.type == on(xp)
    z = (y * y).sum()
    z.backward()
    assert cuda.get_array_module(x.grad.data) is np  # the gradient went back to the source device
    np.testing.assert_array_equal(x.grad.data, [2.0, -4.0, 6.0])


def test_to_takes_pytorchs_positional_forms(xp):
    x = Variable(np.array([1.5, 2.5]))
    y = x.to(on(xp), np.float32)
    assert y.dtype == np.float32 and cuda.get_array_module(y.data) is xp
    assert x.to(np.float32).dtype == np.float32 and x.to(dtype=np.float64) is x


def test_a_gradient_through_a_move_to_the_device_and_back_equals_torchs(xp):
    data = np.array([[0.5, -1.0], [2.0, 0.25]])
    x = Variable(data)
    w = Variable(xp.asarray(np.array([[1.0, 2.0], [3.0, -1.0]])))
    y = tinypytorch.tanh(x.to(on(xp)) @ w).cpu()
    (y * y).sum().backward()
    xt = torch.tensor(data, requires_grad=True)
    wt = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64, requires_grad=True)
    (torch.tanh(xt @ wt) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(host(w.grad.data), wt.grad.numpy(), rtol=1e-13)


def test_two_devices_in_one_operation_raise_pytorchs_error():
    import strict_cupy

    with strict_cupy.installed():
        a, b = Variable(np.ones(2)), Variable(np.ones(2)).cuda()
        with pytest.raises(RuntimeError, match=r"^add: Expected all tensors to be on the same device, but found at "
                                               r"least two devices, cuda:0 and cpu!$"):
            a + b
        with pytest.raises(RuntimeError, match="mul: Expected all tensors to be on the same device"):
            b * np.ones(2)  # a NumPy array is on the CPU too
        with pytest.raises(RuntimeError, match="linear: Expected all tensors to be on the same device"):
            Linear(2, 3, rng=np.random.default_rng(0))(b)
        b * 2.0, b * np.float64(2.0)  # numbers go where the other operand is


def test_moving_to_the_gpu_without_one_says_why():
    previous = cuda.use_backend(None)
    try:
        with pytest.raises(RuntimeError, match=r"to: cannot move to cuda: CuPy is not installed: pip install -e \.\[gpu\]"):
            Variable(np.ones(2)).cuda()
        assert not cuda.is_available() and cuda.memory_allocated() == 0
    finally:
        cuda.use_backend(*previous)


def test_a_layer_moves_its_parameters_gradients_and_buffers_and_stays_the_same_objects(xp):
    model = MLP((3, 4, 2), rng=np.random.default_rng(0))
    norm = BatchNorm1d(4)
    params = list(model.params())
    (model(np.ones((2, 3))) ** 2).sum().backward()
    assert model.to(on(xp)) is model and norm.to(on(xp)) is norm
    assert list(model.params()) == params
    for p in model.params():
        assert cuda.get_array_module(p.data) is xp and cuda.get_array_module(p.grad.data) is xp
    assert [cuda.get_array_module(b) for b in norm.buffers()] == [xp, xp]
    model.cpu()
    assert all(cuda.get_array_module(p.data) is np for p in model.params())


def test_register_buffer_takes_arrays_only():
    with pytest.raises(TypeError, match="register_buffer: 'stats' must be an array, got list"):
        Layer().register_buffer("stats", [1.0])


# ----- training on every backend ------------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_training_steps_with_each_optimizer_equal_torchs(optimizer, xp):
    rng = np.random.default_rng(0)
    model = MLP((3, 8, 2), activation=F.tanh, rng=rng)
    x, target = rng.standard_normal((16, 3)), rng.standard_normal((16, 2))
    twin = torch_twin(model, torch.nn.Tanh)
    model.to(on(xp))
    make, make_t = (SGD, torch.optim.SGD) if optimizer == "SGD" else (Adam, torch.optim.Adam)
    lr = 0.1 if optimizer == "SGD" else 0.01
    opt = make(model.params(), lr=lr)
    train_twins(model, twin, opt, make_t(twin.parameters(), lr=lr), x, target, 5, on(xp))
    for p, t in zip(model.params(), twin.parameters(), strict=True):
        assert cuda.get_array_module(p.data) is xp
        np.testing.assert_allclose(host(p.data), t.detach().numpy(), rtol=1e-12, atol=1e-14)
    if optimizer == "Adam":
        assert all(cuda.get_array_module(s[k]) is xp for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))


def test_adams_state_follows_its_parameter_to_another_device(xp):
    p = Parameter(np.array([1.0, 2.0]))
    opt = Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    p.data, p.grad = cuda.to_device(p.data, on(xp)), Variable(cuda.to_device(p.grad.data, on(xp)))
    opt.step()
    assert all(cuda.get_array_module(opt.state[p][moment]) is xp for moment in ("exp_avg", "exp_avg_sq"))


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batchnorm_in_both_modes_equals_torchs_and_keeps_its_statistics_on_the_device(training, xp):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 3)) * 2.0 + 1.0
    norm, twin = BatchNorm1d(3), torch.nn.BatchNorm1d(3).double()
    norm.to(on(xp))
    for _ in range(2):  # statistics from two training batches, then the mode under test
        norm(Variable(xp.asarray(x), requires_grad=False))
        twin(torch.tensor(x))
    norm.train(training), twin.train(training)
    xv, xt = Variable(xp.asarray(x)), torch.tensor(x, requires_grad=True)
    y, yt = norm(xv), twin(xt)
    w = rng.standard_normal((6, 3))
    (y * Variable(xp.asarray(w), requires_grad=False)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(host(y.data), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(xv.grad.data), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(host(norm.running_mean), twin.running_mean.numpy(), rtol=1e-14)
    np.testing.assert_allclose(host(norm.running_var), twin.running_var.numpy(), rtol=1e-14)
    assert all(cuda.get_array_module(b) is xp for b in norm.buffers())


# ----- randomness and recomputation on every backend ---------------------------------------------------------

def splitmix64(seed, n):
    """SplitMix64 (Steele, Lea and Flood, 2014) written out on Python ints: the first n numbers after `seed`,
    as floats from their top 53 bits. The reference for the device generator."""
    out, mask = [], 2**64 - 1
    for k in range(1, n + 1):
        z = (seed + k * 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) >> 11)
    return np.array(out, dtype=np.float64) * 2.0**-53


def test_the_device_generator_is_splitmix64_counted_from_its_offset(xp):
    g = random.CounterGenerator(12345)
    first, second = g.random((2, 3), xp), g.random((4,), xp)
    assert cuda.get_array_module(first) is xp and first.shape == (2, 3)
    expected = splitmix64(12345, 10)
    np.testing.assert_array_equal(host(first).ravel(), expected[:6])
    np.testing.assert_array_equal(host(second), expected[6:])
    assert g.get_state() == (12345, 10)
    g.set_state((12345, 6))
    np.testing.assert_array_equal(host(g.random((4,), xp)), expected[6:])


def test_the_device_generator_is_uniform():
    u = random.CounterGenerator(0).random((200_000,), np)
    assert 0.0 <= u.min() and u.max() < 1.0
    counts = np.histogram(u, bins=10, range=(0.0, 1.0))[0]
    chi2 = ((counts - 20_000) ** 2 / 20_000).sum()
    assert chi2 < 27.9  # the 99.9% point of chi-square with 9 degrees of freedom


def test_dropout_on_the_device_draws_there_and_the_states_cover_both_generators():
    import strict_cupy

    with strict_cupy.installed() as cp:
        tinypytorch.manual_seed(3)
        cpu_before, device_before = random.get_all_states()
        assert device_before == (3, 0)
        y = F.dropout(Variable(cp.ones(10)), 0.5)
        assert cuda.get_array_module(y.data) is cp
        assert random.get_all_states()[0] == cpu_before  # the CPU's stream did not move
        assert random.get_all_states()[1] == (3, 10)
        with random.fork_rng():
            F.dropout(Variable(cp.ones(4)), 0.5)
        assert random.get_all_states()[1] == (3, 10)
    with pytest.raises(TypeError, match="set_rng_state: expected a state from tinypytorch.cuda.get_rng_state"):
        cuda.set_rng_state([3, 10])


def block(width, rng, p=0.3):
    return [Linear(width, width, rng=rng), Dropout(p)]


@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "hooks"])
def test_checkpointing_with_dropout_on_the_device_equals_the_plain_run_bitwise(use_reentrant, xp):
    rng = np.random.default_rng(2)
    layers = [layer for _ in range(4) for layer in block(5, rng)] + [Linear(5, 1, rng=rng)]
    model = Layer()
    for i, layer in enumerate(layers):
        setattr(model, f"l{i}", layer)
    model.to(on(xp))
    x0 = xp.asarray(rng.standard_normal((3, 5)))

    def run(way):
        model.cleargrads()
        tinypytorch.manual_seed(0)
        x = Variable(x0)
        if way == "plain":
            y = x
            for layer in layers:
                y = layer(y)
        elif way == "checkpoint":
            def segment(h):
                for layer in layers[:4]:
                    h = layer(h)
                return h
            y = checkpoint(segment, x, use_reentrant=use_reentrant)
            for layer in layers[4:]:
                y = layer(y)
        else:
            y = checkpoint_sequential(layers, 3, x, use_reentrant=use_reentrant)
        (y * y).sum().backward()
        return [host(x.grad.data)] + [host(p.grad.data) for p in model.params()], random.get_all_states()

    plain, after = run("plain")
    for way in ("checkpoint", "sequential"):
        grads, states = run(way)
        for a, b in zip(plain, grads, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=way)
        assert states == after, way  # the streams after backward are where the plain run left them


def coupling(width, rng, p=0.2):
    def half():
        layer = Layer()
        layer.lin, layer.drop = Linear(width, width, rng=rng), Dropout(p)
        layer.forward = lambda h: layer.drop(tinypytorch.tanh(layer.lin(h)))
        return layer
    return AdditiveCoupling(half(), half())


def test_a_reversible_stack_with_dropout_trains_on_the_device_as_the_plain_run(xp):
    rng = np.random.default_rng(4)
    blocks = [coupling(3, rng) for _ in range(4)]
    stack = ReversibleSequential(*blocks).to(on(xp))
    x0 = xp.asarray(rng.standard_normal((5, 6)))

    def grads(reversible):
        stack.cleargrads()
        tinypytorch.manual_seed(1)
        x = Variable(x0)
        y = stack(x) if reversible else x
        if not reversible:
            for b in blocks:
                y = b(y)
        (y * y).sum().backward()
        return [host(x.grad.data)] + [host(p.grad.data) for p in stack.params()]

    for a, b in zip(grads(True), grads(False), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    opt = SGD(stack.params(), lr=0.05)
    tinypytorch.manual_seed(1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = (stack(Variable(x0)) ** 2).sum() * (1.0 / 30)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_reversible_columns_on_the_device_equal_the_plain_run(xp):
    rng = np.random.default_rng(5)
    widths = (3, 2)

    class Level(Layer):
        def __init__(self, n_below, n, n_above):
            super().__init__()
            self.down = Linear(n_below, n, rng=rng)
            self.up = Linear(n_above, n, bias=False, rng=rng) if n_above else None

        def forward(self, below, above):
            h = self.down(below) if above is None else self.down(below) + self.up(above)
            return tinypytorch.tanh(h)

    def column():
        levels = [Level(4 if i == 0 else widths[i - 1], widths[i], widths[i + 1] if i + 1 < 2 else 0)
                  for i in range(2)]
        return RevColumn(levels, [Parameter(rng.uniform(0.5, 1.5, (1, d))) for d in widths])

    columns = [column(), column()]
    stack = ReversibleColumns(*columns).to(on(xp))
    x0 = xp.asarray(rng.standard_normal((2, 4)))

    def grads(reversible, one):
        for c in columns:
            c.reversible = reversible
        stack.cleargrads()
        x = Variable(x0)
        cs = [Variable(xp.zeros((2, d)), requires_grad=False) for d in widths]
        if one:
            cs = stack(x, *cs)
        else:
            for c in columns:
                cs = c(x, *cs)
        sum(((c * c).sum() for c in cs), Variable(xp.zeros(()), requires_grad=False)).backward()
        return [host(x.grad.data)] + [host(p.grad.data) for p in stack.params()]

    plain = grads(False, False)
    for reversible, one in ((True, False), (True, True)):
        for a, b in zip(plain, grads(reversible, one), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_keeps_device_tensors_in_host_memory_and_gives_the_same_gradients(pin_memory, xp):
    rng = np.random.default_rng(6)
    model = MLP((4, 6, 1), activation=F.tanh, rng=rng).to(on(xp))
    x0 = xp.asarray(rng.standard_normal((3, 4)))

    def grads(hooked):
        model.cleargrads()
        x = Variable(x0)
        if hooked:
            with save_on_cpu(pin_memory=pin_memory):
                y = model(x)
        else:
            y = model(x)
        (y * y).sum().backward()
        return [host(x.grad.data)] + [host(p.grad.data) for p in model.params()]

    for a, b in zip(grads(False), grads(True), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_frees_the_device_memory_of_what_is_saved(pin_memory):
    import strict_cupy

    def held_after_forward(hooked, cp):
        x = Variable(cp.ones(1000))  # 8,000 bytes
        before = cuda.memory_allocated()
        if hooked:
            with save_on_cpu(pin_memory=pin_memory):
                z = tinypytorch.sin(x * 2.0)  # sin saves its input, x * 2.0
        else:
            z = tinypytorch.sin(x * 2.0)
        held = cuda.memory_allocated() - before
        z.sum().backward()
        return held, cuda.as_numpy(x.grad.data)

    with strict_cupy.installed() as cp:
        (plain, g_plain), (hooked, g_hooked) = held_after_forward(False, cp), held_after_forward(True, cp)
    # z and x * 2.0 on the device, and the number 2.0 that mul saved for x's gradient (a 0-d float64, 8 bytes,
    # saved as a number: the hooks leave it); with the hooks, z and the number only
    assert (plain, hooked) == (16_008, 8_008)
    np.testing.assert_array_equal(g_plain, g_hooked)
    np.testing.assert_allclose(g_plain, 2.0 * np.cos(2.0))


# ----- the memory pool as the instrument ---------------------------------------------------------------------

def test_memory_allocated_and_its_peak_read_the_device_pool():
    import strict_cupy

    with strict_cupy.installed() as cp:
        start = cuda.memory_allocated()
        with cuda.max_memory_allocated() as peak:
            a = cp.ones(1000)  # 8,000 bytes
            b = a * 2.0  # 8,000 more
            del a, b
        assert peak.start == start and peak.bytes == start + 16_000
        with cuda.max_memory_allocated() as outer, cuda.max_memory_allocated() as inner:  # nested: two hooks
            c = cp.ones(10)
        assert outer.bytes == inner.bytes == start + 80
        del c
        assert cuda.memory_allocated() == start


def test_a_reversible_stack_on_the_device_holds_flat_memory_while_a_plain_one_grows():
    import strict_cupy

    def held_after_forward(depth, reversible, cp):
        rng = np.random.default_rng(0)
        blocks = [coupling(8, rng, p=0.0) for _ in range(depth)]
        stack = ReversibleSequential(*blocks).to("cuda")
        x = Variable(cp.asarray(rng.standard_normal((16, 16))))
        gc.collect()  # what earlier runs left to the collector must not count
        before = cuda.memory_allocated()
        if reversible:
            y = stack(x)
        else:
            y = x
            for b in blocks:
                y = b(y)
        held = cuda.memory_allocated() - before
        del y
        return held

    with strict_cupy.installed() as cp:
        rev = [held_after_forward(d, True, cp) for d in (4, 8, 16)]
        plain = [held_after_forward(d, False, cp) for d in (4, 8, 16)]
    assert rev[0] == rev[1] == rev[2]  # flat: the output only
    per_block = (plain[1] - plain[0]) / 4
    assert per_block > 0 and plain[2] - plain[1] == 8 * per_block  # linear: every block's activations
