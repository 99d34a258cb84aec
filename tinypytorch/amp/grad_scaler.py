"""Dynamic loss scaling, PyTorch's `torch.amp.GradScaler` (step 62).

float16 has few exponent bits: gradients below about 6e-8 flush to zero. Multiplying the loss by a
scale S makes every gradient S times larger (the chain rule is linear), lifting small gradients out
of the underflow range; before the optimizer uses them they are divided by S again ("unscaled").

    scaler = GradScaler("cpu")
    scaler.scale(loss).backward()   # gradients S times too large
    scaler.unscale_(optimizer)      # optional: true gradients now, e.g. for clip_grad_norm_
    scaler.step(optimizer)          # unscales if needed; skips the step if a gradient is inf or NaN
    scaler.update()                 # inf/NaN seen: S *= backoff_factor; growth_interval clean steps: S *= growth

The scale is dynamic because the best S is the largest one that does not overflow, and that changes
during training. The arithmetic is PyTorch's: the scale is a float32, its reciprocal is taken in
float64 and rounded to float32, and a new scale is the float32 scale times a float64 factor, rounded.
"""
import warnings
from enum import Enum

import numpy as np

from tinypytorch import cuda, inplace
from tinypytorch import functions as F
from tinypytorch.core import Variable
from tinypytorch.cuda import as_numpy, get_array_module
from tinypytorch.grad_mode import no_grad

__all__ = ["OptState", "GradScaler"]


class OptState(Enum):  # step 62
    """Where one optimizer is in the current iteration: READY -> UNSCALED -> STEPPED, READY again after update()."""
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh_state():
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:  # step 62
    """Scale the loss, unscale the gradients, skip steps with inf/NaN gradients and adapt the scale.

    `device` is the device type of the gradients ("cuda" or "cpu"); as in PyTorch, a "cuda" scaler on
    a machine without CUDA warns and disables itself. With `enabled=False` every method passes
    through: `scale` returns its argument, `step` just calls `optimizer.step()`.
    """

    def __init__(self, device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device, self._enabled = device, enabled
        if device == "cuda" and enabled and not cuda.is_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale, self._init_growth_tracker = init_scale, 0
            self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
            self._growth_interval = growth_interval
            self._scale = self._growth_tracker = None  # made by the first scale(), as PyTorch's
            self._per_optimizer_states = {}  # optimizer -> its stage and the inf flags its unscale_ found

    def _state(self, optimizer):
        return self._per_optimizer_states.setdefault(optimizer, _fresh_state())

    def _check_scale_growth_tracker(self, funcname):
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate your script did "
                                 "not use scaler.scale(loss or outputs) earlier in the iteration.")

    def scale(self, outputs):
        """`outputs` (a Variable, or a list/tuple of them, nested) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Variable):
            return self._scaled(outputs)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if hasattr(outputs, "__iter__"):
            return map(self.scale, outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _scaled(self, x):
        if self._scale is None:  # a float32 scale and an int32 counter, as PyTorch's 0-d tensors
            self._scale = np.array(self._init_scale, dtype=np.float32)
            self._growth_tracker = np.array(self._init_growth_tracker, dtype=np.int32)
        xp = get_array_module(x.data)
        if x.ndim > 0 and x.dtype == np.float16:  # PyTorch: float16 result, computed in float32, then rounded
            with np.errstate(over="ignore"):  # beyond 65504 is inf, as in PyTorch
                return F.to(x.float() * Variable(xp.asarray(self._scale)), dtype=np.float16)
        # a 0-d float32 scale, and PyTorch's promotion: a float64 x stays float64, an int64 one or a 0-d float16
        # loss becomes float32
        return x * Variable(xp.asarray(self._scale))

    def unscale_(self, optimizer):
        """Divide the gradients of `optimizer`'s parameters by the scale, in place; note any inf or NaN."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # float64 reciprocal, then float32: PyTorch's guard against an imprecise float32 division
        inv_scale = np.float32(1.0 / np.float64(self._scale))
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale)
        state["stage"] = OptState.UNSCALED

    def _unscale_grads_(self, optimizer, inv_scale):
        """{device: 1.0 if one of its gradients held an inf or NaN, else 0.0}; the gradients multiplied by inv_scale."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if any(g.dtype == np.float16 for g in grads):  # checked before any gradient changes
            raise ValueError("Attempting to unscale FP16 gradients.")
        found = {}
        with no_grad():
            for g in grads:
                xp = get_array_module(g.data)
                device = str(g.device)
                # non-finite is judged on the scaled value, before the multiply (PyTorch's kernel)
                bad = not bool(xp.isfinite(g.data).all())
                found[device] = np.float32(max(found.get(device, 0.0), 1.0 if bad else 0.0))
                if inv_scale != 1.0:  # PyTorch's kernel skips the multiply for a scale of 1
                    inplace.write("unscale_", g, g.data * xp.asarray(inv_scale, dtype=g.data.dtype))
        return found

    def step(self, optimizer, *args, **kwargs):
        """`optimizer.step(*args, **kwargs)` on unscaled gradients, skipped if one was inf or NaN; its return value."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(float(v) for v in state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None):
        """Back off after an inf/NaN, grow after growth_interval clean steps, or take `new_scale`; a new iteration."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            found = [f for s in self._per_optimizer_states.values() for f in s["found_inf_per_device"].values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(sum(found) != 0)
        self._per_optimizer_states = {}

    def _set_scale(self, new_scale):
        if isinstance(new_scale, float):
            self._scale[...] = new_scale
            return
        reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch.FloatTensor with "
                  "requires_grad=False.")
        if (new_scale.device.type != self._device or new_scale.data.size != 1
                or new_scale.requires_grad is True):
            raise AssertionError(reason)
        if new_scale.ndim != 0:  # PyTorch copies it into the 0-d scale, which does not broadcast
            shape = ", ".join(str(n) for n in new_scale.shape)
            raise RuntimeError(f"output with shape [] doesn't match the broadcast shape [{shape}]")
        self._scale[...] = as_numpy(new_scale.data)

    def _update_scale(self, found_inf):
        """PyTorch's _amp_update_scale_ (CPU kernel): float32 scale times a float64 factor, rounded to float32."""
        if found_inf:
            self._scale[...] = np.float32(float(self._scale) * self._backoff_factor)
            self._growth_tracker[...] = 0
            return
        successful = int(self._growth_tracker) + 1
        if successful == self._growth_interval:
            with np.errstate(over="ignore"):
                grown = np.float32(float(self._scale) * self._growth_factor)
            if np.isfinite(grown):  # never grow the scale past float32's range, to inf
                self._scale[...] = grown
            successful = 0
        self._growth_tracker[...] = successful

    def get_scale(self):
        """The current scale as a Python float (init_scale before the first scale(); 1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker)

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """PyTorch's five entries (an empty dict when disabled); take it after update()."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        """Take the scale, factors, interval and growth tracker of `state_dict()` (a no-op when disabled)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale[...] = state_dict["scale"]
        self._growth_factor, self._backoff_factor = state_dict["growth_factor"], state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker[...] = state_dict["_growth_tracker"]
