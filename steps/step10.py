# %% [markdown]
# # Step 10: Testing
#
# A wrong backward pass raises no error. It returns a number of the right shape
# that is simply not the derivative, and a model trained with it may still
# improve a little, which hides the bug further. So every function's backward
# needs a test, and this step writes them in three ways:
#
# 1. **unit tests** with expected values worked out by hand;
# 2. **gradient checks**, which compare `backward` with `numerical_diff` on
#    any input, no hand calculation needed;
# 3. **reference tests**, which compare with an independent implementation,
#    PyTorch.
#
# The framework itself is complete for stage 1 and unchanged from step 09.
#
# ## The framework at the end of stage 1

# %%
import numpy as np


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


# %%
def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


# %%
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


# %%
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


# %%
def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Unit tests with `unittest`
#
# Python's standard library ships a test framework, `unittest`. A test case is
# a subclass of `unittest.TestCase`; each method whose name starts with `test`
# is one test, and `self.assertEqual` and friends report a failure with the
# values involved.
#
# The expected values below are worked out by hand, never taken from the code
# under test: $2^2 = 4$, and $\frac{d}{dx}x^2 = 2x$ is $6$ at $x = 3$;
# $e^0 = 1$, and $\frac{d}{dx}e^x = e^x$ is $1$ at $x = 0$. These inputs make
# the arithmetic exact, so `assertEqual` needs no tolerance.

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


class ExpTest(unittest.TestCase):
    def test_forward(self):
        y = exp(Variable(np.array(0.0)))
        self.assertEqual(y.data, np.array(1.0))

    def test_backward(self):
        x = Variable(np.array(0.0))
        exp(x).backward()
        self.assertEqual(x.grad, np.array(1.0))


# %% [markdown]
# Hand-worked cases are clear, but they are few, and they favour convenient
# inputs such as 0, where some bugs are invisible: a backward pass that returned
# just `gy`, as if the derivative of $e^x$ were 1, would pass
# `ExpTest.test_backward`, because $e^0 = 1$.
#
# ## Gradient checking
#
# A gradient check needs no expected values: it compares the gradient from
# `backward` with the central difference of step 04, on any input. Agreement
# cannot be exact. `numerical_diff` uses $h = 10^{-4}$, so its truncation error
# is about $\frac{h^2}{6}|f'''|$, a relative error of
# $1.7 \times 10^{-9} \cdot |f'''/f'|$, and its rounding error is of order
# $10^{-12}$ relative (step 04). The default `rtol=1e-6` leaves room for
# $|f'''/f'|$ up to several hundred, while a genuinely wrong derivative is
# typically off by much more than one part in a million. `atol` covers elements
# whose derivative is 0, where a relative tolerance means nothing.
#
# Because `numerical_diff` shifts all elements of `x` at once, `gradient_check`
# is valid for element-wise functions only, which is all stage 1 has.

# %%
def gradient_check(f, x, rtol=1e-6, atol=1e-8):
    """True when backward and the central difference agree on d f(x) / dx (element-wise f)."""
    y = f(x)
    y.backward()
    num_grad = numerical_diff(f, x)
    return np.allclose(x.grad, num_grad, rtol=rtol, atol=atol)


# %%
def composite(x):
    return square(exp(square(x)))


rng = np.random.default_rng(0)
for f in (square, exp, composite):
    print(f"gradient_check({f.__name__:9}) on 5 random values:", gradient_check(f, Variable(rng.uniform(-1, 1, 5))))

# %% [markdown]
# ### A check must be able to fail
#
# A test that cannot fail proves nothing, so let us break something. A classic
# slip in a backward pass is to return the local derivative and forget to
# multiply by the incoming gradient `gy`:

# %%
class ForgetfulExp(Exp):
    def backward(self, gy):
        x = self.input.data
        return np.exp(x)  # bug: gy is ignored


x = Variable(rng.uniform(-1, 1, 5))
print("ForgetfulExp(x):          ", gradient_check(lambda v: ForgetfulExp()(v), x))
print("ForgetfulExp(square(x)):  ", gradient_check(lambda v: ForgetfulExp()(square(v)), x))
print("square(ForgetfulExp(x)):  ", gradient_check(lambda v: square(ForgetfulExp()(v)), x))

# %% [markdown]
# The broken function passes twice. In both cases it is the *last* function of
# the chain, so its `gy` is the seed, all ones, and ignoring a factor of one
# changes nothing. Only when another function follows it, so that `gy` is not
# one, does the bug show. The lesson generalises: test every backward pass with
# a `gy` other than one, for instance by composing it under another function.
#
# The gradient checks become test cases like the hand-worked ones, on seeded
# random inputs, so that a failure can be reproduced:

# %%
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


# %% [markdown]
# ## Testing against PyTorch
#
# A gradient check tests `backward` against `forward`; if `forward` itself is
# wrong, the two can agree on the wrong function. A reference implementation
# closes that gap, and since it should agree with ours to the last few bits,
# the tolerance can be tight: our arithmetic is PyTorch's apart from `exp`,
# whose last bit may differ, hence `rtol=1e-14`.

# %%
import torch


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
# From the command line a test file is run with `python -m unittest` (or
# `unittest.main()` at the end of the file). Neither suits a notebook: unless
# told otherwise, `unittest.main` parses the kernel's command-line arguments
# and exits the process when done, and it writes its report to standard error. Instead we load the test
# cases into a suite and run it into a `TestResult`, which collects the
# failures and errors, and print one line a test. (The runner's own report
# would end with the time the tests took, which changes from run to run.)

# %%
loader = unittest.defaultTestLoader
suite = unittest.TestSuite(
    loader.loadTestsFromTestCase(case) for case in (SquareTest, ExpTest, GradientCheckTest, TorchTest)
)
names = [test.id() for case in suite for test in case]  # before running: the suite lets go of its tests
result = unittest.TestResult()
suite.run(result)
failed = {test.id() for test, _ in result.failures + result.errors}
for name in names:
    print(f"{name.removeprefix('__main__.'):45} {'FAILED' if name in failed else 'ok'}")
print(f"{result.testsRun} tests run: {len(result.failures)} failures, {len(result.errors)} errors")
assert result.wasSuccessful()

# %% [markdown]
# ## The repository's own tests: pytest and hypothesis
#
# The tests of this tutorial (`tests/test_step10.py` and its siblings) use
# two tools beyond the standard library. **pytest** runs plain functions whose
# names start with `test_`, uses the bare `assert` statement and reports the
# values that made it fail; markers select tests, so `pytest -m step10` runs
# this step's tests. **hypothesis** generates the inputs: instead of a few
# chosen or seeded values, a test states what inputs are valid, and hypothesis
# tries many of them and, when one fails, shrinks it to the simplest failing
# example. A test in that style:
#
# ```python
# from hypothesis import given, strategies as st
#
# @given(st.floats(-2.0, 2.0))
# def test_composite_gradient_matches_torch(value):
#     x = Variable(np.array(value))
#     composite(x).backward()
#     t = torch.tensor(value, dtype=torch.float64, requires_grad=True)
#     torch.square(torch.exp(torch.square(t))).backward()
#     np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14)
# ```
#
# ## Known limitations of stage 1
#
# The framework computes correct gradients for chains of one-input,
# one-output functions. It is not yet a general autograd engine:
#
# - Functions take one input and give one output, so there is no `x + y` and
#   no `x * y`; stage 2 starts there.
# - A gradient is *assigned*, not added. A variable used in two places (once
#   there are two-input functions, `x + x`) would keep only one contribution,
#   while PyTorch accumulates them (step 14).
# - `backward()` on a variable without a creator fails, because the loop of
#   step 08 puts `None` on its list; PyTorch sets a leaf's gradient to one, and
#   so does step 16:

# %%
try:
    Variable(np.array(1.0)).backward()
except AttributeError as error:
    print("AttributeError:", error)

# %% [markdown]
# - A `Function` object remembers only its latest call, so it must not appear
#   twice in one graph; `square` and `exp` create a fresh one per call.
# - `numerical_diff` and `gradient_check` shift all elements at once and hold
#   only for element-wise functions; step 40 checks one element at a time.
# - `numerical_diff` builds `Variable(x.data - eps)` without `as_array`. For a
#   0-dimensional `x`, NumPy returns a scalar there, which the type check of
#   step 09 rejects; a one-element array works, and step 11 adds the missing
#   `as_array`:

# %%
try:
    numerical_diff(square, Variable(np.array(0.5)))
except TypeError as error:
    print("TypeError:", error)
print(f"numerical_diff(square, Variable(np.array([0.5]))) = {numerical_diff(square, Variable(np.array([0.5])))}")
#
# ## Check against PyTorch
#
# For $x = 0.5$ (as a one-element array, see above) and two seeded random
# arrays, the composite's gradient passes
# `gradient_check` against the numerical derivative and equals PyTorch's within
# `rtol=1e-14`. For the broken `ForgetfulExp`, `gradient_check` fails, and
# PyTorch confirms that the broken gradient is the wrong one.

# %%
rng = np.random.default_rng(6)
for array in (np.array([0.5]), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, (2, 3))):
    x = Variable(array)
    assert gradient_check(composite, x)
    t = torch.tensor(array, requires_grad=True)
    ty = torch.square(torch.exp(torch.square(t)))
    ty.backward(torch.ones_like(ty))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)
    print(f"shape {array.shape!s:6}: gradient_check passes and x.grad equals torch's")

x = Variable(rng.uniform(-1, 1, 4))
assert not gradient_check(lambda v: square(ForgetfulExp()(v)), x)
t = torch.tensor(x.data, requires_grad=True)
torch.square(torch.exp(t)).backward(torch.ones_like(t))
assert not np.allclose(x.grad, t.grad.numpy(), rtol=1e-6)
print("square(ForgetfulExp(x)): gradient_check fails, and the gradient differs from torch's")

print("PyTorch check passed: gradient_check agrees with the numerical derivative, and the gradients with torch")
