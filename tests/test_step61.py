"""Step 61: autocast. Output dtypes of every operation equal torch.autocast's on CPU; the CUDA list on the
stand-in device equals torch's documented one; casts are nodes of the graph, weights' casts cached per block,
enabled=False nests, the state is thread-local, and bad devices or dtypes meet PyTorch's meaning."""
import threading
import warnings

import numpy as np
import pytest
import torch

import tinypytorch
from operations import OPERATIONS, operands
from tinypytorch import Variable, autocast
from tinypytorch import autocast_state
from tinypytorch.amp import autocast_mode
from tinypytorch.nn import functional as F

pytestmark = [pytest.mark.step61, pytest.mark.torch]
HALF = tinypytorch.float16

# torch's documentation, "Autocast Op Reference" (amp.md): the CUDA lists, written out here
TORCH_CUDA_FP16 = {"__matmul__", "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "chain_matmul", "multi_dot",
                   "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                   "GRUCell", "linear", "LSTMCell", "matmul", "mm", "mv", "prelu", "RNNCell"}
TORCH_CUDA_FP32 = {"__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin",
                   "binary_cross_entropy_with_logits", "cosh", "cosine_embedding_loss", "cdist", "cosine_similarity",
                   "cross_entropy", "cumprod", "cumsum", "dist", "erfinv", "exp", "expm1", "group_norm",
                   "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm", "log", "log_softmax", "log10", "log1p",
                   "log2", "margin_ranking_loss", "mse_loss", "multilabel_margin_loss", "multi_margin_loss",
                   "nll_loss", "norm", "normalize", "pdist", "poisson_nll_loss", "pow", "prod", "reciprocal",
                   "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus", "sum",
                   "renorm", "tan", "triplet_margin_loss"}
TORCH_CUDA_PROMOTE = {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put",
                      "scatter_add", "tensordot", "cat", "stack"}
# torch ops that have a row in the package's table: each must be in the list its CUDA column names
CUDA_LISTS = {"lower": TORCH_CUDA_FP16, "float32": TORCH_CUDA_FP32, "promote": TORCH_CUDA_PROMOTE, None: set()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_every_operation_gives_torchs_dtype_under_cpu_autocast(operation, dtype):
    arrays = operands(operation, dtype=dtype)
    with autocast("cpu", dtype=HALF):
        ours = operation.ours(*[Variable(a.copy()) for a in arrays])
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = operation.theirs(*[torch.tensor(a.copy(), requires_grad=True) for a in arrays])
    assert str(ours.dtype) == str(theirs.dtype)


LOSSES = {
    "mse_loss": (lambda fw, a, b: fw.nn.functional.mse_loss(a, b)),
    "cross_entropy": (lambda fw, a, b: fw.nn.functional.cross_entropy(a, fw.tensor(np.array([1, 0, 2, 1])))),
    "nll_loss": (lambda fw, a, b: fw.nn.functional.nll_loss(a, fw.tensor(np.array([1, 0, 2, 1])))),
}


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("dtypes", [("float16", "float16"), ("float16", "float32"), ("float32", "float32")])
def test_losses_run_in_float32_as_torchs(name, dtypes):
    rng = np.random.default_rng(0)
    a, b = [rng.normal(size=(4, 3)).astype(d) for d in dtypes]
    with autocast("cpu", dtype=HALF):
        ours = LOSSES[name](tinypytorch, Variable(a), Variable(b))
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = LOSSES[name](torch, torch.tensor(a), torch.tensor(b))
    assert str(ours.dtype) == str(theirs.dtype) == "torch.float32"


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_of_float16_inputs_is_float32_for_every_reduction_as_torchs(reduction):
    a, b = np.linspace(-2, 2, 12, dtype=np.float16).reshape(3, 4), np.zeros((3, 4), np.float16)
    with autocast("cpu", dtype=HALF):
        ours = F.mse_loss(Variable(a), Variable(b), reduction=reduction)
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = torch.nn.functional.mse_loss(torch.tensor(a), torch.tensor(b), reduction=reduction)
    assert str(ours.dtype) == str(theirs.dtype) == "torch.float32"
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


def test_cross_entropy_runs_whole_in_float32_as_torchs_so_its_value_is_float32s():
    """torch casts cross_entropy's input once: its log_softmax runs in float32 too, not in float16."""
    rng = np.random.default_rng(3)
    scores, target = (rng.normal(size=(6, 5)) * 4).astype(np.float16), np.array([0, 1, 2, 3, 4, 0])
    with autocast("cpu", dtype=HALF):
        ours = F.cross_entropy(Variable(scores, requires_grad=True), target)
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = torch.nn.functional.cross_entropy(torch.tensor(scores), torch.tensor(target))
    plain = torch.nn.functional.cross_entropy(torch.tensor(scores).float(), torch.tensor(target))
    assert theirs.item() == plain.item()  # torch's value is float32's, to the bit
    np.testing.assert_allclose(ours.data, theirs.item(), rtol=1e-6)  # float16's log_softmax would be 1e-3 off


def test_each_rows_torch_op_is_in_torchs_documented_cuda_list():
    for _, _, torch_op, _, cuda_policy in autocast_mode.POLICY:
        assert torch_op in CUDA_LISTS[cuda_policy], torch_op
    # and a documented op that names a row's torch op is in the table with that list
    documented = {op: policy for policy, ops in CUDA_LISTS.items() for op in ops}
    assert {row[2]: row[4] for row in autocast_mode.POLICY} == {
        row[2]: documented.get(row[2]) for row in autocast_mode.POLICY}


def test_the_cpu_column_equals_torch_cpu_autocast_measured():
    """The CPU column measured: each row's torch op under torch.autocast("cpu", float16), inputs float32."""
    x = torch.rand(3, 3) + 0.5
    runs = {"matmul": lambda: x @ x, "linear": lambda: torch.nn.functional.linear(x, x),
            "mse_loss": lambda: torch.nn.functional.mse_loss(x.half(), x.half()),
            "nll_loss": lambda: torch.nn.functional.nll_loss(x.half(), torch.tensor([0, 1, 2])),
            "softmax": lambda: torch.softmax(x.half(), 1), "log_softmax": lambda: torch.log_softmax(x.half(), 1),
            "layer_norm": lambda: torch.nn.functional.layer_norm(x.half(), (3,)), "sum": lambda: x.half().sum(),
            "exp": lambda: x.half().exp(), "log": lambda: x.half().log(), "pow": lambda: x.half() ** 2,
            "norm": lambda: x.half().norm(), "cat": lambda: torch.cat([x.half(), x]),
            "stack": lambda: torch.stack([x.half(), x]), "cross": lambda: torch.cross(x.half(), x.half(), dim=1),
            "cross_entropy": lambda: torch.nn.functional.cross_entropy(x.half(), torch.tensor([0, 1, 2])),
            "conv2d": lambda: torch.nn.functional.conv2d(x[None, None], x[None, None, :2, :2]),
            "conv_transpose2d": lambda: torch.nn.functional.conv_transpose2d(x[None, None], x[None, None, :2, :2]),
            "prod": lambda: x.half().prod(), "asin": lambda: (x.half() - 1).asin()}
    expected = {"lower": torch.float16, "float32": torch.float32, "promote": torch.float32, None: torch.float16}
    with torch.autocast("cpu", dtype=torch.float16):
        for _, _, torch_op, cpu_policy, _ in autocast_mode.POLICY:
            assert runs[torch_op]().dtype == expected[cpu_policy], torch_op


def test_the_cuda_list_on_the_stand_in_device(xp):
    if xp is np:
        pytest.skip("the CUDA list runs on a device")
    x = Variable(xp.asarray(np.linspace(0.5, 1.5, 6).reshape(2, 3).astype(np.float32)))
    w = Variable(xp.asarray(np.ones((4, 3), np.float32)))
    with autocast("cuda"):
        h = F.linear(x, w)
        assert h.dtype == np.float16
        for y in (tinypytorch.exp(h), tinypytorch.log(h), h.sum(), F.softmax(h, 1), F.log_softmax(h, 1), h ** 2,
                  F.layer_norm(h, (4,))):
            assert y.dtype == np.float32
        assert tinypytorch.sin(h).dtype == np.float16  # not listed
    with autocast("cpu", dtype=HALF):  # CPU autocast leaves the device's arrays alone
        assert F.linear(x, w).dtype == np.float32
    with autocast("cuda"):  # and CUDA autocast the CPU's
        assert F.linear(Variable(np.ones((2, 3), np.float32)), Variable(np.ones((4, 3), np.float32))).dtype \
            == np.float32


def test_gradients_land_in_the_parameters_dtype_and_equal_torchs():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(5, 3)), rng.normal(size=(4, 3)), rng.normal(size=4)
    t = rng.normal(size=(5, 4))
    ours = [Variable(a.astype(np.float32)) for a in (w, b)]
    theirs = [torch.tensor(a, dtype=torch.float32, requires_grad=True) for a in (w, b)]
    with autocast("cpu", dtype=HALF):
        loss = F.mse_loss(F.linear(Variable(x.astype(np.float32)), *ours), Variable(t.astype(np.float32)))
    with torch.autocast("cpu", dtype=torch.float16):
        tloss = torch.nn.functional.mse_loss(torch.nn.functional.linear(torch.tensor(x, dtype=torch.float32),
                                                                        *theirs), torch.tensor(t, dtype=torch.float32))
    loss.backward()
    tloss.backward()
    assert loss.dtype == np.float32
    for p, tp in zip(ours, theirs):
        assert p.grad.dtype == np.float32 and tp.grad.dtype == torch.float32
        np.testing.assert_allclose(p.grad.data, tp.grad.numpy(), rtol=2e-3, atol=2e-3)  # half precision's rounding
    np.testing.assert_allclose(loss.data, tloss.item(), rtol=1e-3)


def _count_casts(y):
    """How many Cast nodes y's graph has."""
    count, seen, todo = 0, set(), [y.creator]
    while todo:
        f = todo.pop()
        if f is None or id(f) in seen or not hasattr(f, "edges"):
            continue
        seen.add(id(f))
        count += type(f).__name__ == "Cast"
        todo += [node for node, _ in f.edges if not isinstance(node, Variable)]
    return count


@pytest.mark.parametrize("cache_enabled, expected", [(True, 1), (False, 2)])
def test_a_weights_cast_is_made_once_a_block_when_cached(cache_enabled, expected):
    w = Variable(np.ones((3, 3), np.float32))
    x = Variable(np.ones((2, 3), np.float32), requires_grad=False)
    with autocast("cpu", dtype=HALF, cache_enabled=cache_enabled):
        y = F.linear(F.linear(x, w), w).sum()  # w used twice
    assert _count_casts(y) == expected  # w's cast made once (cached) or twice; x's is no node (no grad)


def test_the_cache_is_emptied_when_the_outermost_block_closes():
    w = Variable(np.ones((3, 3), np.float32))
    x = Variable(np.ones((2, 3), np.float32), requires_grad=False)
    with autocast("cpu", dtype=HALF):
        with autocast("cpu", dtype=HALF):
            a = F.linear(x, w)
        b = F.linear(x, w)  # the inner block closed, the outer one keeps the cast
        assert a.creator.edges[1][0] is b.creator.edges[1][0]
    with autocast("cpu", dtype=HALF):
        c = F.linear(x, w)
    assert c.creator.edges[1][0] is not b.creator.edges[1][0]


def test_only_leaves_that_require_grad_and_are_not_views_are_cached():
    w = Variable(np.ones((3, 3), np.float32))
    with autocast("cpu", dtype=HALF):
        row = w[0:1]  # a view: cast anew each time
        first, second = tinypytorch.matmul(row, w), tinypytorch.matmul(row, w)
        assert first.creator.edges[0][0] is not second.creator.edges[0][0]
        assert first.creator.edges[1][0] is second.creator.edges[1][0]


def test_enabled_false_nests_and_float64_is_never_cast():
    x32, x64 = Variable(np.ones((2, 2), np.float32)), Variable(np.ones((2, 2)))
    with autocast("cpu", dtype=HALF):
        assert (x32 @ x32).dtype == np.float16 and (x64 @ x64).dtype == np.float64
        with autocast("cpu", enabled=False):
            assert (x32 @ x32).dtype == np.float32
            assert not tinypytorch.amp.is_autocast_enabled("cpu")
        assert (x32 @ x32).dtype == np.float16
        assert tinypytorch.amp.is_autocast_enabled("cpu")
    assert (x32 @ x32).dtype == np.float32 and autocast_state.open_autocast_blocks == 0


def test_integer_inputs_are_not_cast():
    with autocast("cpu", dtype=HALF):
        y = tinypytorch.cat([Variable(np.array([1, 2])), Variable(np.array([3]))])
    assert y.dtype == np.int64 == torch.cat([torch.tensor([1, 2]), torch.tensor([3])]).numpy().dtype


def test_the_state_is_thread_local():
    seen = {}

    def other():
        seen["enabled"] = tinypytorch.amp.is_autocast_enabled("cpu")
        seen["dtype"] = (Variable(np.ones((2, 2), np.float32)) @ Variable(np.ones((2, 2), np.float32))).dtype

    with autocast("cpu", dtype=HALF):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"enabled": False, "dtype": np.float32}


def test_as_a_decorator():
    @autocast("cpu", dtype=HALF)
    def product(a, b):
        return a @ b

    x = Variable(np.ones((2, 2), np.float32))
    assert product(x, x).dtype == np.float16 and (x @ x).dtype == np.float32
    assert product.__name__ == "product"


def test_an_inner_block_without_dtype_keeps_the_outer_ones():
    x = Variable(np.ones((2, 2), np.float32))
    with autocast("cpu", dtype=HALF):
        with autocast("cpu"):
            assert (x @ x).dtype == np.float16


# ----- bad input, PyTorch's meaning --------------------------------------------------------------------

@pytest.mark.parametrize("device_type, error, fragment", [
    ("xla", RuntimeError, "unsupported autocast device_type 'xla'"),
    ("meta", RuntimeError, "unsupported autocast device_type 'meta'"),
    ("foo", RuntimeError, "Expected one of cpu, cuda device type at start of device string: foo"),
    (3, ValueError, "Expected `device_type` of type `str`"),
])
def test_an_unsupported_device_type_is_refused(device_type, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(")):
        autocast(device_type)
    if device_type in ("meta", "foo", 3):  # torch refuses these too (xla: torch has it, the package not)
        with pytest.raises(error):
            torch.autocast(device_type)


@pytest.mark.parametrize("dtype", [tinypytorch.float32, tinypytorch.float64, tinypytorch.int32])
def test_an_unsupported_dtype_warns_and_disables_as_torch(dtype):
    torch_dtype = {tinypytorch.float32: torch.float32, tinypytorch.float64: torch.float64,
                   tinypytorch.int32: torch.int32}[dtype]
    with pytest.warns(UserWarning, match="Disabling autocast"):
        with torch.autocast("cpu", dtype=torch_dtype):
            assert not torch.is_autocast_enabled("cpu")
    with pytest.warns(UserWarning, match="In CPU autocast, but the target dtype is not supported. Disabling"):
        with autocast("cpu", dtype=dtype):
            assert not tinypytorch.amp.is_autocast_enabled("cpu")
            x = Variable(np.ones((2, 2), np.float32))
            assert (x @ x).dtype == np.float32


@pytest.mark.parametrize("dtype", [None, "bfloat16", torch.bfloat16])
def test_bfloat16_is_a_clear_error(dtype):
    with pytest.raises(RuntimeError, match="NumPy has no bfloat16.*dtype=tinypytorch.float16"):
        autocast("cpu", dtype=dtype)


def test_disabled_needs_no_dtype():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autocast("cpu", enabled=False):
            pass


def test_cuda_without_cuda_warns_and_disables_as_torch():
    if tinypytorch.cuda.is_available():
        pytest.skip("a device is available")
    with pytest.warns(UserWarning, match="CUDA is not available.*Disabling autocast"):
        with autocast("cuda"):
            assert not tinypytorch.amp.is_autocast_enabled("cuda")


def test_decorating_a_non_callable_is_refused():
    with pytest.raises(TypeError, match="requires a callable"):
        autocast("cpu", dtype=HALF)(3)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_under_the_first_runs_autocast_as_torchs(use_reentrant):
    """Backward runs outside the block: the recomputation must still cast as the first run did (torch records the
    settings), giving the gradients of the same computation without a checkpoint, and torch's dtypes."""
    from tinypytorch.utils.checkpoint import checkpoint
    rng = np.random.default_rng(7)
    x, weight = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(2, 3)).astype(np.float32)

    def grads(checkpointed):
        w, xv = Variable(weight.copy()), Variable(x.copy())
        layer = lambda a: tinypytorch.tanh(F.linear(a, w))  # noqa: E731
        with autocast("cpu", dtype=HALF):
            y = checkpoint(layer, xv, use_reentrant=use_reentrant) if checkpointed else layer(xv)
            loss = (y.float() ** 2).sum()
        loss.backward()
        return y.dtype, w.grad, xv.grad

    dtype, gw, gx = grads(True)
    plain = grads(False)
    assert dtype == plain[0] == np.float16 and gw.dtype == np.float32
    np.testing.assert_array_equal(gw.data, plain[1].data)
    np.testing.assert_array_equal(gx.data, plain[2].data)
    wt, xt = torch.tensor(weight, requires_grad=True), torch.tensor(x, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.float16):
        yt = torch.utils.checkpoint.checkpoint(lambda a: torch.tanh(torch.nn.functional.linear(a, wt)), xt,
                                               use_reentrant=use_reentrant)
        (yt.float() ** 2).sum().backward()
    np.testing.assert_allclose(gw.data, wt.grad.numpy(), rtol=5e-3, atol=5e-3)  # float16's rounding
    np.testing.assert_allclose(gx.data, xt.grad.numpy(), rtol=5e-3, atol=5e-3)


def test_checkpoint_outside_autocast_recomputes_without_it_even_inside_a_block():
    from tinypytorch.utils.checkpoint import checkpoint
    w = Variable(np.ones((2, 3), np.float32))
    y = checkpoint(lambda a: F.linear(a, w), Variable(np.ones((4, 3), np.float32)), use_reentrant=False)
    with autocast("cpu", dtype=HALF):  # backward inside a block (not recommended): the recomputation is float32
        y.sum().backward()
    assert w.grad.dtype == np.float32 and y.dtype == np.float32
