"""Automatic differentiation as PyTorch's `torch.autograd` offers it (steps 33-40).

    engine     the backward pass: dependency counting and a ready queue (step 33)
    hooks      hooks on a variable's gradient: register_hook, RemovableHandle (step 34)
    gradients  grad: gradients of outputs with respect to chosen inputs, returned instead of stored; backward
    graph      saved tensors (step 35), saved_tensors_hooks and save_on_cpu (step 38)
    anomaly    detect_anomaly, set_detect_anomaly (step 39)
    gradcheck  gradcheck, gradgradcheck (step 40)
    function   Function with a ctx, once_differentiable: custom functions written PyTorch's way (step 49)
"""
from tinypytorch.autograd import anomaly, engine, graph, hooks  # noqa: I001 (engine needs anomaly)
from tinypytorch.autograd.gradients import backward, grad
from tinypytorch.autograd.anomaly import detect_anomaly, set_detect_anomaly
from tinypytorch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tinypytorch.autograd.function import Function, FunctionCtx, once_differentiable


__all__ = ["grad", "backward", "engine", "hooks", "graph", "anomaly", "detect_anomaly", "set_detect_anomaly",
           "gradcheck", "gradgradcheck", "GradcheckError", "Function", "FunctionCtx", "once_differentiable"]
