# %% [markdown]
# # Step 04: Numerical differentiation
#
# We can now compute $y = f(x)$. Training a model needs more: how $y$ changes
# when $x$ changes a little, the derivative $f'(x)$. This step computes
# derivatives the brute-force way, by evaluating $f$ at two nearby points, and
# looks closely at how accurate that is. The answer explains both why
# frameworks do not differentiate this way and why it stays useful: it is the
# independent reference against which step 10 tests our backward passes.
#
# ## The framework so far
#
# `Variable`, `Function`, `Square` and `Exp` are unchanged from step 03.

# %%
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data


# %%
class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


# %%
class Square(Function):
    def forward(self, x):
        return x ** 2


class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# %% [markdown]
# ## From the limit to a finite difference
#
# The derivative is a limit:
#
# $$f'(x) = \lim_{h \to 0} \frac{f(x + h) - f(x)}{h}.$$
#
# A computer cannot take the limit, but it can pick a small $h$ and evaluate
# the quotient. Which quotient matters. Taylor's theorem expands $f$ around $x$:
#
# $$f(x \pm h) = f(x) \pm h f'(x) + \frac{h^2}{2} f''(x) \pm \frac{h^3}{6} f'''(x) + O(h^4).$$
#
# The **forward difference** uses $x$ and $x + h$; the $h^2$ term survives the
# division by $h$:
#
# $$\frac{f(x + h) - f(x)}{h} = f'(x) + \frac{h}{2} f''(x) + O(h^2).$$
#
# The **central difference** uses $x - h$ and $x + h$. Subtracting the two
# expansions cancels every even power of $h$, including the $h^2$ term:
#
# $$\frac{f(x + h) - f(x - h)}{2h} = f'(x) + \frac{h^2}{6} f'''(x) + O(h^4).$$
#
# Its error, the *truncation error* of cutting the Taylor series short, shrinks
# like $h^2$ instead of $h$: ten times smaller $h$, a hundred times smaller
# error. We use the central difference.

# %% [markdown]
# ## `numerical_diff`
#
# `f` is anything that maps a `Variable` to a `Variable`: a `Function` object
# or, as below, a Python function built from them. `eps` is the $h$ above.

# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# For $f(x) = x^2$ the central difference is exact in exact arithmetic, since
# $f''' = 0$: $\big((x+h)^2 - (x-h)^2\big) / 2h = 2x$. At $x = 2$ we expect 4:

# %%
print(f"d(x^2)/dx at x=2: {numerical_diff(Square(), Variable(np.array(2.0))):.6f}")


# %% [markdown]
# The composite of step 03, $y = \left(e^{x^2}\right)^2 = e^{2x^2}$, written as a
# Python function. Its derivative is $f'(x) = 4x\,e^{2x^2}$, so at $x = 0.5$ the
# exact value is $2e^{0.5} \approx 3.297442541$.

# %%
def f(x):
    A = Square()
    B = Exp()
    C = Square()
    return C(B(A(x)))


x = Variable(np.array(0.5))
dy = numerical_diff(f, x)
print(f"numerical f'(0.5) = {dy:.10f}   (eps = 1e-4)")
print(f"exact     f'(0.5) = {4 * 0.5 * np.exp(2 * 0.5 ** 2):.10f}")

# %% [markdown]
# They agree to seven significant digits. Where does the difference in the eighth
# come from, and can a smaller `eps` remove it?
#
# ## How small should $h$ be?
#
# Shrinking $h$ shrinks the truncation error, but it brings a second error
# into play. Every float64 operation rounds its result to 53 significant bits,
# a relative error of up to $u = 2^{-53} \approx 1.1 \times 10^{-16}$. The two
# values $f(x \pm h)$ are each off by about $u\,|f(x)|$, and the points $x \pm h$
# themselves are rounded, which changes the true step $2h$ by about $u\,|x|$.
# The numerator is a difference of two nearly equal numbers, so these tiny
# absolute errors become large relative ones, and dividing by $2h$ magnifies
# them. The *rounding error* grows like $1/h$:
#
# $$E(h) \approx \underbrace{\frac{h^2}{6}\,|f'''(x)|}_{\text{truncation}}
#   + \underbrace{\frac{u\,R}{h}}_{\text{rounding}},
#   \qquad R \approx |f(x)| + |x\,f'(x)|.$$
#
# The sum is smallest where its derivative in $h$ vanishes,
# at $h^* = \left(3uR / |f'''(x)|\right)^{1/3}$, which is of order
# $u^{1/3} \approx 5 \times 10^{-6}$ for functions of moderate size; the error
# there is of order $u^{2/3} \approx 2 \times 10^{-11}$. Below $h^*$ a smaller
# step makes the estimate *worse*.
#
# To see both errors we need a function whose exact derivative we know and
# whose evaluation is reproducible to the last bit. We take
# $f(x) = x^4$, built as `square(square(x))`: it uses only the four basic
# operations, which IEEE 754 rounds correctly, and so identically on every
# machine. (An `exp` would do for the lesson, but its last bit depends on the
# library and CPU, and so would the smallest-$h$ rows of the table.) We
# evaluate it on a one-element array, `np.array([0.5])`, not a 0-dimensional
# one: 0-dimensional arithmetic produces NumPy scalars (step 02), and for a
# NumPy scalar `x ** 2` calls the C library's `pow`, which is not always
# correctly rounded, while for an array NumPy computes it as `x * x`.
#
# For $x^4$ the Taylor series ends with the $h^4$ term, so the truncation
# errors are exact formulas: at $x = 0.5$, where $f'(x) = 4x^3 = 0.5$, the
# forward difference is off by $6x^2 h + 4x h^2 + h^3$ and the central one by
# exactly $4x h^2 = 2h^2$.

# %%
def fourth_power(x):
    return Square()(Square()(x))


def forward_diff(f, x, eps):  # only for comparison; the framework uses the central difference
    return (f(Variable(x.data + eps)).data - f(x).data) / eps


x = Variable(np.array([0.5]))  # one element, so that every x ** 2 is computed as x * x
exact = 4 * 0.5 ** 3
h_values = 10.0 ** -np.arange(1, 13)
forward_errors = np.array([abs(forward_diff(fourth_power, x, h) - exact).item() for h in h_values])
central_errors = np.array([abs(numerical_diff(fourth_power, x, eps=h) - exact).item() for h in h_values])

print("     h   forward error   (6x^2 h)   central error   (4x h^2)")
for h, fe, ce in zip(h_values, forward_errors, central_errors):
    print(f"{h:6.0e}    {fe:9.2e}     {6 * 0.5 ** 2 * h:9.2e}     {ce:9.2e}     {4 * 0.5 * h ** 2:9.2e}")

# %% [markdown]
# Reading the table from the top:
#
# - For large $h$ each error follows its truncation formula (in brackets: the
#   leading term of the forward error, and the exact central error): the
#   forward error drops tenfold per row, the central error a hundredfold.
# - The central error bottoms out near $h = 10^{-6}$ at about $3 \times 10^{-12}$,
#   around the predicted $h^* \approx 2 \times 10^{-6}$
#   (here $R = 0.0625 + 0.25$ and $f''' = 24x = 12$).
# - Below that, rounding takes over and the error *grows* as $h$ shrinks,
#   erratically, because it is made of rounding accidents. At $h = 10^{-12}$ it
#   is $10^{-5}$, as large as the forward difference's error at $h = 10^{-5}$.
#
# On a log-log plot the two regimes are straight lines: slope 1 and 2 for the
# truncation errors, slope $-1$ for rounding.

# %%
import matplotlib.pyplot as plt

u = 2.0 ** -53
fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(h_values, forward_errors, "o-", label="forward difference")
ax.loglog(h_values, central_errors, "s-", label="central difference")
ax.loglog(h_values, 6 * 0.5 ** 2 * h_values, "--", color="C0", alpha=0.5, label=r"$6x^2 h$ (slope 1)")
ax.loglog(h_values, 4 * 0.5 * h_values ** 2, "--", color="C1", alpha=0.5, label=r"$4x h^2$ (slope 2)")
ax.loglog(h_values, u * (0.0625 + 0.25) / h_values, ":", color="k", label=r"$uR/h$ (slope $-1$)")
ax.set_ylim(1e-14, 1)
ax.invert_xaxis()  # h shrinks from left to right, as it does down the table
ax.set_xlabel("step h")
ax.set_ylabel("absolute error of f'(0.5)")
ax.set_title("Derivative of $x^4$ at $x = 0.5$")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## What numerical differentiation costs
#
# Two lessons follow, and they shape the rest of the tutorial.
#
# - **Accuracy is limited.** Even at the best $h$ a central difference keeps
#   only about two thirds of float64's sixteen digits, and finding that $h$
#   needs $f'''$, which we do not know. Backpropagation (step 05 on) computes
#   derivatives exact up to the rounding of each operation.
# - **It is expensive.** One derivative costs two evaluations of $f$. A
#   model with $n$ parameters needs $2n$ evaluations of the whole model for one
#   gradient: two million forward passes for a million parameters.
#   Backpropagation gets all $n$ derivatives for a small constant multiple of
#   the cost of one evaluation.
#
# One more limit of this particular `numerical_diff`: it moves *every*
# element of an array input by `eps` at once. That gives each element's
# derivative only when each output element depends on its own input element
# alone, as for `Square` and `Exp`. For a function that mixes elements (a sum,
# a matrix product), one has to perturb one element at a time.
#
# Numerical differentiation is simple and independent of any backward code,
# which makes it the standard way to *test* a backward pass (step 10).
#
# ### Choosing $h$ for the check
#
# The check below asks that the numerical derivative of the composite
# $e^{2x^2}$ at $x = 0.5$ be within $10^{-8}$ of PyTorch's autograd. Is the
# default `eps = 1e-4` good enough? The third derivative is
# $f'''(x) = (48x + 64x^3)\,e^{2x^2}$, which is $32 e^{0.5} \approx 52.8$ at
# $x = 0.5$, so the truncation error is about $52.8\,h^2/6$:

# %%
third = (48 * 0.5 + 64 * 0.5 ** 3) * np.exp(2 * 0.5 ** 2)
for h in (1e-4, 1e-5):
    print(f"h = {h:.0e}: predicted truncation error {third * h ** 2 / 6:.1e}")
print(f"measured error at h = 1e-4: {numerical_diff(f, Variable(np.array(0.5))) - 4 * 0.5 * np.exp(0.5):.2e}")

# %% [markdown]
# The prediction matches the measurement: at $h = 10^{-4}$ the error is
# $8.8 \times 10^{-8}$, nine times too large. At $h = 10^{-5}$ the truncation
# error falls to $8.8 \times 10^{-10}$, while the rounding error,
# $uR/h$ with $R \approx 3.3$, is only about $4 \times 10^{-11}$; the total
# stays well inside $10^{-8}$. (The optimum $h^* \approx 3 \times 10^{-6}$
# would be slightly better, but $10^{-5}$ keeps a safety factor of ten without
# getting close to the rounding regime.)
#
# ## Check against PyTorch
#
# PyTorch computes the same derivative with autograd, which we will build
# ourselves from step 05 on: `backward()` on the output fills `x.grad`.

# %%
import torch

t = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
torch.square(torch.exp(torch.square(t))).backward()

numerical = numerical_diff(f, Variable(np.array(0.5)), eps=1e-5)
np.testing.assert_allclose(numerical, t.grad.numpy(), rtol=0, atol=1e-8)
print(f"numerical_diff, eps=1e-5: {numerical:.9f}")
print(f"torch autograd:           {t.grad.item():.9f}")
print("their difference is below 1e-8")

print("PyTorch check passed: numerical derivative of e^(2x^2) at x=0.5 within 1e-8 of torch autograd")
