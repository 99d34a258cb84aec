"""Step 35's lesson: the drawings' account of who holds a saved tensor, the numbers the page prints, and the
exercises' solutions (Reciprocal, held_bytes, the pairs of formulas), against PyTorch and maths."""
import gc
import weakref

import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.autograd.graph import SavedTensor

pytestmark = [pytest.mark.step35, pytest.mark.torch]
step = load_step(35)


def torch_distinct_saved_bytes(make, values):
    """Bytes of the distinct storages PyTorch's pack hook sees while `make` runs on a leaf holding `values`."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        make(torch.tensor(values, dtype=torch.float64, requires_grad=True))
    return sum(storages.values())


# ----- the drawings: what each record refers to, before and after backward ------------------------------------

def test_the_drawings_read_the_records_and_after_backward_every_record_is_freed():
    x = Variable(np.array([0.5, 1.0, 2.0]), name="x")
    y = (x * tinypytorch.exp(x)).sum()
    assert step.saved_records(y) == [("Exp", ["output"]), ("Mul", ["input x", "input exp(x)"]), ("Sum", [])]
    exp = y.creator.edges[0][0].edges[1][0]
    assert exp.outputs[0]() is not None  # the Variable exp(x) lives: Mul's saved input holds it
    y.backward()
    assert step.saved_records(y) == [("Exp", ["freed"]), ("Mul", ["freed", "freed"]), ("Sum", [])]
    assert exp.outputs[0]() is None  # ... and is gone once Mul's records are freed: the drawing says "gone"
    step.draw_who_owns(y, "after").clf()


def test_the_printed_measurement_of_the_mlp():
    # four arrays of 256 x 512 float64 made by the forward pass and saved: 4 x 1 MiB, and the loss, a 0-d array
    # (8 bytes, unless NumPy's cache of small allocations served it untraced); none left after backward
    assert 4 * 256 * 512 * 8 / 1024 <= step.held_after_forward <= (4 * 256 * 512 * 8 + 8) / 1024
    assert step.held_after_backward <= 8 / 1024  # the loss may remain
    assert len(step.our_saved) == 12 and sum(step.our_saved) == sum(step.torch_saved)


# ----- exercise 1: Reciprocal saves its output only -----------------------------------------------------------

@pytest.mark.parametrize("values", [[0.5, 1.0, 2.0], [-3.0, 0.25, 7.5, -0.1]])
def test_reciprocal_saves_its_output_and_its_gradient_is_torchs(values):
    x = Variable(np.array(values))
    y = step.Reciprocal()(x)
    records = [s for s in y.creator.saved if isinstance(s, SavedTensor)]
    assert len(records) == 1 and records[0].variable is None and records[0].data is y.data
    assert records[0].nbytes() == torch_distinct_saved_bytes(torch.reciprocal, values) == 8 * len(values)
    xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    yt = torch.reciprocal(xt)
    (yt + yt * yt).sum().backward()
    (y + y * y).sum().backward()  # y used twice: the saved output is unpacked once per backward of Reciprocal
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12)


def test_reciprocal_makes_no_reference_cycle():
    gc.collect()
    gc.disable()
    try:
        y = step.Reciprocal()(Variable(np.ones(3)))
        function = weakref.ref(y.creator)
        del y
        assert function() is None
    finally:
        gc.enable()


# ----- exercise 2: held_bytes ----------------------------------------------------------------------------------

EXPRESSIONS = {  # name: (tinypytorch, torch)
    "x * exp(x)": (lambda x: (x * tinypytorch.exp(x)).sum(), lambda x: (x * torch.exp(x)).sum()),
    "x * x": (lambda x: x * x, lambda x: x * x),
    "sin(cos(x))": (lambda x: tinypytorch.sin(tinypytorch.cos(x)), lambda x: torch.sin(torch.cos(x))),
    "tanh(x) * sigmoid(x)": (lambda x: tinypytorch.tanh(x) * tinypytorch.sigmoid(x),
                             lambda x: torch.tanh(x) * torch.sigmoid(x)),
    "x + 1": (lambda x: x + 1.0, lambda x: x + 1.0),
}


@pytest.mark.parametrize("name", EXPRESSIONS)
def test_held_bytes_counts_each_saved_array_once_as_torchs_storages(name):
    ours, theirs = EXPRESSIONS[name]
    values = np.linspace(-1.0, 2.0, 5)
    y = ours(Variable(values))
    assert step.held_bytes(y) == torch_distinct_saved_bytes(theirs, values)
    if step.held_bytes(y):
        y.sum().backward()
        assert step.held_bytes(y) == 0


def test_held_bytes_printed_on_the_page():
    # x and exp(x), three float64 each; exp(x) saved twice, counted once
    x = Variable(np.array([0.5, 1.0, 2.0]))
    assert step.held_bytes((x * tinypytorch.exp(x)).sum()) == 2 * 3 * 8


# ----- exercise 3: which formula holds fewer bytes --------------------------------------------------------------

TORCH_FORMULAS = {
    "sigmoid(x)": torch.sigmoid,
    "1 / (1 + exp(-x))": lambda x: 1.0 / (1.0 + torch.exp(-x)),
    "tanh(x)": torch.tanh,
    "2 * sigmoid(2 * x) - 1": lambda x: 2.0 * torch.sigmoid(2.0 * x) - 1.0,
}
ARRAYS_HELD = {"sigmoid(x)": 1, "1 / (1 + exp(-x))": 2, "tanh(x)": 1, "2 * sigmoid(2 * x) - 1": 1}


@pytest.mark.parametrize("name", ARRAYS_HELD)
def test_the_formulas_hold_what_torch_holds_and_compute_the_same_gradient(name):
    values = np.linspace(-3.0, 3.0, 1000)
    x, xt = Variable(values), torch.tensor(values, requires_grad=True)
    y = step.FORMULAS[name](x)
    assert step.held_bytes(y) == ARRAYS_HELD[name] * 1000 * 8 == torch_distinct_saved_bytes(TORCH_FORMULAS[name],
                                                                                             values)
    y.sum().backward()
    (torch.sigmoid if name in ("sigmoid(x)", "1 / (1 + exp(-x))") else torch.tanh)(xt).sum().backward()  # the same function
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-9, atol=1e-15)
