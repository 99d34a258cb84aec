"""Step 51: Dataset, TensorDataset, Subset, random_split and DataLoader (PyTorch's torch.utils.data), the spiral and
the digits that ship with the package, accuracy, and a digits classifier trained minibatch by minibatch like its torch
twin; bad input with PyTorch's messages as the model."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, datasets
from tinypytorch.classification import accuracy
from tinypytorch.utils.data import DataLoader, Dataset, Subset, TensorDataset, random_split

pytestmark = [pytest.mark.step51, pytest.mark.torch]


def numbered(n):
    return TensorDataset(np.arange(n, dtype=np.float64).reshape(n, 1) * 10, np.arange(n))


@given(n=st.integers(1, 60), batch_size=st.integers(1, 20), drop_last=st.booleans(), shuffle=st.booleans())
def test_an_epoch_visits_every_sample_once_in_batches_of_batch_size_the_last_partial_unless_drop_last(
        n, batch_size, drop_last, shuffle):
    loader = DataLoader(numbered(n), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
    batches = [t.data.tolist() for _, t in loader]
    seen = [i for batch in batches for i in batch]
    full, rest = divmod(n, batch_size)
    assert [len(b) for b in batches] == [batch_size] * full + ([rest] if rest and not drop_last else [])
    assert len(loader) == len(batches)
    assert len(set(seen)) == len(seen) and set(seen) <= set(range(n))
    assert len(seen) == (full * batch_size if drop_last else n)
    if not shuffle:
        assert seen == list(range(len(seen)))


def test_shuffling_draws_a_new_order_every_epoch_from_the_frameworks_generator():
    loader = DataLoader(numbered(50), batch_size=50, shuffle=True)
    tinypytorch.manual_seed(3)
    first, second = ([t.data.tolist() for _, t in loader][0] for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(50)) and first != second
    tinypytorch.manual_seed(3)
    assert [t.data.tolist() for _, t in loader][0] == first  # manual_seed fixes it
    torch.manual_seed(0)  # torch's generator plays no part
    tinypytorch.manual_seed(3)
    assert next(iter(loader))[1].data.tolist() == first
    # the permutation is NumPy's PCG64 permutation, worked out with a fresh generator of the same seed
    assert first == np.random.Generator(np.random.PCG64(3)).permutation(50).tolist()


def test_collate_stacks_each_field_into_a_variable_that_needs_no_gradient():
    x, t = next(iter(DataLoader(numbered(5), batch_size=3)))
    assert isinstance(x, Variable) and isinstance(t, Variable)
    assert x.shape == (3, 1) and t.shape == (3,) and x.dtype == np.float64 and t.dtype == np.int64
    assert not x.requires_grad and not t.requires_grad
    np.testing.assert_array_equal(x.data[:, 0], [0.0, 10.0, 20.0])


def test_a_dataset_of_single_values_gives_single_variables():
    class Squares(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return float(i * i)

    batches = [b.data.tolist() for b in DataLoader(Squares(), batch_size=3)]
    assert batches == [[0.0, 1.0, 4.0], [9.0]]


def test_the_loader_puts_batches_on_the_device_it_is_given(xp):
    device = "cpu" if xp is np else "cuda"
    x, _ = next(iter(DataLoader(numbered(4), batch_size=2, device=device)))
    assert tinypytorch.cuda.get_array_module(x.data) is xp


def test_random_split_makes_disjoint_subsets_that_cover_the_dataset():
    tinypytorch.manual_seed(0)
    a, b = random_split(numbered(20), [15, 5])
    assert isinstance(a, Subset) and (len(a), len(b)) == (15, 5)
    indices = [int(a[i][1]) for i in range(15)] + [int(b[i][1]) for i in range(5)]
    assert sorted(indices) == list(range(20))


def test_subset_and_tensor_dataset_index_like_torch():
    base = numbered(6)
    sub = Subset(base, [4, 1])
    sub_t = torch.utils.data.Subset(torch.utils.data.TensorDataset(torch.arange(6.0) * 10, torch.arange(6)), [4, 1])
    assert [int(sub[i][1]) for i in range(2)] == [int(sub_t[i][1]) for i in range(2)] == [4, 1]


def test_the_spiral_has_its_classes_on_arms_of_radius_0_to_1():
    x, t = datasets.spiral(points_per_class=50, classes=4, seed=2)
    assert x.shape == (200, 2) and t.dtype == np.int64 and np.bincount(t).tolist() == [50] * 4
    np.testing.assert_allclose(np.hypot(*x.T), np.tile(np.arange(50) / 50, 4), rtol=1e-12, atol=1e-15)


def test_the_digits_are_ucis_1797_images_of_pixels_0_to_16():
    images, digits = datasets.load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.float64 and digits.dtype == np.int64
    assert images.min() == 0 and images.max() == 16 and np.all(images == np.round(images))
    assert np.bincount(digits).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert digits[:10].tolist() == list(range(10))
    assert (datasets.DIGITS.parent / "DIGITS_LICENSE.txt").exists()


def test_accuracy_is_the_fraction_of_rows_whose_largest_score_is_the_target():
    scores = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 5.0, 0.0]])
    assert accuracy(Variable(scores), np.array([1, 0, 0, 0])) == 0.5  # rows 0 and 1


# ----- bad input (PyTorch's messages as the model) -------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True, "4"])
def test_a_batch_size_that_is_not_a_positive_int_is_refused_like_torch(batch_size):
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got batch_size="):
        DataLoader(numbered(4), batch_size=batch_size)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got batch_size="):
        torch.utils.data.DataLoader(list(range(4)), batch_size=batch_size)


@pytest.mark.parametrize("dataset", [3, object(), None])
def test_a_dataset_without_len_and_indexing_is_refused(dataset):
    with pytest.raises(TypeError, match="DataLoader: dataset must support len\\(\\) and indexing"):
        DataLoader(dataset, batch_size=2)
    with pytest.raises(TypeError, match="has no len\\(\\)"):  # torch finds out when it first needs the length
        list(torch.utils.data.DataLoader(dataset, batch_size=2))


def test_arrays_of_different_lengths_and_lengths_that_do_not_add_up_are_refused_like_torch():
    with pytest.raises(ValueError, match="size mismatch between arrays"):
        TensorDataset(np.ones(3), np.ones(4))
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        torch.utils.data.TensorDataset(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="sum of input lengths does not equal the length of the input dataset"):
        random_split(numbered(5), [3, 3])
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset"):
        torch.utils.data.random_split(list(range(5)), [3, 3])


# ----- the page's classifier ---------------------------------------------------------------------------------------

step = load_step(51)


def test_every_parameter_after_every_minibatch_of_the_first_epoch_equals_torchs():
    assert len(step.trajectory) == 47  # ceil(1500 / 32)
    for ours, theirs in step.trajectory:
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_the_replayed_first_epoch_is_the_one_training_saw():
    tinypytorch.manual_seed(1)
    assert step.train_loader.batches() == step.first_epoch


def test_the_classifiers_printed_figures():
    # printed as 98.3% (292 of 297) and 99.7% (1495 of 1500); another CPU's rounding may flip a digit or two
    assert step.history["test accuracy"][-1] == pytest.approx(292 / 297, abs=2 / 297)
    assert step.history["train accuracy"][-1] == pytest.approx(1495 / 1500, abs=2 / 1500)
    assert step.history["train loss"][-1] < step.history["train loss"][0] / 10
    assert step.accuracy(step.spiral_model(Variable(step.points)), step.arms) > 0.95
