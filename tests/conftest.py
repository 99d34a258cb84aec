import os

os.environ.setdefault("MPLBACKEND", "Agg")  # step scripts that plot must not open windows

from hypothesis import settings  # noqa: E402

# deadline=None: the first call of a case may import torch or warm caches.
settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
