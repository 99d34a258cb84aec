# %% [markdown]
# # Step 60: Why lower precision, and what breaks
#
# A float16 number takes two bytes instead of float32's four: half the
# memory for every weight, activation and gradient, and on GPUs with
# tensor cores many times the arithmetic speed. That is why large
# models train in "mixed precision". But float16 has only 5 exponent
# bits and 10 mantissa bits, and each of them costs something: numbers
# above 65,504 become infinite, the smallest number above zero is
# $2^{-24} \approx 6 \times 10^{-8}$ (half of it and less become zero),
# and near 1 there are only 1,024 values per unit step.
# This step draws float16's range and spacing against float32's and
# bfloat16's, shows the three ways float16 arithmetic goes wrong, and
# then measures the one that matters most for training: in a small
# network's backward pass, which gradient entries become exactly zero
# in float16. The package and PyTorch, given the same weights, flush the
# very same entries. Scaling the loss before backward brings them back:
# the idea behind steps 61 and 62.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch.functions import MeanSquaredError
from tinypytorch.utils.listing import show_code

# %% tags=["hide-input"]
def below(error, bound):
    """'< 1%', after checking it: the last bits differ between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound}"
    return f"< {bound:.0%}"


# %% [markdown]
# ## Three formats, bit by bit
#
# A binary floating-point format with $e$ exponent bits and $m$ mantissa
# bits stores $\pm 1.f \times 2^{E}$, with $f$ the $m$ fraction bits and
# $E$ from $-(2^{e-1}-2)$ up to $2^{e-1}-1$. Everything follows from $e$
# and $m$: the machine epsilon (the gap after 1) is $2^{-m}$, the largest
# number $(2 - 2^{-m})\, 2^{E_\max}$, the smallest normal one $2^{E_\min}$;
# below it the leading 1 is dropped ("subnormal" numbers), down to
# $2^{E_\min - m}$. bfloat16 keeps float32's 8 exponent bits and only 7
# mantissa bits: float32's range, with an eighth of float16's precision
# (its eps is $2^{3}$ times float16's).
# NumPy has no bfloat16, so its row comes from the definition alone.

# %%
FORMATS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23)}  # (exponent bits, mantissa bits)


def from_bits(e, m):
    """The format's limits from its bit counts alone."""
    e_max = 2 ** (e - 1) - 1
    e_min = 1 - e_max
    return {"eps": 2.0**-m, "max": (2 - 2.0**-m) * 2.0**e_max, "smallest normal": 2.0**e_min,
            "smallest subnormal": 2.0 ** (e_min - m)}


limits = {name: from_bits(*bits) for name, bits in FORMATS.items()}
print(f"{'':10}" + "".join(f"{key:>20}" for key in limits["float16"]))
for name, values in limits.items():
    print(f"{name:10}" + "".join(f"{value:20.4g}" for value in values.values()))


# %% [markdown]
# NumPy's `np.finfo` and PyTorch's `torch.finfo` report the same numbers
# (compared in the check below). What they mean in float16, one line
# each:

# %%
h = np.float16
print("1e-8 in float16:", h(1e-8), "| 6e-8:", h(6e-8), "= 2**-24:", h(6e-8) == 2.0**-24)
half, above = np.float32(2.0**-25), np.nextafter(np.float32(2.0**-25), np.float32(1))  # float32 values
print("in float16, 2**-25:", h(half), "| the next float32 above it:", h(above) / 2.0**-24, "x 2**-24",
      "| 3 * 2**-25:", h(3 * half) / 2.0**-23, "x 2**-23")
print("1e-5 is subnormal:", h(1e-5) < np.finfo(h).smallest_normal, "| stored as", float(h(1e-5)))
with np.errstate(over="ignore"):  # NumPy warns about the overflow; here it is the point
    print("65504 is the largest:", h(65504), "| 65519 rounds down:", h(65519), "| 65520:", h(65520))
one, two = np.array([1.0, 2.0], dtype=h).view(np.uint16)  # the bit patterns, as integers
print("float16 values in [1, 2):", two - one)


# %% [markdown]
# The bit patterns of positive floats count up in the same order as the
# numbers, so the float16 values from 1 up to 2 are the $2^{10} = 1024$
# patterns in between: one per mantissa value. Every interval
# $[2^k, 2^{k+1})$ holds 1,024 of them, so the gap between neighbours, the
# **ulp** (unit in the last place), doubles with each power of two: it is
# proportional to the magnitude, a constant *relative* precision of about
# $2^{-11} \approx 0.05\%$. Below the smallest normal number the gap stops
# shrinking: the subnormals are evenly spaced, $2^{-24}$ apart, and their
# relative precision falls off until the last one, $2^{-24}$ itself.

# %% tags=["hide-input"]
def ulp_bfloat16(x):
    """bfloat16's gap above x > 0 from its definition: 2**(exponent - 7), the exponent at least -126."""
    return 2.0 ** (np.maximum(np.floor(np.log2(x)), -126) - 7)


def spacing_picture():
    x = np.logspace(-9, 5.2, 3000)
    fig, axis = plt.subplots(figsize=(8, 4.6))
    x16 = x[x <= 65504]
    axis.loglog(x16, np.spacing(x16.astype(np.float16)).astype(float), label="float16")
    axis.loglog(x, ulp_bfloat16(x), label="bfloat16 (8 exponent, 7 mantissa bits)", lw=1)
    axis.loglog(x, np.spacing(x.astype(np.float32)).astype(float), label="float32")
    marks = [(2.0**-24, "smallest subnormal\n2^-24"), (2.0**-14, "smallest normal\n2^-14"), (65504, "max\n65504")]
    for value, _ in marks:
        axis.axvline(value, color="0.5", lw=0.8, ls="--")
    top = axis.secondary_xaxis("top")  # the marks named above the plot, where no line runs
    top.set_xticks([value for value, _ in marks], [text for _, text in marks], fontsize=8, color="0.3")
    top.minorticks_off()
    axis.axvspan(1e-9, 2.0**-25, color="C3", alpha=0.12, label="float16 rounds to 0")
    axis.set(xlabel="|x|", ylabel="gap to the next number (ulp)", ylim=(1e-16, 1e2),
             title="spacing of the three formats: constant relative precision, then subnormals, then inf")
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below: no line under it
    fig.tight_layout()
    plt.show()


spacing_picture()

# %% [markdown]
# The three lines are straight where the numbers are normal: gap
# $\approx |x| \cdot 2^{-m}$, so float16's line lies $2^{13}$ above
# float32's and bfloat16's $2^{3}$ above float16's. float16's line ends at
# both sides: on the left at $2^{-24}$, on the right at 65,504. A number
# rounds to the nearest float16 and, exactly halfway, to the one whose last
# bit is 0 ("round half to even"): $2^{-25}$ lies halfway between 0 and
# $2^{-24}$ and becomes 0, anything above it becomes $2^{-24}$ or more, and
# $3 \cdot 2^{-25}$, halfway between $2^{-24}$ and $2^{-23}$, becomes
# $2^{-23}$ (the second line of the output above). bfloat16 reaches as far
# as float32 both ways; that is why it needs no loss scaling (step 62), at
# the price of three fewer mantissa bits.
#
# ## Three ways float16 arithmetic goes wrong
#
# **Absorption.** $1 + 10^{-4}$ is $1$: the gap above 1 is
# $2^{-10} \approx 9.8 \times 10^{-4}$, and anything under half of it
# rounds away. **Stalled sums.** A running sum of 0.001s in float16
# grows until the gap at the sum is more than twice 0.001, then stops
# for good. **Overflow.** An activation of 300 squared is 90,000: inf.

# %%
print("1 + 1e-4 == 1 in float16:", h(1) + h(1e-4) == h(1))

tinypytorch.manual_seed(0)
with tinypytorch.no_grad():
    step, total = tinypytorch.tensor(0.001).half(), tinypytorch.tensor(0.0).half()
    sums = []
    for _ in range(6000):
        total = total + step
        sums.append(total.item())
sums = np.array(sums)
stall = int(np.argmax(np.diff(sums) == 0)) + 1  # the first addition that changed nothing
print(f"the float16 sum stops at {sums[stall]} after {stall} additions of 0.001 "
      f"(exactly: {stall * 0.001:.3f})")
print("the gap at 4 is", np.spacing(h(4)), "and half of it", np.spacing(h(4)) / 2, "> 0.001")

activation = tinypytorch.tensor([300.0]).half()
with np.errstate(over="ignore"):
    print("300 * 300 in float16:", (activation * activation).item())


# %% tags=["hide-input"]
def running_sum_picture(sums):
    n = np.arange(1, len(sums) + 1)
    exact = n * 0.001
    float32 = np.cumsum(np.full(len(sums), 0.001, dtype=np.float32), dtype=np.float32)
    fig, axis = plt.subplots(figsize=(8, 3.2))
    axis.plot(n, exact, "k--", lw=1, label="exact: n x 0.001")
    axis.plot(n, float32, color="C2", lw=3, alpha=0.5, label="float32")
    axis.plot(n, sums, color="C0", label="float16")
    for level in (1, 2, 4):
        axis.axhline(level, color="0.7", lw=0.7)
    axis.text(4300, 3.75, "gap at 4 is 2^-8 = 0.0039:\nadding 0.001 rounds back to 4", fontsize=8, va="top")
    axis.text(2600, 1.1, "between 2 and 4 each 0.001\nrounds up to a full gap 0.00195", fontsize=8)
    axis.set(xlabel="number of additions", ylabel="running sum", title="summing 0.001 again and again")
    axis.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.show()


running_sum_picture(sums)

# %% [markdown]
# The float16 sum is not even right before it stalls: between 1 and 2 it
# adds $2^{-10} \approx 0.00098$ per step, between 2 and 4 a full gap
# $2^{-9} \approx 0.00195$ (0.001 is just over half of it, so it rounds up),
# and at 4 it stops. Sums of many small terms (means, norms, the sums inside
# a matrix product) must therefore be accumulated in a wider format.
# PyTorch's reductions over float16 add in float32 and round once, along any
# dimension. NumPy's `mean` does too; its `sum` does so only along the axis
# whose elements lie next to each other in memory (the last one of a
# C-ordered array). Along any other axis NumPy adds one slice at a time into
# the float16 result, rounding each addition, and stalls as the running sum
# did (the first line of the output below). This step makes the package's
# mean squared error add in float32: it used to add the squares in float16
# and divide afterwards, so on 4,096 outputs of size 8 the sum overflowed
# and the loss was inf. Its backward now also rounds in PyTorch's order
# ($\frac{2}{N}$ times the difference, then times the incoming gradient),
# which matters when each product is rounded to float16:

# %%
show_code(MeanSquaredError)

# %%
column = np.full((5000, 3), 0.001, h)  # 5000 rows, each of three 0.001s
print("5000 x 0.001 by NumPy: sum down the rows", column.sum(axis=0)[0],
      "| along a row of the transpose", column.T.copy().sum(axis=1)[0],
      "| mean x 5000", column.mean(axis=0)[0] * np.float32(5000))
outputs = Variable((8 * np.random.default_rng(0).normal(size=(512, 8))).astype(h))
with np.errstate(over="ignore"):
    squares = (outputs.data * outputs.data).sum(axis=0).sum()  # along the rows: NumPy adds in float16
print("squares summed in float16:", squares,
      "| MSELoss in float16:", nn.MSELoss()(outputs, Variable(np.zeros((512, 8), h))).item())


# %% [markdown]
# ## Gradients that underflow
#
# The third failure is the one that makes float16 training go silently
# wrong. Gradients are small numbers: a loss averaged over a batch gives
# each output the factor $2/N$, and every layer on the way down
# multiplies by weights below one. Here a three-layer MLP on a fixed batch
# of 512 inputs, with 8 outputs each, and a mean squared error that counts
# as one term of a larger objective, weighted $2^{-12}$. Its weights,
# inputs and targets are rounded to float16 once, so that both copies
# start from the very same numbers (float16 values are exact in float32);
# each copy then runs forward and backward in its own format.

# %%
BATCH, WEIGHT = 512, 2.0**-12
rng = np.random.default_rng(0)
inputs, targets = rng.normal(size=(BATCH, 32)).astype(h), rng.normal(size=(BATCH, 8)).astype(h)


def mlp(dtype):
    """The same weights every time, rounded to float16, held in `dtype`."""
    tinypytorch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    for param in model.parameters():
        param.data = param.data.astype(h).astype(dtype)
    return model


def gradients(dtype, scale=1.0):
    """Each parameter's gradient of WEIGHT * MSE, computed in `dtype`, the loss times `scale` first."""
    model = mlp(dtype)
    loss = nn.MSELoss()(model(Variable(inputs.astype(dtype))), Variable(targets.astype(dtype)))
    (loss * (WEIGHT * scale)).backward()
    return {name: param.grad.data for name, param in model.named_parameters()}


def flushed(grads16, grads32):
    """Per parameter: the share of entries that are 0 in float16 but not in float32."""
    return {name: np.mean(grads16[name][grads32[name] != 0] == 0) for name in grads32}


g32, g16 = gradients(np.float32), gradients(np.float16)
for name, share in flushed(g16, g32).items():
    print(f"{name:9} {g32[name].size:5} entries, {share:6.1%} flushed to zero in float16")


# %% [markdown]
# More than a quarter of the first layer's weight gradients are exactly
# zero in float16, though none is in float32: those weights would not
# move at all in this step. Each panel below is the histogram of
# $\log_2 |g|$ of one layer's float32 gradients, red where float16 gave
# 0; anything at or below $2^{-25}$ (half the smallest subnormal) would
# round to zero in float16. Yet most of the red lies to the right of that
# line: those gradients are large enough for float16, and still lost.

# %% tags=["hide-input"]
def histogram_picture(grads32, grads16, title):
    names = [n for n in grads32 if n.endswith("weight")]
    fig, axes = plt.subplots(1, len(names), figsize=(8, 2.9), sharey=True)
    bins = np.arange(-38, -3, 1.0)
    for axis, name in zip(axes, names):
        nonzero = grads32[name] != 0
        logs = np.log2(np.abs(grads32[name][nonzero]))
        lost = grads16[name][nonzero] == 0
        axis.hist(logs[~lost], bins=bins, color="C0", label="kept in float16")
        axis.hist(logs[lost], bins=bins, color="C3", label="flushed to 0 in float16")
        axis.axvline(-25, color="k", lw=1, label="2^-25: rounds to 0")
        axis.axvline(-14, color="k", lw=1, ls="--", label="2^-14: subnormal below")
        axis.set(title=f"{name}: {lost.mean():.0%} flushed", xlabel="log2 |gradient| (float32)")
    axes[0].set_ylabel("entries")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)  # under the panels
    plt.show()


histogram_picture(g32, g16, "each layer's weight gradients in float32, and what float16 keeps")


# %% [markdown]
# They are lost before the sum. A weight's gradient is a sum over the batch,
# $\delta^\top x$: $\delta$, the gradient at the layer's output, has one row
# per sample, and $x$ is the layer's input. Backward computes $\delta$
# first, in float16, and only then does the matrix product add up its 512
# rows. Each row holds one sample's share, typically far smaller than the
# sum. The cell counts the flushed entries above $2^{-25}$, and, per layer,
# the entries of $\delta$ that are zero in float16 but not in float32:

# %%
def output_gradients(dtype):
    """Each Linear's delta: the gradient of the loss at its output, one row per sample, in `dtype`."""
    model, deltas = mlp(dtype), {}
    for index in (0, 2, 4):  # a hook that keeps grad_output, the gradient at the module's output
        model[index].register_full_backward_hook(
            lambda module, grad_in, grad_out, index=index: deltas.update({index: grad_out[0].data.copy()}))
    loss = nn.MSELoss()(model(Variable(inputs.astype(dtype))), Variable(targets.astype(dtype)))
    (loss * WEIGHT).backward()
    return deltas


flushed_values = np.concatenate([np.abs(g32[n][(g16[n] == 0) & (g32[n] != 0)]) for n in g32])  # in float32
print(f"flushed: {flushed_values.size} entries, {np.sum(flushed_values > 2.0**-25)} of them above 2^-25, "
      f"the largest 2^{np.log2(flushed_values.max()):.0f}")
d32, d16 = output_gradients(np.float32), output_gradients(np.float16)
for index in sorted(d32):
    nonzero = d32[index] != 0
    print(f"delta at layer {index} ({BATCH} x {d32[index].shape[1]:2}): "
          f"{np.mean(d16[index][nonzero] == 0):4.0%} zero in float16, "
          f"median 2^{np.median(np.log2(np.abs(d32[index][nonzero]))):.0f} in float32")


# %% [markdown]
# At the first layer nearly every sample's share is zero before the sum (the
# output above): what float16 adds up is the few that survived, each rounded
# to a multiple of $2^{-24}$, and that is often 0, or cancels to less than
# $2^{-25}$. The nearer a layer is to the input, the smaller its samples'
# shares, and the more of its gradients are lost. The entries that survive
# below $2^{-14}$ are subnormals, with fewer than 11 significant bits.
#
# (The only Python numbers in this computation are powers of two, exact
# in float16: $2/4096$, $2^{-12}$, and the $2^{10}$ below. A number such
# as 0.1 is rounded to float16 first by NumPy, while PyTorch multiplies
# in float32 and rounds once; the two can then differ in the last bit.)
#
# ## A preview: scale the loss
#
# Every gradient is linear in the loss: multiply the loss by $2^{10}$
# before backward, and every gradient is $2^{10}$ times larger, shifted
# ten bins to the right in the histogram, clear of the zero threshold.
# Dividing them by $2^{10}$ afterwards, in float32, gives the gradients
# back; multiplying by a power of two changes only the exponent, so no
# mantissa bit is lost on the way.

# %%
SCALE = 2.0**10
scaled = gradients(np.float16, scale=SCALE)
unscaled = {name: g.astype(np.float32) / SCALE for name, g in scaled.items()}
for name in g32:
    nonzero = g32[name] != 0
    lost, before = np.sum(unscaled[name][nonzero] == 0), np.sum(g16[name][nonzero] == 0)
    error = np.median(np.abs(unscaled[name] - g32[name])[nonzero] / np.abs(g32[name][nonzero]))
    print(f"{name:9} entries flushed: {lost} (was {before:3}), median relative error {below(error, 0.01)}")
still = np.concatenate([np.abs(g32[n][(unscaled[n] == 0) & (g32[n] != 0)]) for n in g32])
print(f"still flushed: {len(still)} entry, float32 value 2^{np.log2(still.max()):.0f}")


# %% [markdown]
# All but one of the 1,201 lost entries come back. The one left is
# about $2^{-34}$ in float32, nine powers of two below the edge: even scaled by
# $2^{10}$ it stays below $2^{-25}$ (exercise 3 finds the scale that
# saves it). What remains is float16's ordinary rounding, its relative
# precision $2^{-11} \approx 0.05\%$ per operation, and the forward pass
# has many. Too large a scale overflows instead
# (exercise 3): the scale must be large enough for the small gradients
# and small enough for the big ones. Steps 61 and 62 make this practical:
# **autocast** runs each operation in float16 only where that is safe
# (matrix products) and keeps reductions and losses in float32, with the
# weights themselves kept in float32; **GradScaler** scales the loss,
# unscales the gradients, and adjusts the scale as training goes, skipping
# any step whose gradients overflowed.
#
# ## Check against PyTorch
#
# `torch.finfo` against `np.finfo` and against the definition (bfloat16
# included, its spacing checked with `torch.nextafter`); float16's rounding
# near $2^{-25}$, and torch's float16 sum down the rows; then the same
# network in `torch.nn` in float16 and float32 with our weights loaded
# through its `load_state_dict`: every parameter's share of flushed
# entries, the flushed entries themselves, and the scaled-loss gradients.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)
TORCH_TYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def torch_gradients(dtype, scale=1.0):
    """torch's gradients of the same network: our float16 weights, held in torch's `dtype`."""
    twin = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dtype)
    twin.load_state_dict({key: torch.from_numpy(value.data) for key, value in mlp(h).state_dict().items()})
    x, t = torch.from_numpy(inputs).to(dtype), torch.from_numpy(targets).to(dtype)
    (torch.nn.functional.mse_loss(twin(x), t) * (WEIGHT * scale)).backward()
    return {name: param.grad.numpy().copy() for name, param in twin.named_parameters()}


def finfo_agrees(name):
    info, ours = torch.finfo(TORCH_TYPES[name]), limits[name]
    zero, one = torch.zeros(1, dtype=TORCH_TYPES[name]), torch.ones(1, dtype=TORCH_TYPES[name])
    smallest = torch.nextafter(zero, one).item()
    same = [info.eps == ours["eps"], info.max == ours["max"], info.smallest_normal == ours["smallest normal"],
            smallest == ours["smallest subnormal"]]
    if name != "bfloat16":
        numpy = np.finfo(name)
        same += [numpy.eps == info.eps, numpy.max == info.max, numpy.smallest_subnormal == smallest]
    return all(same)


def float16_steps(ours, theirs):
    """Element-wise: how many float16 gaps apart two float16 arrays are."""
    gap = np.spacing(np.maximum(np.abs(ours), np.abs(theirs))).astype(np.float32)
    return np.abs(ours.astype(np.float32) - theirs) / gap


def bfloat16_spacing_agrees():
    x = torch.logspace(-38, 38, 2000, dtype=torch.float64).to(torch.bfloat16)
    gap = torch.nextafter(x, torch.full_like(x, float("inf"))).double() - x.double()
    return np.array_equal(gap.numpy(), ulp_bfloat16(x.double().numpy()))


def rounding_and_sums_agree():
    """torch rounds float32 to float16 near 2^-25 as NumPy does, and sums float16 down the rows as NumPy sums
    along them: in float32, rounded once."""
    rounded = torch.tensor([half, above, 3 * half]).half().tolist()
    summed = torch.from_numpy(column).sum(dim=0)  # float16 in, float16 out
    return (rounded == [float(h(half)), float(h(above)), float(h(3 * half))] == [0.0, 2.0**-24, 2.0**-23]
            and summed.dtype == torch.float16 and np.array_equal(summed.numpy(), column.T.copy().sum(axis=1)))


# %%
assert all(finfo_agrees(name) for name in FORMATS) and bfloat16_spacing_agrees()
assert rounding_and_sums_agree()
t32, t16 = torch_gradients(torch.float32), torch_gradients(torch.float16)
theirs = flushed(t16, t32)
for name, share in flushed(g16, g32).items():
    # an entry may be 0 in one and 2^-24 in the other: summed in another order
    assert share == theirs[name], name
    assert np.all(np.abs(g16[name].astype(np.float32) - t16[name]) <= 2.0**-24), name
t_scaled = torch_gradients(torch.float16, scale=SCALE)
# torch's float16 matrix product adds in its own order, which depends on the CPU's kernels: some entries
# differ by a step or so (0.5 % here with AVX-512 kernels, 3 % with the plainest ones)
for name in scaled:
    assert float16_steps(scaled[name], t_scaled[name]).max() <= 4, name
print("finfo: float16 and float32 equal np.finfo's; "
      "all three equal their bit counts' (bfloat16's gaps too)")
print("float16 rounding near 2^-25 as NumPy's; torch's float16 sum down the rows as NumPy's along them")
print("flushed shares, 6 parameters:", ", ".join(f"{s:.1%}" for s in theirs.values()), "in both")
print("scaled-loss gradients: each at most 4 float16 steps from torch's")
print("PyTorch check passed: float16 limits and flushed shares equal torch's; scaled-loss gradients agree")

# %% [markdown]
# ## Recap
#
# - float16 has 5 exponent and 10 mantissa bits: 1,024 values in every
#   $[2^k, 2^{k+1})$, a gap of $2^{-10}$ at 1, nothing above 65,504 (inf),
#   subnormals below $2^{-14}$, and zero at $2^{-25}$ and below (round half
#   to even). bfloat16 has float32's range with 7 mantissa bits. `np.finfo`
#   and `torch.finfo` agree.
# - Rounding: small terms are absorbed ($1 + 10^{-4} = 1$), long sums
#   stall (0.001s stop at 4), products overflow ($300^2$). Reductions
#   must accumulate in float32: PyTorch's do, NumPy's `mean` does, its
#   `sum` only along the axis contiguous in memory; the package's MSE
#   loss now does, as PyTorch's does.
# - Backward in float16 flushes small gradients to exactly zero, most of
#   them because each sample's share underflows before the batch sum:
#   here more than a quarter of the first layer's entries, the same
#   entries in PyTorch.
# - Multiplying the loss by $2^{10}$ and the gradients by $2^{-10}$
#   afterwards recovers them: loss scaling, step 62, after autocast in
#   step 61.
#
# ## Exercises
#
# **1. Counting floats.** How many float16 values lie in $[0, 1)$? And in
# $[0, 2^{-14})$, the subnormals with zero? Count with the bit patterns.

# %% tags=["hide-cell"]
below_one = int(np.array(1.0, dtype=h).view(np.uint16))  # patterns 0 .. 0x3BFF are the numbers 0 <= x < 1
subnormal = int(np.array(2.0**-14, dtype=h).view(np.uint16))
print("float16 values in [0, 1):", below_one, "= 15 x 1024 | in [0, 2^-14):", subnormal, "= 1024")

# %% [markdown]
# **2. Summing in float16, well.** Kahan's compensated summation keeps
# the rounding error of each addition in a second float16 number and adds
# it back at the next step. Sum 6,000 times 0.001 that way in float16:
# where does it end?

# %% tags=["hide-cell"]
def kahan(term, count, dtype):
    total, carry = dtype(0), dtype(0)
    for _ in range(count):
        corrected = dtype(term) - carry
        new = total + corrected
        carry = (new - total) - corrected  # what the addition lost
        total = new
    return total


print("Kahan in float16:", kahan(0.001, 6000, h), "| plain float16:", sums[-1], "| exact: 6.0")

# %% [markdown]
# **3. How large a scale?** For scales $2^0, 2^1, \dots, 2^{14}$, count
# the gradient entries flushed to zero. What is the smallest scale that
# loses none? And how large could the scale grow before the largest
# gradient overflows past 65,504?

# %% tags=["hide-cell"]
reference = np.concatenate([g.ravel() for g in g32.values()])


def lost(scale):
    grads = np.concatenate([g.ravel() for g in gradients(np.float16, scale=scale).values()])
    return int(np.sum(grads[reference != 0] == 0))


counts = {k: lost(2.0**k) for k in range(15)}
print("log2(scale): entries flushed:", counts)
print("smallest scale losing none: 2^%d" % min(k for k, n in counts.items() if n == 0))
print("largest gradient 2^%.1f: overflow from a scale of about 2^%.1f"
      % (np.log2(np.abs(reference).max()), np.log2(65504 / np.abs(reference).max())))
