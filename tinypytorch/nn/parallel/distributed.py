"""DistributedDataParallel: the same model in every process, each on its own share of the batch (PyTorch's).

At construction rank 0's parameters and buffers are broadcast, so every rank starts from the same
model. Each rank then runs forward and backward on its own samples; the gradients are averaged over
the ranks during backward (tinypytorch.nn.parallel.reducer), so after backward every rank holds the
gradient of the whole batch and the optimizers, stepping alike, keep the models alike.

    no_sync()               a block whose backward passes only accumulate locally (gradient accumulation);
                            the first backward after it averages the sum
    find_unused_parameters  a parameter that got no gradient counts as ready (zero) at the end of
                            backward; without it, an unused parameter stops the averaging, and the next
                            forward raises PyTorch's error
"""
import contextlib

from tinypytorch.distributed import collectives
from tinypytorch.distributed import process_group as groups
from tinypytorch.nn.modules import Module
from tinypytorch.nn.parallel.reducer import Reducer

UNFINISHED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that "
    "your module has parameters that were not used in producing loss. You can enable unused parameter detection by "
    "passing the keyword argument `find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and "
    "by making sure all `forward` function outputs participate in calculating loss.\n"
    "Parameter indices which did not receive grad for rank {rank}: {indices}")  # PyTorch's words


class DistributedDataParallel(Module):
    """Wraps `module` (kept as `.module`): forward passes through, backward averages the gradients over the ranks."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False):
        super().__init__()
        if device_ids is not None or output_device is not None:  # PyTorch's words
            raise ValueError("DistributedDataParallel device_ids and output_device arguments only work with "
                             "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                             f"{device_ids}, output_device {output_device}, and module parameters {{device(type='cpu')}}.")
        self.module = module
        self.process_group, self.broadcast_buffers = process_group, broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True  # False inside no_sync()
        self.dim = dim
        params = [p for p in module.parameters() if p.requires_grad]
        self._same_model_everywhere(params)
        if init_sync:
            self._broadcast_states(include_parameters=True)
        cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
        self.reducer = Reducer(params, cap_mb * 2**20, process_group, process_group_size(process_group),
                               find_unused_parameters)
        self._hook_handles = [p.register_post_accumulate_grad_hook(self.reducer.mark_ready) for p in params]

    def _same_model_everywhere(self, params):
        """Every rank wraps a model of the same parameter shapes, or a clear error on every rank."""
        shapes = [collectives._describe(p) for p in params]
        collectives._agree("DistributedDataParallel(module)", self.process_group, f"parameters {shapes}")

    def _broadcast_states(self, include_parameters):
        """Rank 0's buffers (and, at construction, its parameters) copied into every rank's."""
        states = (list(self.module.parameters()) if include_parameters else []) + list(self.module.buffers())
        with collectives.trusted_calls():
            for state in states:
                collectives.broadcast(state, src=0, group=self.process_group)

    def forward(self, *inputs, **kwargs):
        if self.reducer.unfinished:
            raise RuntimeError(UNFINISHED.format(rank=groups.get_rank(self.process_group),
                                                 indices=" ".join(map(str, self.reducer.unready_indices()))))
        if self.broadcast_buffers and any(True for _ in self.module.buffers()):
            self._broadcast_states(include_parameters=False)  # e.g. BatchNorm's running statistics
        if self.require_backward_grad_sync:
            self.reducer.prepare_for_backward()
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally, unaveraged; the first one after averages the sum."""
        before, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before


def process_group_size(group):
    return groups.get_world_size(group)
