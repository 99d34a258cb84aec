"""PyTorch's `torch.backends`: which compute libraries the framework may use, and their switches.

    mps    Apple's Metal: not built in, never available (PyTorch's Linux and CPU builds say the same)
    cudnn  NVIDIA's cuDNN: the package calls no cuDNN kernel, so its switches are kept and change nothing

These answer truthfully for the package: it computes with NumPy on the CPU and with CuPy's
element-wise kernels and matrix products on a GPU, and with nothing else.
"""
from tinypytorch.backends import cudnn, mps

__all__ = ["cudnn", "mps"]
