"""Small data sets for step 51's classifiers, generated or shipped with the package (no download).

    spiral       points on interleaved spiral arms, one class an arm: a toy no straight line separates
    load_digits  1,797 handwritten digits, 8 x 8 pixels (UCI's test set, as scikit-learn ships it)
"""
import gzip
import pathlib

import numpy as np

DIGITS = pathlib.Path(__file__).with_name("digits.csv.gz")  # where it comes from: DIGITS_LICENSE.txt


def spiral(points_per_class=100, classes=3, noise=0.2, seed=0):
    """(x, t): `classes` spiral arms of `points_per_class` 2-D points each, and each point's arm (int64).

    Point i of arm k sits at radius r = i / points_per_class, angle 4r + 2 pi k / classes, plus noise.
    """
    rng = np.random.default_rng(seed)
    radius = np.tile(np.arange(points_per_class) / points_per_class, classes)
    arm = np.repeat(np.arange(classes), points_per_class)
    angle = 4.0 * radius + 2.0 * np.pi * arm / classes + noise * rng.standard_normal(radius.size)
    x = np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1)
    return x, arm.astype(np.int64)


def load_digits():
    """(images, digits): float64 images of shape (1797, 8, 8), pixels 0-16, and the digit each shows (int64)."""
    with gzip.open(DIGITS, "rt") as file:
        table = np.loadtxt(file, delimiter=",")
    return table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(np.int64)


__all__ = ["spiral", "load_digits"]
