"""Step 51's lesson: the exercises' solutions (a confusion matrix, a dataset that augments by shifting, a stratified
split), checked against counts and pixels worked out here."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from steploader import load_step
from tinypytorch.utils.data import DataLoader, TensorDataset
from reference import floats

pytestmark = [pytest.mark.step51, pytest.mark.torch]
step = load_step(51)


@given(pairs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40))
def test_the_confusion_matrix_counts_each_true_predicted_pair(pairs):
    target, predicted = (np.array(column) for column in zip(*pairs))
    matrix = step.confusion(predicted, target, classes=4)
    for i in range(4):
        for j in range(4):
            assert matrix[i, j] == sum(1 for t, p in pairs if (t, p) == (i, j))


def test_the_pages_confusion_matrix_rows_are_the_class_counts_and_its_diagonal_the_right_answers():
    t = step.t_test.data
    assert step.matrix.sum(axis=1).tolist() == np.bincount(t, minlength=10).tolist()
    assert np.trace(step.matrix) == int((step.predicted == t).sum())


def test_shifted_doubles_the_dataset_and_moves_each_image_one_pixel_right():
    images = np.arange(3 * 64, dtype=np.float64).reshape(3, 64)
    data = step.Shifted(TensorDataset(images, np.array([7, 8, 9])))
    assert len(data) == 6
    for i in range(3):
        image, digit = data[i]
        np.testing.assert_array_equal(image, images[i])
        shifted, same = data[3 + i]
        assert same == digit
        grid, original = shifted.reshape(8, 8), images[i].reshape(8, 8)
        np.testing.assert_array_equal(grid[:, 0], np.zeros(8))
        np.testing.assert_array_equal(grid[:, 1:], original[:, :-1])


def test_a_loader_serves_the_augmented_dataset():
    batches = list(DataLoader(step.augmented, batch_size=1000))
    assert [x.shape for x, _ in batches] == [(1000, 64)] * 3


@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=6), test_fraction=floats(0.0, 1.0),
       seed=st.integers(0, 2**32))
def test_a_stratified_split_keeps_each_class_in_proportion_and_covers_the_indices_once(counts, test_fraction, seed):
    targets = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(counts)), counts))
    tinypytorch.manual_seed(seed)
    train, test = step.stratified_split(targets, test_fraction)
    assert sorted(train + test) == list(range(len(targets)))
    for c, count in enumerate(counts):
        assert sum(1 for i in test if targets[i] == c) == round(test_fraction * count)


def test_a_stratified_split_draws_from_the_frameworks_generator():
    targets = np.repeat(np.arange(3), 50)
    tinypytorch.manual_seed(5)
    first = step.stratified_split(targets, 0.2)
    tinypytorch.manual_seed(5)
    assert step.stratified_split(targets, 0.2) == first
    assert step.stratified_split(targets, 0.2) != first  # the generator moved on


def test_the_pages_stratified_test_set_holds_297_digits_each_class_in_its_share():
    _, digits = step.datasets.load_digits()
    counts = np.bincount(digits[step.stratified], minlength=10)
    assert counts.sum() == 297
    assert np.all(np.abs(counts - np.bincount(digits) * 297 / 1797) <= 0.5)
