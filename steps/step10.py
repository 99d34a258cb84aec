# %% [markdown]
# # Step 10: Testing
#
# A wrong backward pass raises no error: it returns an array of the right
# shape that is simply not the derivative, and a model trained with it may
# still improve a little. So every function's backward needs a test. This
# step's idea is **how to test a gradient**, three ways:
#
# 1. **unit tests**, with expected values worked out by hand;
# 2. **gradient checks**, which compare `backward` with the central
#    difference `numerical_diff` on any input;
# 3. **reference tests**, which compare with an independent implementation,
#    PyTorch.
#
# The framework is step 09's, unchanged: it is in the collapsed cell below.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

# %% tags=["hide-cell"]
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)  # one step of the chain rule
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(as_array(y))  # NumPy may return a scalar for 0-d input
        output.set_creator(self)  # the output remembers where it came from
        self.input = input  # kept for backward, which needs the input's value
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError()

    def backward(self, gy):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.input.data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.input.data
        return np.exp(x) * gy


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Unit tests
#
# Python's `unittest` runs the methods named `test...` of a
# `unittest.TestCase` subclass. The expected values are worked out by hand,
# never taken from the code under test: $2^2 = 4$, and $\frac{d}{dx}x^2 = 2x$
# is $6$ at $x = 3$. These inputs make the arithmetic exact, so no tolerance
# is needed. `ExpTest` is the same for $e^0 = 1$ (collapsed below).

# %%
import unittest


class SquareTest(unittest.TestCase):
    def test_forward(self):
        y = square(Variable(np.array(2.0)))
        self.assertEqual(y.data, np.array(4.0))

    def test_backward(self):
        x = Variable(np.array(3.0))
        square(x).backward()
        self.assertEqual(x.grad, np.array(6.0))


# %% tags=["hide-cell"]
class ExpTest(unittest.TestCase):
    def test_forward(self):
        y = exp(Variable(np.array(0.0)))
        self.assertEqual(y.data, np.array(1.0))

    def test_backward(self):
        x = Variable(np.array(0.0))
        exp(x).backward()
        self.assertEqual(x.grad, np.array(1.0))


# %% [markdown]
# Hand-worked cases are few, and they favour convenient inputs where some
# bugs are invisible: a backward that returned just `gy`, as if $e^x$ had
# derivative 1, would pass `ExpTest`, because $e^0 = 1$.
#
# ## Gradient checking
#
# A gradient check needs no expected values: it compares `backward` with the
# central difference of step 04 on any input. The two cannot agree exactly:
# the difference's relative error is about $\frac{h^2}{6}|f'''/f'|$
# (truncation) plus a rounding error of order $\varepsilon/h$
# ($\varepsilon = 2.2 \times 10^{-16}$), for $e^x$ at $h = 10^{-4}$ about
# $2 \times 10^{-9}$ (the picture below). A wrong derivative is
# typically off by far more than one part in a million, so `rtol=1e-6`; `atol`
# covers elements whose derivative is 0. `numerical_diff` shifts all elements
# at once, so the check holds for element-wise functions, all stage 1 has.

# %%
def gradient_check(f, x, rtol=1e-6, atol=1e-8):
    """True when backward and the central difference agree on d f(x) / dx (element-wise f)."""
    y = f(x)
    y.backward()
    num_grad = numerical_diff(f, x)
    return np.allclose(x.grad, num_grad, rtol=rtol, atol=atol)


def composite(x):
    return square(exp(square(x)))


rng = np.random.default_rng(0)
for f in (square, exp, composite):
    x = Variable(rng.uniform(-1, 1, 5))
    print(f"gradient_check({f.__name__}) on 5 random values:", gradient_check(f, x))


# %% tags=["hide-input"]
def central_difference_error_picture():
    """Relative error of the central difference of exp at 0.5, against the step h."""
    hs = np.logspace(-13, -1, 97)
    x = 0.5
    errors = [abs((np.exp(x + h) - np.exp(x - h)) / (2 * h) - np.exp(x)) / np.exp(x) for h in hs]
    fig, ax = plt.subplots(figsize=(9.5, 3))
    ax.loglog(hs, errors, ".", ms=4, label="measured")
    ax.loglog(hs, hs ** 2 / 6, "--", label="truncation $h^2/6$")
    ax.loglog(hs, np.finfo(float).eps / hs, ":", label=r"rounding $\approx\varepsilon/h$")
    ax.axvline(1e-4, color="0.5", lw=1)
    ax.axhline(1e-6, color="C3", lw=1)
    ax.text(1.3e-4, 1e-2, "numerical_diff's h", color="0.4")
    ax.text(3e-9, 2e-6, "gradient_check's rtol", color="C3")
    ax.set(xlabel="step h", ylabel="relative error", ylim=(1e-14, 1e-1),
           title="central difference of exp at x = 0.5: wrong by far less than rtol at h = 1e-4")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # beside the axes, off the data
    fig.tight_layout()
    plt.show()


central_difference_error_picture()


# %% [markdown]
# ### A check must be able to fail
#
# A test that cannot fail proves nothing, so let us break something: a
# classic slip is to return the local derivative and forget to multiply by
# the incoming gradient `gy`.

# %%
class ForgetfulExp(Exp):
    def backward(self, gy):
        x = self.input.data
        return np.exp(x)  # bug: gy is ignored


x = Variable(rng.uniform(-1, 1, 5))
print("ForgetfulExp(x):        ", gradient_check(lambda v: ForgetfulExp()(v), x))
print("ForgetfulExp(square(x)):", gradient_check(lambda v: ForgetfulExp()(square(v)), x))
print("square(ForgetfulExp(x)):", gradient_check(lambda v: square(ForgetfulExp()(v)), x))

# %% [markdown]
# The broken function passes twice: when it is the *last* function, its `gy`
# is the seed, all ones, and ignoring a factor of one changes nothing. Only
# when another function follows does the bug show. So test every backward
# with a `gy` other than one, for instance under another function.
#
# The gradient checks become test cases on seeded random inputs, so that a
# failure can be reproduced, and a third test case compares with PyTorch
# (collapsed below). A gradient check tests `backward` against `forward`; if
# `forward` is wrong the two can agree on the wrong function, and a reference
# implementation closes that gap, to `rtol=1e-14` (only `exp` may differ, in
# its last bit).

# %% tags=["hide-cell"]
class GradientCheckTest(unittest.TestCase):
    def test_square(self):
        x = Variable(np.random.default_rng(1).uniform(-2, 2, 10))
        self.assertTrue(gradient_check(square, x))

    def test_exp(self):
        x = Variable(np.random.default_rng(2).uniform(-2, 2, 10))
        self.assertTrue(gradient_check(exp, x))

    def test_composite(self):
        x = Variable(np.random.default_rng(3).uniform(-1, 1, 10))
        self.assertTrue(gradient_check(composite, x))

    def test_catches_a_forgotten_gy(self):
        x = Variable(np.random.default_rng(4).uniform(-1, 1, 10))
        self.assertFalse(gradient_check(lambda v: square(ForgetfulExp()(v)), x))


class TorchTest(unittest.TestCase):
    def assert_matches_torch(self, array):
        x = Variable(array)
        y = composite(x)
        y.backward()
        t = torch.tensor(array, requires_grad=True)
        ty = torch.square(torch.exp(torch.square(t)))
        ty.backward(torch.ones_like(ty))
        np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-14, atol=0)
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)

    def test_scalar(self):
        self.assert_matches_torch(np.array(0.5))

    def test_random_arrays(self):
        rng = np.random.default_rng(5)
        for shape in [(3,), (2, 3), (2, 3, 4)]:
            self.assert_matches_torch(rng.uniform(-1.5, 1.5, shape))


# %% [markdown]
# ## Running the tests
#
# From a terminal, `python -m unittest file.py` runs them. In a notebook we
# run them into a `unittest.TestResult` (the runner's own report would print
# the time taken, which changes from run to run; the collapsed cell has the
# few lines):

# %% tags=["hide-input"]
def run_test_cases(*cases):
    result = unittest.TestResult()
    for case in cases:
        ran, failed = result.testsRun, len(result.failures + result.errors)
        unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
        failed = len(result.failures + result.errors) - failed
        print(f"{case.__name__:17} {result.testsRun - ran} tests, {failed} failed")
    return result


assert run_test_cases(SquareTest, ExpTest, GradientCheckTest, TorchTest).wasSuccessful()

# %% [markdown]
# This tutorial's own tests (`tests/test_step10.py` and its siblings) use
# **pytest**, which runs plain `test_...` functions with bare `assert`s, and
# **hypothesis**, which generates many valid inputs and shrinks a failing one
# to the simplest example. Stage 1's known limitations are checked there
# too: `backward()` on a leaf fails (step 16 fixes it), and `numerical_diff`
# needs an input of at least one dimension (step 11 fixes it).
#
# ## Check against PyTorch
#
# For $x = 0.5$ (as a one-element array) and two seeded random arrays, the
# composite's gradient passes `gradient_check` and equals PyTorch's within
# `rtol=1e-14`; for the broken `ForgetfulExp`, `gradient_check` fails, and
# PyTorch confirms that its gradient is the wrong one.

# %%
rng = np.random.default_rng(6)
for array in (np.array([0.5]), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, (2, 3))):
    x = Variable(array)
    assert gradient_check(composite, x)
    t = torch.tensor(array, requires_grad=True)
    torch.square(torch.exp(torch.square(t))).backward(torch.ones_like(t))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)
x = Variable(rng.uniform(-1, 1, 4))
assert not gradient_check(lambda v: square(ForgetfulExp()(v)), x)
t = torch.tensor(x.data, requires_grad=True)
torch.square(torch.exp(t)).backward(torch.ones_like(t))
assert not np.allclose(x.grad, t.grad.numpy(), rtol=1e-6)
print("PyTorch check passed: gradient_check agrees with the numerical derivative; the gradients with torch")

# %% [markdown]
# ## Recap
#
# - Unit tests pin down hand-worked values; choose inputs where a bug cannot
#   hide (not only $x = 0$).
# - A gradient check compares `backward` with the central difference on any
#   input, with a tolerance set by the difference's own error.
# - A check must be able to fail: break the code once and watch it fail; feed
#   every backward a `gy` other than one.
# - A reference (PyTorch) catches what a gradient check cannot: a wrong
#   forward.
#
# ## Exercises
#
# **1. Backprop ninja: `Cube`.** Write `Cube` ($x^3$) and `cube(x)` with a
# backward worked out by hand, and pass `gradient_check` with it under `exp`.

# %% tags=["hide-cell"]
class Cube(Function):
    def forward(self, x):
        return x ** 3

    def backward(self, gy):
        x = self.input.data
        return 3 * x ** 2 * gy


def cube(x):
    return Cube()(x)


x = Variable(rng.uniform(-1, 1, 5))
print("gradient_check(exp(cube(x))):", gradient_check(lambda v: exp(cube(v)), x))


# %% [markdown]
# **2. A check with a random seed.** Write `seeded_gradient_check(f, x, gy)`:
# seed `y.grad = gy` before `backward`. For element-wise $f$ the gradient of
# $\sum_i g_i f(x_i)$ is $g \cdot f'(x)$, so compare with `gy` times the
# central difference. Does it catch `ForgetfulExp` on its own?

# %% tags=["hide-cell"]
def seeded_gradient_check(f, x, gy, rtol=1e-6, atol=1e-8):
    y = f(x)
    y.grad = gy
    y.backward()
    return np.allclose(x.grad, gy * numerical_diff(f, x), rtol=rtol, atol=atol)


x = Variable(rng.uniform(-1, 1, 5))
gy = rng.uniform(0.5, 2, 5)
print("exp:", seeded_gradient_check(exp, x, gy))
print("ForgetfulExp:", seeded_gradient_check(lambda v: ForgetfulExp()(v), x, gy))
