"""What the dataset stage notes of each image as it decodes it: its size and format as the
source stores it, a hash of its bytes (exact duplicates) and a perceptual hash of its
pixels (near duplicates: the same photo re-encoded, resized or slightly edited).

The perceptual hash is the difference hash (dHash): the image in grey, shrunk to 9x8,
one bit per pair of horizontal neighbours (is the left one brighter). Similar images
differ in few of the 64 bits; `hamming` counts them.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

#: The stored format of an image that was drawn, not read (the builtin shapes).
DRAWN = "drawn"


class Facts(NamedTuple):
    """One image's facts (a tuple, so that millions stay small and travel as JSON).

    Attributes:
        width: Its width in the source, in pixels.
        height: Its height in the source.
        format: Its format in the source as Pillow names it (`JPEG`, `PNG`...), `drawn` for
            a drawn image, or `array` for decoded pixels (TFDS).
        exact: The first 16 hex digits of the SHA-256 of its bytes in the source (of its
            pixels when drawn or decoded).
        dhash: Its 64-bit difference hash.
    """

    width: int
    height: int
    format: str
    exact: str
    dhash: int


def dhash(img: Any) -> int:
    """The 64-bit difference hash of a PIL image."""
    from PIL import Image

    grey = img.convert("L").resize((9, 8), Image.BILINEAR)
    pixels = grey.tobytes()  # one byte per pixel in mode L
    bits = 0
    for row in range(8):
        for col in range(8):
            left, right = pixels[row * 9 + col], pixels[row * 9 + col + 1]
            bits = (bits << 1) | (left > right)
    return bits


def hamming(a: int, b: int) -> int:
    """How many of two hashes' bits differ."""
    return (a ^ b).bit_count()


def facts_of(img: Any, data: bytes | None = None, image_format: str | None = None) -> Facts:
    """The facts of a decoded PIL image, read from `data` (its bytes in the source; None
    for a drawn image, whose pixels are hashed instead)."""
    content = data if data is not None else img.tobytes()
    return Facts(img.width, img.height,
                 image_format or (img.format if data is not None and img.format else DRAWN),
                 hashlib.sha256(content).hexdigest()[:16], dhash(img))
