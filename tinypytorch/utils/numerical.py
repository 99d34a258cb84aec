"""Numerical gradients (step 10): central differences, and a check of backward against them."""
import numpy as np

from tinypytorch.core import Variable, as_variable
from tinypytorch.cuda import get_array_module
from tinypytorch.grad_mode import no_grad


def numerical_diff(f, x, eps=1e-4):
    """Central-difference gradient of `f(x).sum()` with respect to every element of `x`.

    `f` maps a Variable to a Variable; `x` is a Variable or an array. The result is a
    float64 array shaped like `x`: element i is (F(x + eps e_i) - F(x - eps e_i)) / (2 eps)
    with F = sum of f's output, which is what backward computes when seeded with ones.
    The error is O(eps^2) from the Taylor series plus about 1e-16 * |F| / eps from rounding.
    """
    x = as_variable(x, "numerical_diff")
    xp = get_array_module(x)
    data = x.data.astype(xp.float64)  # a copy, in floating point, that we may perturb
    grad = xp.zeros_like(data)

    def total(array):
        return float(f(Variable(array.copy())).data.sum())

    with no_grad():  # only values are needed: record no graph
        for index in np.ndindex(data.shape):
            original = float(data[index])
            data[index] = original + eps
            forward = total(data)
            data[index] = original - eps
            back = total(data)
            data[index] = original
            grad[index] = (forward - back) / (2 * eps)
    return grad


def gradient_check(f, x, rtol=1e-6, atol=1e-8):
    """True when backward's gradient of `f(x).sum()` matches `numerical_diff` within rtol/atol.

    `x` is not modified: the backward pass runs on a fresh Variable holding the same data.
    """
    x = Variable(as_variable(x, "gradient_check").data)
    f(x).sum().backward()
    xp = get_array_module(x)
    return bool(xp.allclose(x.grad, numerical_diff(f, x), rtol=rtol, atol=atol))
