"""How DistributedDataParallel averages gradients while backward still runs (PyTorch's Reducer).

A backward pass makes the gradients of the last layers first. So the parameters are taken in reverse
order and cut into buckets of about `bucket_cap_mb`; when every gradient of a bucket is ready (its
post-accumulate-grad hook has run) the bucket is flattened into one array and its all-reduce starts,
asynchronously: the rest of backward computes while the bytes travel. At the end of the pass (a
callback queued on it) the reducer waits for every bucket and writes the averages back into `.grad`.

Buckets are launched in order, bucket 0 first, whatever order their gradients arrive in: every rank
must start the same collectives in the same order.
"""
import numpy as np

from tinypytorch.autograd.gradients import queue_callback
from tinypytorch.core import Variable, increment_version
from tinypytorch.distributed import collectives


def assign_buckets(params, cap_bytes):
    """Lists of parameters, reverse order, each closed once it holds at least cap_bytes (PyTorch's rule:
    a parameter larger than the cap gets a bucket of its own). One dtype per bucket, since it is one array.

    (PyTorch makes the first bucket small, 1 MiB, so that the first all-reduce starts early, and rebuilds
    the buckets after the first iteration in the order the gradients really arrived.)"""
    buckets, open_ = [], {}  # dtype -> [parameters, bytes] of the bucket being filled
    for p in reversed(params):
        bucket = open_.setdefault(p.data.dtype, [[], 0])
        bucket[0].append(p)
        bucket[1] += p.data.nbytes
        if bucket[1] >= cap_bytes:
            buckets.append(bucket[0])
            del open_[p.data.dtype]
    buckets.extend(bucket for bucket, _ in open_.values())
    return buckets


class Bucket:
    """Some parameters whose gradients travel together, as one flat array."""

    def __init__(self, params):
        self.params = params
        self.waiting = len(params)  # gradients not ready yet in this backward
        self.flat = self.work = None

    def start(self, world_size, group):
        """Flatten the gradients (zeros for a parameter without one), divide, start the sum over the ranks."""
        self.flat = np.concatenate([(p.grad.data if p.grad is not None else np.zeros_like(p.data)).ravel()
                                    for p in self.params])
        self.flat /= world_size  # the sum of the ranks' gradients / N: their average
        with collectives.trusted_calls():
            self.work = collectives.all_reduce(self.flat, group=group, async_op=True)

    def finish(self, used):
        """Wait for the sum and write each average into its parameter's .grad; a parameter no rank used keeps
        its .grad as it is (PyTorch's)."""
        self.work.wait()
        offset = 0
        for p in self.params:
            average = self.flat[offset:offset + p.data.size].reshape(p.data.shape)
            offset += p.data.size
            if not used(p):
                continue
            if p.grad is None:
                p.grad = Variable(average.copy(), requires_grad=False)
            else:
                p.grad.data[...] = average
                increment_version(p.grad)
        self.flat = self.work = None
        self.waiting = len(self.params)


class Reducer:
    """Buckets of the parameters; marks gradients ready, starts the buckets in order, waits at the end of backward."""

    def __init__(self, params, cap_bytes, group, world_size, find_unused_parameters):
        self.params, self.group, self.world_size = params, group, world_size
        self.find_unused_parameters = find_unused_parameters
        self.buckets = [Bucket(b) for b in assign_buckets(params, cap_bytes)]
        self.bucket_of = {id(p): bucket for bucket in self.buckets for p in bucket.params}
        self.armed = False  # this backward averages (the forward ran outside no_sync)
        self.unfinished = False  # a backward started averaging and could not finish (an unused parameter)
        self.ready = set()

    def prepare_for_backward(self):
        """The forward ran outside no_sync: the next backward averages the gradients."""
        self.armed, self.ready, self.next_bucket = True, set(), 0
        self.callback_queued = False

    def mark_ready(self, p):
        """p's gradient is complete in .grad (its post-accumulate-grad hook): its bucket may start."""
        if not self.armed or id(p) in self.ready:
            return
        if not self.callback_queued:  # the first gradient of this pass: wait for all at its end
            queue_callback(self.finalize)
            self.callback_queued, self.unfinished = True, True
        self.ready.add(id(p))
        self.bucket_of[id(p)].waiting -= 1
        self.start_ready_buckets()

    def start_ready_buckets(self):
        while self.next_bucket < len(self.buckets) and self.buckets[self.next_bucket].waiting == 0:
            self.buckets[self.next_bucket].start(self.world_size, self.group)
            self.next_bucket += 1

    def finalize(self):
        """End of backward: (find_unused_parameters) the parameters without a gradient count as ready with zeros;
        then wait for every bucket and write the averages back."""
        used = self.everyone_used() if self.find_unused_parameters else None
        if self.find_unused_parameters:
            for p in self.params:
                if id(p) not in self.ready:
                    self.ready.add(id(p))
                    self.bucket_of[id(p)].waiting -= 1
            self.start_ready_buckets()
        for bucket in self.buckets[:self.next_bucket]:
            bucket.finish(lambda p: used is None or used[id(p)])
        self.armed = False
        self.unfinished = self.next_bucket < len(self.buckets)  # the next forward raises PyTorch's error

    def everyone_used(self):
        """{id(p): did any rank give p a gradient in this backward}: a parameter no rank used keeps .grad."""
        mine = np.array([id(p) in self.ready for p in self.params], dtype=np.int64)
        with collectives.trusted_calls():
            collectives.all_reduce(mine, group=self.group)
        return {id(p): bool(n) for p, n in zip(self.params, mine)}

    def unready_indices(self):
        return [i for i, p in enumerate(self.params) if id(p) not in self.ready]
