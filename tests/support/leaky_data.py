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


def copy_training_images_into_test(source: Path, name: str, byte_copies: int,
                                   resized_copies: int, validation_fraction: float = 0.2,
                                   test_fraction: float = 0.1) -> list[str]:
    """Copies training images of class `name` into the test split, under names that
    `split_of` sends there: `byte_copies` as they are, then `resized_copies` resized
    (alternately to 3/4 as JPEG quality 75 and to 3/2 as PNG). Returns the copies' names
    relative to `source`."""
    from PIL import Image

    def split(file: str) -> str:
        return split_of(f"{name}/{file}", validation_fraction, test_fraction)

    made: list[str] = []
    for image in sorted((source / name).iterdir()):
        if len(made) == byte_copies + resized_copies:
            break
        if split(image.name) != "train":
            continue
        resized = len(made) >= byte_copies
        suffix = (".jpg" if len(made) % 2 else ".png") if resized else image.suffix
        copy = next(f"copy{j}_{image.stem}{suffix}" for j in range(200)
                    if split(f"copy{j}_{image.stem}{suffix}") == "test")
        if not resized:
            shutil.copy(image, source / name / copy)
        else:
            with Image.open(image) as img:
                scale = 0.75 if suffix == ".jpg" else 1.5
                side = round(img.width * scale), round(img.height * scale)
                img.convert("RGB").resize(side, Image.BICUBIC).save(
                    source / name / copy, **({"quality": 75} if suffix == ".jpg" else {}))
        made.append(f"{name}/{copy}")
    assert len(made) == byte_copies + resized_copies, f"only {len(made)} training image(s)"
    return made
