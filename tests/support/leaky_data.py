"""Image folders whose test images leak into training, for the data checks' tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from components.dataset.splits import split_of


def copy_test_images_into_training(source: Path, classes: Iterable[str], copies: int,
                                   validation_fraction: float = 0.2,
                                   test_fraction: float = 0.1) -> None:
    """Copies `copies` images of the test split into training, under names that the split
    assignment (`split_of`) sends to train."""
    def split(name: str, file: str) -> str:
        return split_of(f"{name}/{file}", validation_fraction, test_fraction)

    made = 0
    for name in classes:
        for image in sorted((source / name).iterdir()):
            if made == copies or split(name, image.name) != "test":
                continue
            copy = next(f"copy{j}_{image.name}" for j in range(100)
                        if split(name, f"copy{j}_{image.name}") == "train")
            shutil.copy(image, source / name / copy)
            made += 1
    assert made == copies, f"only {made} test image(s) to copy"
