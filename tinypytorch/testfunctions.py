"""Optimisation test functions, written with the operators (steps 24 and 26).

Each works on Variables, NumPy arrays, Python numbers or torch tensors alike, since
it uses nothing but `+ - * **`: the checks evaluate the same formula in PyTorch.
"""


def sphere(x, y):  # step 24: a round bowl, minimum f(0, 0) = 0
    return x**2 + y**2


def matyas(x, y):  # step 24: a flat valley along x = y, minimum f(0, 0) = 0
    return 0.26 * (x**2 + y**2) - 0.48 * x * y


def goldstein_price(x, y):  # step 24: many local minima, global minimum f(0, -1) = 3
    return (1 + (x + y + 1)**2 * (19 - 14*x + 3*x**2 - 14*y + 6*x*y + 3*y**2)) * \
           (30 + (2*x - 3*y)**2 * (18 - 32*x + 12*x**2 + 48*y - 36*x*y + 27*y**2))


def rosenbrock(x0, x1):  # step 26: a curved valley, minimum f(1, 1) = 0
    return 100 * (x1 - x0**2) ** 2 + (1 - x0) ** 2
