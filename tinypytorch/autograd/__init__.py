"""Automatic differentiation as PyTorch's `torch.autograd` offers it (steps 33-40).

The kernel, which core's Variable and Function call and which imports none of the modules of operations:

    engine     the backward pass: dependency counting, a ready queue, gradient hooks run (steps 33-34)
    graph      saved tensors (step 35), saved_tensors_hooks and save_on_cpu (step 38); Node
    hooks      RemovableHandle, what register_hook returns (step 34)
    anomaly    detect_anomaly, set_detect_anomaly (step 39)

The public tools above it, which the floors above use (never the engine itself):

    gradients  grad and backward; current_pass, the one door for a pass run inside a running one (steps 42-46)
    gradcheck  gradcheck, gradgradcheck (step 40)
    function   Function with a ctx, once_differentiable: custom functions written PyTorch's way (step 49)
    forward_ad dual_level, make_dual, unpack_dual: forward-mode AD (step 64)
    functional vjp, jvp, jacobian, hessian, hvp, vhp of whole functions (step 65)
    profiler   PyTorch's profile: not in tinypytorch, a clear error where it is used
"""
from tinypytorch.autograd import anomaly, engine, graph, hooks  # noqa: I001 (engine needs anomaly)
from tinypytorch.autograd.gradients import backward, grad
from tinypytorch.autograd.anomaly import detect_anomaly, set_detect_anomaly
from tinypytorch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tinypytorch.autograd.function import Function, FunctionCtx, once_differentiable
from tinypytorch.autograd import forward_ad  # step 64
from tinypytorch.autograd import functional  # step 65
from tinypytorch.autograd import profiler


__all__ = ["grad", "backward", "engine", "hooks", "graph", "anomaly", "detect_anomaly", "set_detect_anomaly",
           "gradcheck", "gradgradcheck", "GradcheckError", "Function", "FunctionCtx", "once_differentiable",
           "forward_ad", "functional", "profiler"]
