"""The UCI handwritten digits (1,797 images of 8x8 pixels, 17 grey levels, 10 classes) as
an image folder: a real dataset for the near-duplicate check's calibration.

`data/uci_digits.csv.gz` is scikit-learn's copy of the test set of "Optical Recognition of
Handwritten Digits" (E. Alpaydin, C. Kaynak, UCI Machine Learning Repository, 1998,
https://archive.ics.uci.edu/dataset/80, CC BY 4.0): a line per image, 64 pixel values
0-16 then the digit.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DIGITS = Path(__file__).parent / "data" / "uci_digits.csv.gz"


def digit_images(size: int = 32) -> Iterator[tuple[Any, int]]:
    """Each digit as a grey PIL image of `size` pixels a side (bilinear from 8x8), with
    its label."""
    from PIL import Image

    with gzip.open(DIGITS, "rt") as lines:
        for line in lines:
            values = [int(v) for v in line.split(",")]
            pixels = bytes(round(v * 255 / 16) for v in values[:64])
            img = Image.frombytes("L", (8, 8), pixels)
            yield (img.resize((size, size), Image.BILINEAR) if size != 8 else img), values[64]


def write_digits(out_dir: Path, size: int = 32, limit: int | None = None) -> Path:
    """The digits as PNG files in a folder per digit (`digit_3/00017.png`)."""
    for index, (img, label) in enumerate(digit_images(size)):
        if limit is not None and index == limit:
            break
        folder = out_dir / f"digit_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        img.save(folder / f"{index:05d}.png")
    return out_dir
