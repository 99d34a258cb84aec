import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from reference import floats, torch_grad_after_reusing_the_output
from steploader import load_step

pytestmark = [pytest.mark.step19, pytest.mark.torch]
step = load_step(19)

any_arrays = st.sampled_from([np.float64, np.float32, np.int64]).flatmap(
    lambda dtype: arrays(dtype, array_shapes(min_dims=0, max_dims=4, max_side=4), elements=st.integers(-100, 100))
)


@given(any_arrays)
def test_properties_equal_the_torch_tensors(array):
    v, t = step.Variable(array), torch.tensor(array)
    assert v.shape == tuple(t.shape)
    assert v.ndim == t.dim()
    assert v.size == t.numel()
    assert str(t.dtype) == f"torch.{v.dtype}"
    if array.ndim:
        assert len(v) == len(t)


def test_len_of_a_0d_variable_is_a_type_error_like_torch():
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d Variable"):
        len(step.Variable(np.array(1.0)))
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(torch.tensor(1.0))


def test_properties_follow_a_replaced_array():
    x = step.Variable(np.zeros(3))
    x.data = np.zeros((2, 5), dtype=np.float32)
    assert (x.shape, x.ndim, x.size, x.dtype, len(x)) == ((2, 5), 2, 10, np.float32, 2)


def test_name_defaults_to_none_and_is_kept():
    assert step.Variable(np.array(1.0)).name is None
    assert step.Variable(np.array(1.0), name="x").name == "x"
    assert step.Variable(np.array(1.0), "w").name == "w"


@pytest.mark.parametrize(
    "data, name, expected",
    [
        (np.array(1.5), None, "variable(1.5000)"),
        (np.array(-2.0), None, "variable(-2.0000)"),
        (np.array([1.0, 2.0]), None, "variable([1.0000, 2.0000])"),
        (np.array([[1.0, 2.0], [3.0, 4.0]]), None, "variable([[1.0000, 2.0000],\n          [3.0000, 4.0000]])"),
        (np.array(2.0), "x", "variable(2.0000, name='x')"),
        (np.array([[1.0, 2.0], [3.0, 4.0]]), "W", "variable([[1.0000, 2.0000],\n          [3.0000, 4.0000]], name='W')"),
        (np.array([1, 2, 3]), None, "variable([1, 2, 3])"),
        (np.array([-1.0, 0.5]), None, "variable([-1.0000,  0.5000])"),
        (None, None, "variable(None)"),
    ],
)
def test_repr_is_the_contracts_string(data, name, expected):
    assert repr(step.Variable(data, name=name)) == expected
    assert str(step.Variable(data, name=name)) == expected


def test_repr_of_a_3d_array_aligns_every_block_under_the_parenthesis():
    text = repr(step.Variable(np.arange(8.0).reshape(2, 2, 2)))
    assert text.splitlines() == [
        "variable([[[0.0000, 1.0000],",
        "           [2.0000, 3.0000]],",
        "",
        "          [[4.0000, 5.0000],",
        "           [6.0000, 7.0000]]])",
    ]


@given(arrays(np.float64, array_shapes(min_dims=0, max_dims=3, max_side=5), elements=floats(-1e6, 1e6)))
def test_repr_keeps_four_fixed_decimals_whatever_the_global_precision_and_has_no_address(array):
    x = step.Variable(array)
    before = repr(x)
    with np.printoptions(precision=1, floatmode="maxprec"):
        assert repr(x) == before
    assert "0x" not in before and before.startswith("variable(") and before.endswith(")")


@given(arrays(np.float64, array_shapes(min_dims=0, max_dims=2, max_side=4), elements=floats(-10, 10)))
def test_graph_code_is_unchanged_grads_equal_torch(array):
    x = step.Variable(array)
    step.add(step.square(x), step.exp(x)).backward()
    xt = torch.tensor(array, requires_grad=True)
    yt = xt**2 + torch.exp(xt)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


def test_the_output_gives_up_its_seed_and_can_be_reused_like_torch():
    # y = 2x at x = 1, backward; then z = 3y, backward: x.grad = 2 + 6 = 8, as in torch
    x = step.Variable(np.array(1.0))
    y = step.add(x, x)
    y.backward()
    assert y.grad is None
    step.add(step.add(y, y), y).backward()
    assert x.grad == 8.0 == torch_grad_after_reusing_the_output()
