"""When DistributedDataParallel's buckets start their all-reduce and when it completes: the timeline step 73
draws and bench/distributed_overlap.py measures, from one piece of code."""


def on_buckets(ddp, launched, done):
    """Call launched(k) as bucket k's all-reduce starts, and done(k) when torch's future for it completes (on gloo's
    thread: keep `done` short)."""
    for k, bucket in enumerate(ddp.reducer.buckets):
        def start(world_size, group, k=k, bucket=bucket, plain=bucket.start):
            launched(k)
            plain(world_size, group)
            bucket.work.get_future().then(lambda _, k=k: done(k))
        bucket.start = start  # this bucket's start, wrapped: the others, and the class, stay as they are
