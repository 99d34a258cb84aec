"""fully_shard: ZeRO stage 3, FSDP's way (PyTorch's `torch.distributed.fsdp.fully_shard`, FSDP2).

ZeRO stages 1 and 2 (zero.py) shard the optimizer state and the gradients; every rank still holds
every parameter. Stage 3 shards the parameters too: between steps a rank holds only its rows of
each parameter, and the whole parameters of one module exist only while that module computes.
Bytes a float32 Adam parameter: (4 + 4 + 8)/N.

    fully_shard(module)   each parameter of `module` (not already managed by a fully_shard-ed
                          sub-module) is cut along dim 0 as `torch.chunk` cuts it: chunks of
                          ceil(rows / N) rows, rank r the r-th (the last smaller, or empty)

Apply it to the layers, then to the root, as FSDP2 users do:

    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = tinypytorch.optim.Adam(model.parameters())   # built over the shards: each rank steps its rows

Each call hangs hooks on the module and its tensors, the package's own (steps 53 and 35):

    forward pre-hook        all-gather the whole parameters (each rank's rows, padded to the same
                            length for the collective) and put them in the module's slots
    forward hook            put the shards back and free the whole arrays (reshard_after_forward)
    hook on each output     (register_hook: the module's backward is about to run) all-gather them
                            again: the module's backward needs them. PyTorch's FSDP2 does the same;
                            a full backward pre-hook would do too, but it wraps the module's inputs and
                            outputs in identity nodes and warns whenever no input requires grad
    post-accumulate-grad    (on each whole parameter) once the module's gradients are all made,
                            reduce-scatter them, averaged over the ranks, into the shards' `.grad`,
                            and free the whole parameters and their gradients

With checkpointing (tinypytorch.utils.checkpoint), a module's forward runs again in backward: there
(is_recomputing) the hooks keep the whole parameters in the slots, as the hook on the outputs put them,
and post_backward lets them go (PyTorch's FSDP2 does the same in its pre-backward state).

The whole parameter is one Variable per sharded parameter, kept from call to call: the graph saves
that Variable (not its array), so giving its `.data` an empty array frees the memory while the graph
still refers to it, and gathering into `.data` again before the module's backward restores it
(PyTorch resizes the storage to 0 and back).

A sharded parameter is a `ShardedParameter`: a Parameter over this rank's rows, so its `.shape` is the
local one (PyTorch's DTensor says the global shape, and gives the rows with `to_local()`);
`full_tensor()` gathers the whole parameter (a collective: every rank must call it). As PyTorch's,
fully_shard does not broadcast: every rank must build the model alike (the same seed).

Simplifications: one collective per parameter (PyTorch batches a module's parameters into one flat
all-gather and one reduce-scatter, and overlaps them with computation: prefetching); the root, like
PyTorch's, keeps its own parameters whole from forward to backward; a parameter is expected in one
module only.
"""
import math

import numpy as np

from tinypytorch.autograd.gradients import queue_callback
from tinypytorch.core import Variable
from tinypytorch.distributed import collectives
from tinypytorch.distributed import process_group as groups
from tinypytorch.grad_mode import is_recomputing, no_grad
from tinypytorch.layers import Layer, Parameter
from tinypytorch.utils.pytree import tree_flatten


class ShardedParameter(Parameter):
    """This rank's rows (dim 0) of a parameter of `full_shape`: what the optimizer steps."""

    def __init__(self, data, full_shape, sharding, requires_grad=True):
        super().__init__(data, requires_grad=requires_grad)
        self.full_shape, self._sharding = tuple(full_shape), sharding

    def to_local(self):
        """This rank's rows (the parameter itself: it holds nothing else)."""
        return self

    def full_tensor(self):
        """The whole parameter, gathered from every rank's rows (a collective: every rank calls it)."""
        return Variable(self._sharding.gather(self.data), requires_grad=False)


class Sharding:
    """How a parameter of `rows` rows is cut over `world` ranks: chunks of `chunk` rows, as torch.chunk."""

    def __init__(self, full_shape, rank, world, group):
        if len(full_shape) == 0:
            raise ValueError("fully_shard: a 0-d parameter cannot be sharded on dim 0")
        self.full_shape, self.world, self.group = tuple(full_shape), world, group
        rows = full_shape[0]
        self.chunk = math.ceil(rows / world)
        self.rows = slice(min(rank * self.chunk, rows), min((rank + 1) * self.chunk, rows))

    def local(self, full):
        return full[self.rows].copy()  # a copy of its own (a view would keep the whole array alive)

    def gather(self, local):
        """Every rank's rows, padded to `chunk` rows for the collective, in rank order: the whole array."""
        padded = local
        if len(local) < self.chunk or not local.flags.c_contiguous:
            padded = np.zeros((self.chunk, *self.full_shape[1:]), local.dtype)
            padded[:len(local)] = local
        whole = np.empty((self.chunk * self.world, *self.full_shape[1:]), local.dtype)
        with collectives.trusted_calls():
            collectives.all_gather_into_tensor(whole, padded, group=self.group)
        return whole[:self.full_shape[0]]

    def reduce_scatter(self, full_grad):
        """This rank's rows of the average over the ranks of `full_grad`."""
        padded = np.zeros((self.chunk * self.world, *self.full_shape[1:]), full_grad.dtype)
        padded[:self.full_shape[0]] = full_grad
        mine = np.empty((self.chunk, *self.full_shape[1:]), full_grad.dtype)
        with collectives.trusted_calls():
            collectives.reduce_scatter_tensor(mine, padded, op=collectives.ReduceOp.AVG, group=self.group)
        rows = self.rows.stop - self.rows.start
        return mine if rows == self.chunk else mine[:rows].copy()  # a view would keep the padding alive


class FSDPParam:
    """One managed parameter: its slot (owner module, name), its shard, and its whole Variable."""

    def __init__(self, owner, name, param, rank, world, group):
        self.owner, self.name = owner, name
        self.sharding = Sharding(param.data.shape, rank, world, group)
        self.sharded = ShardedParameter(self.sharding.local(param.data), param.data.shape, self.sharding,
                                        requires_grad=param.requires_grad)
        self.unsharded = Parameter(np.empty(0, param.data.dtype), requires_grad=param.requires_grad)
        self.gathered = False

    def unshard(self):
        if not self.gathered:
            self.unsharded.data = self.sharding.gather(self.sharded.data)
            self.gathered = True

    def reshard(self):
        self.unsharded.data = np.empty(0, self.sharded.data.dtype)  # the whole array let go
        self.gathered = False

    def use(self, which):
        object.__setattr__(self.owner, self.name, which)  # the slot as it is: no re-registration


class FSDPState:
    """What fully_shard keeps on a module: its managed parameters and whether it is the root."""

    def __init__(self, module, params, reshard_after_forward, group):
        self.module, self.params, self.group = module, params, group
        self.reshard_after_forward = reshard_after_forward
        self.is_root = None  # decided at the first forward (PyTorch's lazy init)
        self.pending = set()  # ids of unsharded parameters whose gradient this backward has not reduced yet
        self.callback_queued = False

    # forward
    def pre_forward(self, module, args):
        if self.is_root is None:
            self._lazy_init()
        self.unshard()
        for p in self.params:
            p.use(p.unsharded)
        if is_recomputing():  # step 75: checkpoint runs the module again in backward, its backward next
            return
        if self.is_root:
            for state in self._states:
                state.pending = {id(p.unsharded) for p in state.params if p.unsharded.requires_grad}
                state.callback_queued = False

    def post_forward(self, module, args, output):
        if is_recomputing():  # step 75: keep the whole parameters; post_backward lets them go (FSDP2's way)
            return
        for p in self.params:
            p.use(p.sharded)
        if self.reshard_after_forward and not self.is_root:
            self.reshard()
        for value in tree_flatten(output)[0]:  # backward reaches the module at its outputs: gather there
            if isinstance(value, Variable) and value.requires_grad:
                value.register_hook(self.pre_backward)

    def _lazy_init(self):
        """The first module called is the root: every fully_shard-ed module under it is not."""
        self._states = [m._fsdp_state for m in self.module.modules() if isinstance(m, FSDPModule)]
        for state in self._states:
            state.is_root = state is self

    # backward
    def pre_backward(self, grad):
        self.unshard()
        for p in self.params:  # step 75: in the slots, for a checkpoint inside the module to recompute with
            p.use(p.unsharded)

    def post_accumulate(self, unsharded):
        """A whole parameter's gradient is complete: once all of this module's are, reduce-scatter them."""
        if not self.callback_queued:
            queue_callback(self.finish_backward)
            self.callback_queued = True
        self.pending.discard(id(unsharded))
        if not self.pending:
            self.post_backward()

    def post_backward(self):
        """Each whole gradient averaged over the ranks into the shard's .grad (added to one kept there:
        accumulation); then the whole parameters and gradients are let go."""
        for p in self.params:
            grad = p.unsharded.grad
            if grad is not None:
                mine = p.sharding.reduce_scatter(grad.data)
                if p.sharded.grad is None:
                    p.sharded.grad = Variable(mine, requires_grad=False)
                else:
                    with no_grad():
                        p.sharded.grad.data = p.sharded.grad.data + mine
                p.unsharded.grad = None
            p.use(p.sharded)  # step 75: out of the slots, if a recomputation left them there
        self.reshard()

    def finish_backward(self):
        """End of the backward pass: a module with a parameter that got no gradient reduces what it has."""
        self.callback_queued = False
        if self.pending:
            self.pending = set()
            self.post_backward()

    def unshard(self):
        for p in self.params:
            p.unshard()

    def reshard(self):
        for p in self.params:
            p.reshard()


class FSDPModule:
    """What a fully_shard-ed module also is (PyTorch's torch.distributed.fsdp.FSDPModule)."""

    def unshard(self):
        """Gather this module's whole parameters now (and put them in its slots)."""
        self._fsdp_state.unshard()
        for p in self._fsdp_state.params:
            p.use(p.unsharded)

    def reshard(self):
        """Put the shards back in this module's slots and free the whole parameters."""
        for p in self._fsdp_state.params:
            p.use(p.sharded)
        self._fsdp_state.reshard()


_classes = {}


def _fsdp_class(cls):
    """FSDPLinear for Linear: a class that is both FSDPModule and the module's own class (PyTorch's)."""
    if cls not in _classes:
        _classes[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return _classes[cls]


def managed_parameters(module):
    """(owner, name, parameter) for each parameter of `module` not under a fully_shard-ed sub-module."""
    found, seen, stack = [], set(), [module]  # a loop, not a recursive closure: a closure that calls itself is a
    while stack:                              # reference cycle, and would keep the whole parameters until gc ran
        m = stack.pop()
        children = []
        for name in list(m._registered):
            value = getattr(m, name)
            if isinstance(value, Parameter) and id(value) not in seen:
                seen.add(id(value))
                found.append((m, name, value))
            elif isinstance(value, Layer) and not isinstance(value, FSDPModule):
                children.append(value)
        stack.extend(reversed(children))
    return found


def fully_shard(module, *, mesh=None, reshard_after_forward=True, process_group=None):
    """Shard `module`'s parameters over the ranks (dim 0) and hang the hooks that gather and free them; returns
    `module`, now also an FSDPModule. `mesh`: only None (the whole world) is taken here."""
    if mesh is not None:
        raise NotImplementedError("fully_shard: a DeviceMesh is not supported; the default group is used")
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard: {type(module).__name__} is already fully_shard-ed")
    rank, world = groups.get_rank(process_group), groups.get_world_size(process_group)
    params = []
    for owner, name, param in managed_parameters(module):
        fsdp_param = FSDPParam(owner, name, param, rank, world, process_group)
        fsdp_param.use(fsdp_param.sharded)
        params.append(fsdp_param)
    state = FSDPState(module, params, reshard_after_forward, process_group)
    for p in params:
        if p.unsharded.requires_grad:
            p.unsharded.register_post_accumulate_grad_hook(state.post_accumulate)
    module.__class__ = _fsdp_class(type(module))
    object.__setattr__(module, "_fsdp_state", state)
    module.register_forward_pre_hook(state.pre_forward)
    module.register_forward_hook(state.post_forward)
    return module


__all__ = ["fully_shard", "FSDPModule", "ShardedParameter"]
