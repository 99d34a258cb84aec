"""Peak device memory of the RevNet stack, plain, √N-checkpointed and reversible: section 5 of bench/results/gpu.md.

    python bench/bench_gpu.py    # on a machine with an NVIDIA GPU (`make bench-gpu`)

The stack of networks.py (N AdditiveCoupling blocks on 1,024 features, a batch of 256, float32) at
depths N = 8 to 128, plain, in round(sqrt(N)) checkpointed segments (checkpoint_sequential,
use_reentrant=False) and reversible (ReversibleSequential), forward + backward, each parameter's
gradient let go as soon as it is complete, as in reversible.md. tinypytorch through CuPy's memory
pool (`tinypytorch.cuda.max_memory_allocated`); PyTorch, running the ports of ports.py, through
torch.cuda.reset_peak_memory_stats / max_memory_allocated. Targets: the reversible peak at N = 128
at most 1.1x the peak at N = 8, and at most 1.2x PyTorch CUDA's.
"""
import gc

import numpy as np
import torch

from tinypytorch import cuda

from memory_measures import gradients_dropped, torch_gradients_dropped
from networks import COUPLING_CONFIGURATIONS, batch_and_target, build_coupling_stack, loss_coupling_tinypytorch
from ports import coupling_output_torch, torch_coupling_twin
from speed_gpu import device_of_xp
from timing import collector_off
from writing import MiB, verdict


def coupling_workload(depth, width, batch, seed=0):
    """(net, x, target): the RevNet stack of networks.py (float32, on the CPU) with its batch and target."""
    net = build_coupling_stack(depth, width, np.float32, seed=seed)
    x, target = batch_and_target(batch, width, np.float32)
    return net, x, target


def peak_tinypytorch(net, x, target, configuration, xp):
    """The most device memory held during forward + backward, above what was held before, in bytes.

    net, x, target on the device of module `xp`; each parameter's gradient let go as soon as it is
    complete (memory_measures.gradients_dropped): the peak is what the activations take.
    """
    with gradients_dropped(net.params()), collector_off():
        with cuda.max_memory_allocated() as peak:
            loss = loss_coupling_tinypytorch(net, x, target, configuration)
            loss.backward()
            del loss
    net.cleargrads()
    return peak.bytes - peak.start


def loss_coupling_torch(twin, x, target, configuration):
    """ports.loss_coupling_torch with x and target tensors already on the device."""
    return torch.nn.functional.mse_loss(coupling_output_torch(twin, x, configuration), target)


def peak_torch(twin, x, target, configuration, device):
    """PyTorch's peak on CUDA `device`, as peak_tinypytorch's (its allocator's high-water mark)."""
    with torch_gradients_dropped(twin):
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        loss = loss_coupling_torch(twin, x, target, configuration)
        loss.backward()
        del loss
        torch.cuda.synchronize(device)
    twin.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated(device) - start


def _peaks(measure, net, x, target, where):
    """{configuration: measure(...)}, each after a warm-up pass (the pool's blocks and compiled kernels)."""
    peaks = {}
    for c in COUPLING_CONFIGURATIONS:
        measure(net, x, target, c, where)
        peaks[c] = measure(net, x, target, c, where)
    return peaks


def run_memory(s, xp, device):
    """{(depth, configuration): {"tinypytorch": peak bytes, "torch": peak bytes}}."""
    results = {}
    for depth in s["depths"]:
        net, x, target = coupling_workload(depth, s["width"], s["batch"])
        twin = torch_coupling_twin(net)  # from the CPU weights, before they move
        net.to(device_of_xp(xp))
        ours = _peaks(peak_tinypytorch, net, xp.asarray(x), xp.asarray(target), xp)
        del net  # one framework's network on the device at a time
        twin.to(device)
        theirs = _peaks(peak_torch, twin, torch.from_numpy(x).to(device), torch.from_numpy(target).to(device), device)
        del twin
        for c in COUPLING_CONFIGURATIONS:
            results[depth, c] = {"tinypytorch": ours[c], "torch": theirs[c]}
        print(f"memory: depth {depth}: " + ", ".join(
            f"{COUPLING_CONFIGURATIONS[c]} {ours[c] / MiB:.1f}/{theirs[c] / MiB:.1f}"
            for c in COUPLING_CONFIGURATIONS) + " MiB (tinypytorch/PyTorch)", flush=True)
    return results


def memory_section(memory, s, targets):
    """Section 5: the peaks at each depth in both frameworks, and the two targets."""
    depths = s["memory"]["depths"]
    lines = ["", "## 5. Peak device memory: plain, √N-checkpointed and reversible", "",
             "the RevNet stack of reversible.md (bench/networks.py): N AdditiveCoupling blocks on "
             f"{s['memory']['width']:,} features, "
             f"a batch of {s['memory']['batch']:,}, float32; forward + backward, each parameter's gradient let go "
             "as soon as it is complete; √N: checkpoint_sequential with round(√N) segments, use_reentrant=False. "
             "tinypytorch: "
             "CuPy's memory pool (`tinypytorch.cuda.max_memory_allocated`); PyTorch: "
             "`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, the ports of bench/ports.py. "
             "MiB above what was held before.", "",
             "| N | configuration | tinypytorch, MiB | PyTorch CUDA, MiB | tinypytorch / PyTorch |",
             "|---|---|---|---|---|"]
    for depth in depths:
        for c, label in COUPLING_CONFIGURATIONS.items():
            row = memory[depth, c]
            lines.append(f"| {depth} | {label} | {row['tinypytorch'] / MiB:.2f} | {row['torch'] / MiB:.2f} | "
                         f"{row['tinypytorch'] / row['torch']:.2f} |")
    first, last = depths[0], depths[-1]
    growth = memory[last, "reversible"]["tinypytorch"] / memory[first, "reversible"]["tinypytorch"]
    plain_growth = memory[last, "plain"]["tinypytorch"] / memory[first, "plain"]["tinypytorch"]
    versus = {d: memory[d, "reversible"]["tinypytorch"] / memory[d, "reversible"]["torch"] for d in depths}
    targets["reversible flat"] = growth <= 1.1
    targets["reversible vs PyTorch"] = all(r <= 1.2 for r in versus.values())
    lines += ["", f"Target: the reversible peak at N = {last} at most 1.1× the peak at N = {first}, tinypytorch: "
              f"{verdict(targets['reversible flat'])} ({growth:.3f}; the plain run's grows {plain_growth:.1f}×).",
              f"Target: the reversible peak at most 1.2× PyTorch CUDA's at every depth: "
              f"{verdict(targets['reversible vs PyTorch'])} (" + ", ".join(
                  f"N = {d}: {r:.2f}" for d, r in versus.items()) + ")."]
    return lines


COLOURS = {"plain": "tab:blue", "sqrt": "tab:orange", "reversible": "tab:green"}


def plot_memory(axis, memory, depths):
    """The peaks against depth, both frameworks, every configuration."""
    for c, label in COUPLING_CONFIGURATIONS.items():
        for framework, style, marker, who in [("tinypytorch", "-", "o", "tinypytorch"),
                                              ("torch", "--", "x", "PyTorch")]:
            axis.plot(depths, [memory[d, c][framework] / MiB for d in depths], style, marker=marker,
                      color=COLOURS[c], label=f"{who}, {label}")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log", base=2)
    axis.set_xticks(depths, [str(d) for d in depths])
    axis.set_xlabel("depth N (coupling blocks)")
    axis.set_ylabel("MiB")
    axis.set_title("peak device memory, forward + backward")
    axis.grid(True, alpha=0.3, which="both")
    axis.legend(fontsize=7)
