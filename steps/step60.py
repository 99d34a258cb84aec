# %% [markdown]
# # Step 60: Why lower precision, and what breaks
#
# A float16 number takes two bytes instead of float32's four: half the
# memory for every weight, activation and gradient, and on GPUs with
# tensor cores many times the arithmetic speed. Of what it gives up,
# range is what breaks training silently. With 5 exponent bits, the
# smallest float16 above zero is $2^{-24} \approx 6 \times 10^{-8}$, and a network's
# gradients are small numbers: in float16 a large share of them become
# exactly zero, and those weights do not learn. This step measures that
# share in a small network, layer by layer (PyTorch flushes the very same
# entries), explains it by the format's range, and brings the gradients
# back by scaling the loss: the idea behind steps 61 and 62.

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
# ## float16's range
#
# A binary format with $e$ exponent bits and $m$ mantissa bits stores
# $\pm 1.f \times 2^{E}$, with $E$ from $E_\min = 2 - 2^{e-1}$ up to
# $E_\max = 2^{e-1}-1$: its largest number is
# $(2 - 2^{-m})\, 2^{E_\max}$, its smallest normal one $2^{E_\min}$. Below
# that the leading 1 is dropped ("subnormal" numbers, with fewer
# significant bits), down to $2^{E_\min - m}$. float16 has $e = 5$,
# $m = 10$; bfloat16 keeps float32's 8 exponent bits, and with them
# float32's range (NumPy has no bfloat16, so its row comes from the
# definition alone).

# %%
FORMATS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23)}  # (exponent bits, mantissa bits)


def from_bits(e, m):
    """The format's range from its bit counts alone."""
    e_max = 2 ** (e - 1) - 1
    e_min = 1 - e_max
    return {"max": (2 - 2.0**-m) * 2.0**e_max, "smallest normal": 2.0**e_min,
            "smallest subnormal": 2.0 ** (e_min - m)}


limits = {name: from_bits(*bits) for name, bits in FORMATS.items()}
print(f"{'':10}" + "".join(f"{key:>20}" for key in limits["float16"]))
for name, values in limits.items():
    print(f"{name:10}" + "".join(f"{value:20.4g}" for value in values.values()))


# %% [markdown]
# A number rounds to the nearest float16 and, exactly halfway, to the one
# whose last bit is 0. $2^{-25}$ lies halfway between 0 and $2^{-24}$:
# it becomes 0, and the next float32 above it becomes $2^{-24}$. At the
# other end, 65504 is the largest float16 and 65520 rounds to inf.

# %%
h = np.float16
half, above = np.float32(2.0**-25), np.nextafter(np.float32(2.0**-25), np.float32(1))  # float32 values
print("in float16: 1e-8 ->", h(1e-8), "| 2**-25 ->", h(half), "| the next float32 above 2**-25 ->",
      h(above) / 2.0**-24, "x 2**-24")
with np.errstate(over="ignore"):  # NumPy warns about the overflow; here it is the point
    print("the largest float16:", float(np.finfo(h).max), "| 65520 ->", h(65520))


# %% [markdown]
# ## Gradients that underflow
#
# Gradients are small: a loss averaged over a batch gives each output the
# factor $2/N$, and every layer on the way down multiplies by weights
# below one. Here a three-layer MLP on a fixed batch of 512 inputs, with
# 8 outputs each, and a mean squared error that counts as one term of a
# larger objective, weighted $2^{-12}$. Its weights, inputs and targets
# are rounded to float16 once, so that both copies start from the very
# same numbers; each copy then runs forward and backward in its own
# format.
#
# The loss itself must not go wrong in float16: a sum of many squares
# overflows or stalls there (exercise 2). So the package's mean squared
# error takes NumPy's `mean`, which adds float16 in float32 and rounds
# once, as PyTorch does; and its backward multiplies in PyTorch's order,
# $\frac{2}{N}$ times the difference, then times the incoming gradient,
# so that each float16 rounding is PyTorch's:

# %%
show_code(MeanSquaredError)

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
    # the factors here (2/N, WEIGHT, scale) are powers of two, exact in float16: a Python number such as 0.1
    # meeting float16 is rounded to float16 first in the package (NumPy); PyTorch multiplies in float32 and
    # rounds once
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
# move at all. Each panel below is the histogram of $\log_2 |g|$ of one
# layer's float32 gradients, red where float16 gave 0. Anything at or
# below $2^{-25}$ would round to zero; yet most of the red lies to the
# right of that line.

# %% tags=["hide-input"]
def histogram_picture(grads32, grads16, title, xlabel="log2 |gradient| (float32)"):
    names = [n for n in grads32 if n.endswith("weight")]
    fig, axes = plt.subplots(1, len(names), figsize=(8, 2.9), sharey=True)
    bins = np.arange(-38, 7, 1.0)
    for axis, name in zip(axes, names):
        nonzero = grads32[name] != 0
        logs = np.log2(np.abs(grads32[name][nonzero]))
        lost = grads16[name][nonzero] == 0
        axis.hist(logs[~lost], bins=bins, color="C0", label="kept in float16")
        axis.hist(logs[lost], bins=bins, color="C3", label="flushed to 0 in float16")
        axis.axvline(-25, color="k", lw=1, label="2^-25: rounds to 0")
        axis.axvline(-14, color="k", lw=1, ls="--", label="2^-14: subnormal below")
        axis.set(title=f"{name}: {lost.sum()} flushed", xlabel=xlabel)
    axes[0].set_ylabel("entries")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)  # under the panels
    plt.show()


histogram_picture(g32, g16, "each layer's weight gradients in float32, and what float16 keeps")


# %% [markdown]
# They are lost before the sum. A weight's gradient is a sum over the
# batch, $\delta^\top x$: $\delta$, the gradient at the layer's output,
# has one row per sample, and $x$ is the layer's input. Backward computes
# $\delta$ first, in float16, and only then does the matrix product add up
# its 512 rows, one sample's share each, typically far smaller than their
# sum. The cell counts the flushed entries above $2^{-25}$ and, per layer, the
# entries of $\delta$ that are zero in float16 but not in float32:

# %%
def output_gradients(dtype, scale=1.0):
    """Each Linear's delta (the gradient at its output, one row per sample) and its input x, in `dtype`."""
    model, deltas, xs = mlp(dtype), {}, {}
    for index in (0, 2, 4):  # hooks that keep the module's input and the gradient at its output
        model[index].register_forward_hook(
            lambda module, args, out, index=index: xs.update({index: args[0].data}))
        model[index].register_full_backward_hook(
            lambda module, grad_in, grad_out, index=index: deltas.update({index: grad_out[0].data.copy()}))
    loss = nn.MSELoss()(model(Variable(inputs.astype(dtype))), Variable(targets.astype(dtype)))
    (loss * (WEIGHT * scale)).backward()
    return deltas, xs


flushed_values = np.concatenate([np.abs(g32[n][(g16[n] == 0) & (g32[n] != 0)]) for n in g32])  # in float32
print(f"flushed: {flushed_values.size} entries, {np.sum(flushed_values > 2.0**-25)} of them above 2^-25")
(d32, x32), (d16, _) = output_gradients(np.float32), output_gradients(np.float16)
for index in sorted(d32):
    nonzero = d32[index] != 0
    print(f"delta at layer {index} ({BATCH} x {d32[index].shape[1]:2}): "
          f"{np.mean(d16[index][nonzero] == 0):4.0%} zero in float16, "
          f"median 2^{np.median(np.log2(np.abs(d32[index][nonzero]))):.0f} in float32")


# %% [markdown]
# At the first layer nearly every sample's share is zero before the sum:
# what float16 adds up is the few that survived, and that is often 0. The
# nearer a layer is to the input, the smaller its samples' shares, and
# the more of its gradients are lost.
#
# ## Scale the loss
#
# Every gradient is linear in the loss: multiply the loss by $2^{10}$
# before backward, and every gradient, every $\delta$ with it, is $2^{10}$
# times larger: ten bins to the right in the histogram (the second
# picture below), clear of the $2^{-25}$ line. Dividing by $2^{10}$ afterwards, in float32, gives the gradients
# back; a power of two changes only the exponent, so no mantissa bit is
# lost on the way.

# %%
SCALE = 2.0**10
scaled = gradients(np.float16, scale=SCALE)
unscaled = {name: g.astype(np.float32) / SCALE for name, g in scaled.items()}
for name in g32:
    nonzero = g32[name] != 0
    lost, before = np.sum(unscaled[name][nonzero] == 0), np.sum(g16[name][nonzero] == 0)
    error = np.median(np.abs(unscaled[name] - g32[name])[nonzero] / np.abs(g32[name][nonzero]))
    print(f"{name:9} entries flushed: {lost} (was {before:3}), median relative error {below(error, 0.01)}")
still = [(n, tuple(i)) for n in g32 for i in np.argwhere((unscaled[n] == 0) & (g32[n] != 0))]
(entry, (row, col)), = still  # one weight's entry: the sum of its 512 samples' shares
shares = d32[int(entry[0])][:, row] * x32[int(entry[0])][:, col]
size = np.log2(abs(g32[entry][row, col]))
print(f"still flushed: {len(still)} entry, {entry}[{row}, {col}], 2^{size:.0f} in float32; "
      f"its shares add up to 2^{np.log2(np.abs(shares).sum()):.0f} without their signs")

# %% tags=["hide-input"]
histogram_picture({n: g * SCALE for n, g in g32.items()}, scaled,
                  "the same gradients with the loss scaled by 2^10, and what float16 keeps",
                  xlabel="log2 |2^10 gradient| (float32)")


# %% [markdown]
# All but one of the 1,201 lost entries come back. The one left is a sum
# of shares that nearly cancel: $2^{-34}$, from shares whose sizes add up
# to $2^{-23}$. float16 holds every value to about $2^{-11}$ of its size,
# so the shares' errors together can be as large as the sum itself: here
# the scaled sum lands below $2^{-25}$. Exercise 3 finds the scale that
# saves it, and the scale at which the largest gradient would overflow:
# the scale must be large enough for the small gradients and small enough
# for the big ones. Steps 61 and 62 make this practical: **autocast**
# runs each operation in float16 only where that is safe, and
# **GradScaler** scales the loss, unscales the gradients, and adjusts the
# scale as training goes, skipping any step whose gradients overflowed.
# bfloat16, with float32's range, needs no loss scaling.
#
# ## Check against PyTorch
#
# `torch.finfo` against `np.finfo` and against the definition (bfloat16
# included, its smallest subnormal found with `torch.nextafter`);
# float16's rounding near $2^{-25}$ and 65504; then the same network in
# `torch.nn` in float16 and float32 with our weights loaded through its
# `load_state_dict`: every parameter's share of flushed entries, the
# flushed entries themselves, the zeros of each $\delta$, and the
# scaled-loss gradients.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)
TORCH_TYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def torch_twin(dtype):
    """torch's copy of the network: our float16 weights, held in torch's `dtype`."""
    twin = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dtype)
    twin.load_state_dict({key: torch.from_numpy(value.data) for key, value in mlp(h).state_dict().items()})
    return twin


def torch_gradients(dtype, scale=1.0):
    """torch's gradients of WEIGHT * MSE * scale, and each Linear's delta (the gradient at its output)."""
    twin, deltas = torch_twin(dtype), {}

    def keep_delta(index):
        def hook(module, args, out):  # a forward hook that returns nothing leaves the output as it is
            out.register_hook(lambda grad: deltas.update({index: grad.numpy().copy()}))
        return hook

    for index in (0, 2, 4):
        twin[index].register_forward_hook(keep_delta(index))
    x, t = torch.from_numpy(inputs).to(dtype), torch.from_numpy(targets).to(dtype)
    (torch.nn.functional.mse_loss(twin(x), t) * (WEIGHT * scale)).backward()
    return {name: param.grad.numpy().copy() for name, param in twin.named_parameters()}, deltas


def finfo_agrees(name):
    info, ours = torch.finfo(TORCH_TYPES[name]), limits[name]
    zero, one = torch.zeros(1, dtype=TORCH_TYPES[name]), torch.ones(1, dtype=TORCH_TYPES[name])
    smallest = torch.nextafter(zero, one).item()
    same = [info.max == ours["max"], info.smallest_normal == ours["smallest normal"],
            smallest == ours["smallest subnormal"]]
    if name != "bfloat16":
        numpy = np.finfo(name)
        same += [numpy.max == info.max, numpy.smallest_normal == info.smallest_normal,
                 numpy.smallest_subnormal == smallest]
    return all(same)


def rounding_agrees():
    """torch rounds float32 to float16 near 2^-25 and near 65504 as NumPy does."""
    rounded = torch.tensor([half, above, 65519.0, 65520.0]).half().tolist()
    return rounded == [0.0, 2.0**-24, 65504.0, float("inf")] and float(h(65519)) == 65504.0


def float16_steps(ours, theirs):
    """Element-wise: how many float16 gaps apart two float16 arrays are."""
    gap = np.spacing(np.maximum(np.abs(ours), np.abs(theirs))).astype(np.float32)
    return np.abs(ours.astype(np.float32) - theirs) / gap


# %%
assert all(finfo_agrees(name) for name in FORMATS) and rounding_agrees()
(t32, t_d32), (t16, t_d16) = torch_gradients(torch.float32), torch_gradients(torch.float16)
theirs = flushed(t16, t32)
for name, share in flushed(g16, g32).items():
    assert share == theirs[name], name
    # an entry may be 0 in one and 2^-24 in the other: summed in another order
    assert np.all(np.abs(g16[name].astype(np.float32) - t16[name]) <= 2.0**-24), name
zeros = {index: np.mean(t_d16[index][t_d32[index] != 0] == 0) for index in t_d32}
assert all(zeros[index] == np.mean(d16[index][d32[index] != 0] == 0) for index in d32), zeros
t_scaled, _ = torch_gradients(torch.float16, scale=SCALE)
# torch's float16 matrix product adds in its own order, which depends on the CPU's kernels: some entries
# differ by a step or so (0.5 % here with AVX-512 kernels, 3 % with the plainest ones)
for name in scaled:
    assert float16_steps(scaled[name], t_scaled[name]).max() <= 4, name
print("range: float16 and float32 equal np.finfo's; all three equal their bit counts'")
print("float16 rounding near 2^-25 and 65504 as NumPy's")
print("flushed shares, 6 parameters:", ", ".join(f"{s:.1%}" for s in theirs.values()), "in both")
print("zeros of delta at layers 0, 2, 4:", ", ".join(f"{zeros[i]:.0%}" for i in sorted(zeros)), "in both")
print("scaled-loss gradients: each at most 4 float16 steps from torch's")
print("PyTorch check passed: float16's range and the flushed gradients equal torch's; "
      "scaled-loss gradients agree")

# %% [markdown]
# ## Recap
#
# - float16 (5 exponent, 10 mantissa bits) ends at 65504 above and
#   $2^{-24}$ below: subnormals below $2^{-14}$, zero at $2^{-25}$ and
#   below. bfloat16 has float32's range.
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
# **1. The gap after 1.** Range is one half of a format; the other is
# spacing. How many float16 values lie in $[1, 2)$ (count the bit
# patterns)? What is the gap after 1 (the machine epsilon) in float16,
# bfloat16 and float32, and what is $1 + 10^{-4}$ in float16?

# %% tags=["hide-cell"]
one, two = np.array([1.0, 2.0], dtype=h).view(np.uint16)  # bit patterns of positive floats count up in order
eps = {name: 2.0**-m for name, (e, m) in FORMATS.items()}  # 2^-m: one step of the last mantissa bit
print("float16 values in [1, 2):", two - one, "| eps:", eps)
print("bfloat16's eps / float16's:", eps["bfloat16"] / eps["float16"])
print("1 + 1e-4 in float16:", h(1) + h(1e-4), "(the gap after 1 is 2^-10; half of it and less rounds away)")

# %% [markdown]
# **2. Sums in float16.** Add 0.001 to a float16 running sum 6,000
# times: where does it stop, and why? Then sum a column of 5,000 float16
# 0.001s with NumPy, down the rows (`sum(axis=0)`) and along a row of
# the transpose, and with PyTorch.

# %% tags=["hide-cell"]
total, changed = h(0), 0
for _ in range(6000):
    total, before = total + h(0.001), total
    changed += bool(total != before)
print(f"6000 additions of 0.001 in float16: the sum stops at {total} after {changed}; the gap at 4 is "
      f"{np.spacing(h(4))}, and 0.001 is less than half of it, so it rounds away")
# NumPy adds float16 in float32 along the axis whose elements lie next to each other in memory (and in its
# mean); down the rows of a C-ordered array it adds one row at a time into the float16 result, rounding each
# addition. torch adds in float32 along any dimension and rounds once.
column = np.full((5000, 3), 0.001, h)  # 5000 rows of three 0.001s
print(f"{len(column)} x 0.001 in float16: NumPy down the rows", column.sum(axis=0)[0],
      "| NumPy along a row of the transpose", column.T.copy().sum(axis=1)[0],
      "| torch down the rows", torch.from_numpy(column).sum(dim=0)[0].item())

# %% [markdown]
# **3. How large a scale?** For scales $2^0, 2^1, \dots, 2^{14}$, count
# the gradient entries flushed to zero. What is the smallest scale that
# loses none? And how large could the scale grow before the largest
# gradient overflows past 65504?

# %% tags=["hide-cell"]
reference = np.concatenate([g.ravel() for g in g32.values()])


def lost(scale):
    grads = np.concatenate([g.ravel() for g in gradients(np.float16, scale=scale).values()])
    return int(np.sum(grads[reference != 0] == 0))


counts = {k: lost(2.0**k) for k in range(15)}
print("log2(scale): entries flushed:", counts)
largest = np.abs(reference).max()
print(f"smallest scale losing none: 2^{min(k for k, n in counts.items() if n == 0)}")
print(f"largest gradient 2^{np.log2(largest):.1f}: overflow from a scale of about 2^{np.log2(65504 / largest):.1f}")
