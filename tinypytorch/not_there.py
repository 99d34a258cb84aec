"""PyTorch's names for what tinypytorch does not have: each raises a clear error where it is used.

A PyTorch program that reaches for one of these gets, at the call or the construction, a
NotImplementedError that names the feature, says why a CPU teaching framework leaves it out, and
points at the page "tinypytorch for PyTorch users", section "What is not there"; never a
missing attribute's AttributeError, and never a stand-in that runs and does something else.
"""

PAGE = ("see the page 'tinypytorch for PyTorch users' (book/pytorch_users.md), "
        "section 'What is not there'")


def not_there(name, why):
    """A class standing at PyTorch's `name`: constructing or calling it raises NotImplementedError(name: why).

    A class rather than a function, so that `isinstance(m, nn.LSTM)` stays a plain False and a
    decorator use (`@torch.compile`) fails at the decorator's line."""
    message = f"{name} is not in tinypytorch: {why}; {PAGE}"

    def refuse(cls, *args, **kwargs):
        raise NotImplementedError(message)

    short = name.rsplit(".", 1)[-1]
    return type(short, (), {"__new__": refuse, "__doc__": f"Not in tinypytorch: {why}.", "__module__": __name__})


compile = not_there(  # noqa: A001 (PyTorch's name)
    "torch.compile", "it traces a model's Python into fused kernels (TorchDynamo, Inductor), and tinypytorch runs "
    "each operation eagerly through NumPy or CuPy, with nothing to compile; call the model itself")

DataParallel = not_there(
    "torch.nn.DataParallel", "it copies a module to several GPUs and splits each batch between them, and "
    "tinypytorch computes on one device; use the module itself")

_RECURRENT = ("tinypytorch has no recurrent layers (no fused cell kernels, no packed sequences); write the cell from "
              "nn.Linear and tanh or sigmoid, in a loop over the time steps")
RNN, LSTM, GRU = (not_there(f"torch.nn.{name}", _RECURRENT) for name in ("RNN", "LSTM", "GRU"))
RNNCell, LSTMCell, GRUCell = (not_there(f"torch.nn.{name}", _RECURRENT) for name in ("RNNCell", "LSTMCell", "GRUCell"))

_PROFILER = ("it records each operator's time and memory through PyTorch's dispatcher, which tinypytorch does not "
             "have; time code with torch.utils.benchmark.Timer, measure memory with "
             "tinypytorch.utils.memory.peak_memory or tinypytorch.cuda.max_memory_allocated")
profiler_profile = not_there("torch.profiler.profile", _PROFILER)
autograd_profiler_profile = not_there("torch.autograd.profiler.profile", _PROFILER)
