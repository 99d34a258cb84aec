# %% [markdown]
# # Step 04: Numerical differentiation
#
# We can compute $y = f(x)$. Training needs more: how fast $y$ changes when
# $x$ changes, the derivative $f'(x)$. This step computes it by brute force,
# evaluating $f$ at two nearby points (the **central difference**), and
# measures how accurate that is. The answer explains why frameworks do not
# differentiate this way, and why the method stays useful: it is the
# independent reference against which step 10 tests every backward pass.
#
# The framework so far (`Variable`, `Function`, `Square`, `Exp`, unchanged
# since step 03) is in the collapsed cell.

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2


class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# %% [markdown]
# ## From the limit to a central difference
#
# The derivative is a limit, $f'(x) = \lim_{h \to 0} \frac{f(x + h) - f(x)}{h}$.
# A computer cannot take the limit, but it can pick a small $h$. Taylor's
# theorem says which quotient to use:
#
# $$f(x \pm h) = f(x) \pm h f'(x) + \frac{h^2}{2} f''(x) \pm \frac{h^3}{6} f'''(x) + O(h^4).$$
#
# The **forward difference** $\frac{f(x + h) - f(x)}{h} = f'(x) + \frac{h}{2}
# f''(x) + \dots$ is off by a term in $h$. The **central difference**
# subtracts the two expansions, which cancels every even power of $h$:
#
# $$\frac{f(x + h) - f(x - h)}{2h} = f'(x) + \frac{h^2}{6} f'''(x) + O(h^4).$$
#
# Its *truncation error* shrinks like $h^2$: a ten times smaller $h$, a
# hundred times smaller error. `numerical_diff` computes it; `f` is anything
# that maps a `Variable` to a `Variable`, and `eps` is $h$.

# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# The composite of step 03, $f(x) = e^{2x^2}$, has the derivative
# $4x\,e^{2x^2}$, which is $2e^{0.5} \approx 3.2974425$ at $x = 0.5$:

# %%
def f(x):
    return Square()(Exp()(Square()(x)))


print(f"numerical f'(0.5) = {numerical_diff(f, Variable(np.array(0.5))):.7f}   (eps = 1e-4)")
print(f"exact     f'(0.5) = {4 * 0.5 * np.exp(2 * 0.5 ** 2):.7f}")

# %% [markdown]
# ## How small should $h$ be?
#
# Shrinking $h$ shrinks the truncation error, but brings in a second one.
# Each float64 operation rounds to 53 bits, a relative error up to
# $u = 2^{-53} \approx 1.1 \times 10^{-16}$. The numerator subtracts two
# nearly equal numbers, each off by about $u\,|f(x)|$ (and the points
# $x \pm h$ are rounded too), and dividing by $2h$ magnifies that: the
# *rounding error* grows like $1/h$,
#
# $$E(h) \approx \frac{h^2}{6}\,|f'''(x)| + \frac{u\,R}{h},
#   \qquad R \approx |f(x)| + |x\,f'(x)|.$$
#
# The sum is smallest at $h^* = (3uR / |f'''|)^{1/3}$, of order
# $u^{1/3} \approx 5 \times 10^{-6}$; below $h^*$ a smaller step makes the
# estimate *worse*.
#
# To see both errors on every machine alike we take $f(x) = x^4$ as
# `Square()(Square(x))` at $x = 0.5$, on a one-element array: only
# multiplications, which IEEE 754 rounds identically everywhere (an `exp`'s
# last bit depends on the library, and a 0-dimensional `x ** 2` calls C's
# `pow`). Its central difference is off by exactly $4x h^2 = 2h^2$ in exact
# arithmetic; the forward one by $6x^2 h + 4x h^2 + h^3$.

# %%
def fourth_power(x):
    return Square()(Square()(x))


def forward_diff(f, x, eps):  # only for comparison
    return (f(Variable(x.data + eps)).data - f(x).data) / eps


x = Variable(np.array([0.5]))
exact = 4 * 0.5 ** 3
h_values = 10.0 ** -np.arange(1, 13)
forward_errors = np.array([abs(forward_diff(fourth_power, x, h) - exact).item() for h in h_values])
central_errors = np.array([abs(numerical_diff(fourth_power, x, eps=h) - exact).item() for h in h_values])
best = np.argmin(central_errors)
print(f"central difference: smallest error {central_errors[best]:.1e} at h = {h_values[best]:.0e}; "
      f"at h = 1e-12 the error is {central_errors[-1]:.1e}")

# %% [markdown]
# On a log-log plot both regimes are straight lines: slope 1 and 2 for the
# truncation errors (dashed, the exact formulas), slope $-1$ for rounding
# (dotted, $uR/h$ with $R = 0.0625 + 0.25$). The central error bottoms out
# near the predicted $h^* \approx 2 \times 10^{-6}$ (here $f''' = 24x = 12$);
# below it the error grows, erratically, for it is made of rounding accidents.

# %% tags=["hide-input"]
u = 2.0 ** -53
fig, ax = plt.subplots(figsize=(9.5, 3.5))
ax.loglog(h_values, forward_errors, "o-", label="forward difference")
ax.loglog(h_values, central_errors, "s-", label="central difference")
ax.loglog(h_values, 6 * 0.5 ** 2 * h_values, "--", color="C0", alpha=0.5, label=r"$6x^2 h$ (slope 1)")
ax.loglog(h_values, 4 * 0.5 * h_values ** 2, "--", color="C1", alpha=0.5, label=r"$4x h^2$ (slope 2)")
ax.loglog(h_values, u * (0.0625 + 0.25) / h_values, ":", color="k", label=r"$uR/h$ (slope $-1$)")
ax.axvline(h_values[best], color="0.6", linewidth=0.8)
ax.set_ylim(1e-14, 1)
ax.invert_xaxis()  # h shrinks from left to right
ax.set_xlabel("step h (shrinking to the right)")
ax.set_ylabel("absolute error of f'(0.5)")
ax.set_title("Derivative of $x^4$ at $x = 0.5$: truncation error falls, then rounding error rises")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the axes: every corner has data
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What numerical differentiation costs
#
# - **Accuracy is limited.** At the best $h$ a central difference keeps about
#   two thirds of float64's sixteen digits, and finding that $h$ needs
#   $f'''$, which we do not know. Backpropagation (step 05 on) is exact up to
#   the rounding of each operation.
# - **It is expensive.** One derivative costs two evaluations of $f$; a
#   model with $n$ parameters needs $2n$ evaluations of the whole model for
#   one gradient. Backpropagation gets all $n$ for a small multiple of one.
# - **It moves every element at once.** `numerical_diff` shifts every element
#   of an array by `eps`, which gives each element's derivative only when each
#   output element depends on its own input element alone (exercise 1 lifts
#   that).
#
# ## Check against PyTorch
#
# The check asks that the central difference of $e^{2x^2}$ at $x = 0.5$ be
# within $10^{-8}$ of PyTorch's autograd. At the default $h = 10^{-4}$ the
# truncation error, $h^2 f'''/6$ with $f''' = (48x + 64x^3)e^{2x^2} \approx
# 52.8$, is $8.8 \times 10^{-8}$: too much. At $h = 10^{-5}$ it is
# $8.8 \times 10^{-10}$, and rounding, $uR/h \approx 4 \times 10^{-11}$,
# stays far below.

# %%
import torch  # noqa: E402

t = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
torch.square(torch.exp(torch.square(t))).backward()
numerical = numerical_diff(f, Variable(np.array(0.5)), eps=1e-5)
np.testing.assert_allclose(numerical, t.grad.numpy(), rtol=0, atol=1e-8)
print(f"numerical_diff, eps=1e-5: {numerical:.8f}   torch autograd: {t.grad.item():.8f}")
print("PyTorch check passed: numerical derivative of e^(2x^2) at x=0.5 within 1e-8 of torch autograd")

# %% [markdown]
# ## Recap
#
# - The central difference $\frac{f(x+h) - f(x-h)}{2h}$ approximates $f'(x)$
#   with a truncation error $\frac{h^2}{6} f'''(x)$, against $\frac{h}{2}
#   f''(x)$ for the forward difference.
# - Rounding adds an error of about $uR/h$, so there is a best $h$, near
#   $u^{1/3}$; smaller is worse.
# - It costs two evaluations of $f$ per input and keeps about two thirds of
#   the digits: a test of gradients, not a way to train.
#
# ## Exercises
#
# **1.** A function that mixes elements, such as the product of all elements,
# needs one element moved at a time. Write `numerical_gradient(f, x, eps)`
# that does this, and with it the gradient of `Prod`, a `Function` whose
# forward is `np.prod`, at $x = (0.5, 2, 3)$. Compare with torch's autograd
# of `torch.prod`.

# %% tags=["hide-cell"]
class Prod(Function):
    def forward(self, x):
        return np.asarray(np.prod(x))


def numerical_gradient(f, x, eps=1e-5):
    grad = np.zeros_like(x.data)
    for i in np.ndindex(x.data.shape):
        shift = np.zeros_like(x.data)
        shift[i] = eps
        grad[i] = (f(Variable(x.data + shift)).data - f(Variable(x.data - shift)).data) / (2 * eps)
    return grad


t = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
torch.prod(t).backward()
grad = numerical_gradient(Prod(), Variable(np.array([0.5, 2.0, 3.0])))
np.testing.assert_allclose(grad, t.grad.numpy(), rtol=0, atol=1e-9)
print("numerical gradient of prod:", np.array2string(grad, precision=6), "== torch within 1e-9")

# %% [markdown]
# **2.** Write `Sin(Function)` and compare `numerical_diff(Sin(), x)` with
# torch's autograd of `torch.sin` on 7 points of $[-3, 3]$, with `eps` $=
# 10^{-4}$ and $10^{-5}$. Which one stays within $10^{-9}$, and why?

# %% tags=["hide-cell"]
class Sin(Function):
    def forward(self, x):
        return np.sin(x)


t = torch.linspace(-3.0, 3.0, 7, dtype=torch.float64, requires_grad=True)
torch.sin(t).sum().backward()  # each element's derivative: torch.sin is element-wise
for eps in (1e-4, 1e-5):
    error = np.max(np.abs(numerical_diff(Sin(), Variable(t.detach().numpy()), eps) - t.grad.numpy()))
    print(f"eps = {eps:.0e}: within 1e-9 of torch: {error < 1e-9}")
# truncation h^2/6 |sin'''| = h^2/6 |cos x|: up to 1.7e-9 at h = 1e-4, 1.7e-11 at 1e-5
