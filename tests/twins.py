"""PyTorch twins of the package's layers, with the same weights: the tests' and the benchmarks' (bench/ports.py
imports them from here, through bench/from_tests.py).

Only torch and NumPy are imported, so that a benchmark importing this pulls in nothing of the tests.
"""
import torch

TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def torch_linear(layer, dtype=None):
    """torch.nn.Linear with the weight and bias of tinypytorch's Linear `layer` (None: None), in `dtype`
    (None: the layer's own)."""
    if layer is None:
        return None
    out_size, in_size = layer.weight.shape
    dtype = dtype or TORCH_DTYPES[layer.weight.dtype.name]
    linear = torch.nn.Linear(in_size, out_size, bias=layer.bias is not None, dtype=dtype)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(layer.weight.data))
        if layer.bias is not None:
            linear.bias.copy_(torch.tensor(layer.bias.data))
    return linear


def torch_twin(model, activation=torch.nn.Sigmoid, dtype=None):
    """A torch Sequential with the same Linear layers as `model` (the package's MLP), `activation` between them
    (Sigmoid: the MLP's default), and the same weights, in `dtype` (None: the model's own)."""
    modules = []
    for i, layer in enumerate(model.layers):
        modules += [torch_linear(layer, dtype)] + ([activation()] if i < len(model.layers) - 1 else [])
    return torch.nn.Sequential(*modules)
