"""The workloads of bench_autograd.py in DeZero, the framework a reader of "Deep Learning from Scratch 3" builds.

DeZero is the framework a learner would otherwise pick to see autograd from the inside, so the
bench measures tinypytorch against it too. It is not a requirement of the project: the release
on the package registry (dezero 0.0.13, 2020) uses `np.int`, which NumPy removed in 1.24, and
fails on import; its source at the latest commit runs. Install it beside the project with

    pip install --no-deps git+https://github.com/oreilly-japan/deep-learning-from-scratch-3@b5f3cf12a9e4ed84fc97b57bf41a25610d69c9e5

(`bench/requirements-peers.txt`). Without it, `AVAILABLE` is False and the bench leaves DeZero's
column out, saying so. The expressions are those of autograd_workloads.py, written with DeZero's
functions; tests/test_bench.py checks each gradient against PyTorch's when DeZero is installed.
"""
import numpy as np

from autograd_workloads import Scalars, chain_graph, fan_graph, runner, wide_graph
from tinypytorch.testfunctions import goldstein_price

try:
    import dezero
    import dezero.functions as DF
    import dezero.layers as DL
    import dezero.optimizers as DO
except ImportError:  # not installed (or the registry's release, which NumPy 2 cannot import)
    dezero = None
except AttributeError:
    dezero = None

AVAILABLE = dezero is not None
PINNED = "b5f3cf12a9e4ed84fc97b57bf41a25610d69c9e5"
MISSING_NOTE = ("DeZero is not installed, so its column is left out: `pip install --no-deps "
                f"git+https://github.com/oreilly-japan/deep-learning-from-scratch-3@{PINNED}`.")


def _grad(v):
    return np.asarray(v.grad.data)


DEZERO = Scalars(lambda x0: dezero.Variable(np.array(x0)), lambda x: DF.sin(x), _grad) if AVAILABLE else None


def gp_dezero(a, b):
    x, y = dezero.Variable(np.array(a)), dezero.Variable(np.array(b))
    goldstein_price(x, y).backward()
    return _grad(x), _grad(y)


chain_dezero = runner(chain_graph, DEZERO, "chain_dezero")
wide_dezero = runner(wide_graph, DEZERO, "wide_dezero")
fan_dezero = runner(fan_graph, DEZERO, "fan_dezero")


def arrays_dezero(a):
    x = dezero.Variable(a)
    DF.sum(DF.exp(x) * x + x**2).backward()
    return _grad(x)


def ratio_dezero(a):
    x = dezero.Variable(a)
    DF.sum(DF.tanh(x) / (1.0 + x * x)).backward()
    return _grad(x)


def mlp_dezero(x, target, layers, lr=1e-3):
    """The MLP step in DeZero. Its Linear keeps W as (in, out), so the weights go in transposed; its
    mean_squared_error averages over the rows only, so the loss is divided by the outputs per row as well
    (PyTorch's mse_loss averages over every element). Its Adam puts eps outside the bias correction."""
    model = []
    for W, b in layers:
        linear = DL.Linear(W.shape[0], in_size=W.shape[1], dtype=np.float32)
        linear.W.data, linear.b.data = W.T.copy(), b.copy()
        model.append(linear)
    optimizer = DO.Adam(alpha=lr)
    params = [p for linear in model for p in (linear.W, linear.b)]

    def step():
        for p in params:
            p.cleargrad()
        h = x
        for i, linear in enumerate(model):
            h = linear(h)
            if i + 1 < len(model):
                h = DF.relu(h)
        (DF.mean_squared_error(h, target) / target.shape[1]).backward()
        optimizer.t += 1  # what DeZero's Adam.update does before updating each parameter of a model
        for p in params:
            optimizer.update_one(p)
        return [p.grad.data for p in params]
    return step


def one_operation(recorded):
    """sin of a 0-d value once. DeZero records whenever backprop is on, whatever the input; off is its Config."""
    x = dezero.Variable(np.array(0.5))
    dezero.Config.enable_backprop = recorded  # put back by enable_backprop() after the measurement
    return lambda: DF.sin(x)


def enable_backprop():
    if AVAILABLE:
        dezero.Config.enable_backprop = True
