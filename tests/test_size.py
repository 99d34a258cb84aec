"""tinypytorch.Size against torch.Size: what x.shape and x.size() give, how it prints, compares and combines."""
import pickle

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Size

SHAPES = [(), (0,), (3,), (2, 3), (1, 4, 1), (2, 0, 5)]


def both(shape):
    return tinypytorch.zeros(shape).shape, torch.zeros(shape).shape


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shape_and_size_are_sizes_that_print_as_torchs(shape):
    ours, theirs = both(shape)
    x = tinypytorch.zeros(shape)
    assert type(ours) is Size and type(x.size()) is Size
    assert repr(ours) == repr(theirs) and str(ours) == str(theirs) and f"{ours}" == f"{theirs}"
    assert x.size() == ours == tuple(theirs)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_size_is_a_tuple_of_ints(shape):
    ours, theirs = both(shape)
    assert isinstance(ours, tuple) and ours == shape and hash(ours) == hash(shape)
    assert len(ours) == len(theirs) and list(ours) == list(theirs)
    assert all(type(n) is int for n in ours)  # not NumPy ints: they print and pickle as ints
    assert ours.numel() == theirs.numel()
    assert ours.count(1) == theirs.count(1)


@pytest.mark.parametrize("key", [0, -1, slice(1, None), slice(None, None, -1), slice(0, 0)], ids=str)
def test_indexing_gives_an_int_and_slicing_a_size(key):
    ours, theirs = both((2, 3, 4))
    assert repr(ours[key]) == repr(theirs[key])
    assert type(ours[key]) is (Size if isinstance(key, slice) else int)


def test_adding_a_tuple_on_either_side_gives_a_size():
    ours, theirs = both((2, 3))
    for a, b in [(ours + (4,), theirs + (4,)), ((1,) + ours, (1,) + theirs), (ours + ours, theirs + theirs)]:
        assert repr(a) == repr(b)


def test_a_size_builds_from_a_list_or_tuple_and_feeds_factories():
    assert repr(Size([2, 3])) == repr(torch.Size([2, 3])) and repr(Size()) == repr(torch.Size())
    x = tinypytorch.ones(3, 4)
    assert tinypytorch.zeros(x.shape).shape == (3, 4)
    assert x.reshape(x.shape[::-1]).shape == (4, 3)


def test_size_of_a_dim_is_an_int():
    x = tinypytorch.zeros(2, 3)
    assert x.size(1) == torch.zeros(2, 3).size(1) == 3 and type(x.size(-1)) is int


def test_a_size_pickles_as_a_size():
    ours = tinypytorch.zeros(2, 3).shape
    assert type(pickle.loads(pickle.dumps(ours))) is Size


def test_shapes_in_messages_of_the_package_are_tuples():
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4,\) do not broadcast"):
        tinypytorch.ones(2, 3) + tinypytorch.ones(4)
    assert np.zeros(tinypytorch.zeros(2, 3).shape).shape == (2, 3)
