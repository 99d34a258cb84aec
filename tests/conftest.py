import os

import matplotlib
from hypothesis import settings

# Step scripts that plot must not open windows. Not MPLBACKEND: the environment
# would reach the notebook kernels that nbval starts, and they must plot inline.
matplotlib.use("Agg")

# deadline=None: the first call of a case may import torch or warm caches.
settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
