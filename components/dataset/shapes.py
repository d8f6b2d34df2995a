"""The builtin dataset (`builtin://shapes`): images of four shapes, drawn on the fly.

The pipeline's embedded default: a small image-classification task a CNN learns in
seconds, that needs no download and no account. The dataset stage draws each image in
its encoding processes and encodes it once (`draw_shape`); `generate_shapes` writes them
as an image folder, as a user's own data would be.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

SHAPE_CLASSES = ("circle", "cross", "square", "triangle")


#: Identity (and, in `generate_shapes`' folders, relative path) of each drawn image.
IDENTITY = "{label}/{label}_{index:05d}.png"
_IDENTITY = re.compile(r"(\w+)/\1_(\d+)\.png")


def draw_identity(identity: str, image_size: int = 32) -> Any:
    """Draws the image an `IDENTITY` names (`circle/circle_00007.png`)."""
    found = _IDENTITY.fullmatch(identity)
    if found is None:
        raise ValueError(f"{identity!r} names no builtin shape; expected e.g. "
                         f"{IDENTITY.format(label=SHAPE_CLASSES[0], index=7)!r}")
    return draw_shape(found[1], int(found[2]), image_size)


def draw_shape(label: str, index: int, image_size: int = 32, seed: int = 0) -> Any:
    """Draws image `index` of class `label` of the builtin shapes (a PIL RGB image).

    One filled shape (circle, cross, square, triangle) of random size, position and
    colour on a darker background of random colour, with pixel noise: a task a small CNN
    learns in seconds, yet one that needs spatial features. Each image has its own
    generator, seeded by (seed, label, index), so any process draws any image alone and
    the same arguments always draw the same pixels.
    """
    from PIL import Image, ImageDraw

    rng = random.Random(f"shapes:{seed}:{label}:{index}")
    scale = 4  # Draw large and downsample, for anti-aliased edges.
    big = image_size * scale
    # A darker background and a brighter shape, each of random colour: the shape's
    # outline, not its colour, tells the class.
    background = tuple(rng.randrange(0, 110) for _ in range(3))
    colour = tuple(rng.randrange(140, 256) for _ in range(3))
    img = Image.new("RGB", (big, big), background)
    draw = ImageDraw.Draw(img)
    size = rng.uniform(0.35, 0.8) * big
    cx = rng.uniform(size / 2, big - size / 2)
    cy = rng.uniform(size / 2, big - size / 2)
    half = size / 2
    if label == "circle":
        draw.ellipse([cx - half, cy - half, cx + half, cy + half], fill=colour)
    elif label == "square":
        draw.rectangle([cx - half, cy - half, cx + half, cy + half], fill=colour)
    elif label == "triangle":
        draw.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)],
                     fill=colour)
    elif label == "cross":
        bar = size / 6
        draw.rectangle([cx - half, cy - bar, cx + half, cy + bar], fill=colour)
        draw.rectangle([cx - bar, cy - half, cx + bar, cy + half], fill=colour)
    else:
        raise ValueError(f"unknown shape {label!r}; the shapes are {', '.join(SHAPE_CLASSES)}")
    img = img.resize((image_size, image_size), Image.BILINEAR)
    # Noise from the seeded generator (Pillow's effect_noise is not seedable).
    noise = Image.frombytes("RGB", (image_size, image_size),
                            rng.randbytes(image_size * image_size * 3))
    return Image.blend(img, noise, 0.06)


def generate_shapes(out_dir: str | os.PathLike, images_per_class: int = 400,
                    image_size: int = 32, seed: int = 0) -> Path:
    """Writes the builtin shapes (`draw_shape`) as PNG files in one folder per class.

    Args:
        out_dir: Directory to create the class folders in.
        images_per_class: Number of images per class.
        image_size: Width and height in pixels.
        seed: Seed of the generator; the same seed draws the same images.

    Returns:
        The output directory.
    """
    out = Path(out_dir)
    for label in SHAPE_CLASSES:
        (out / label).mkdir(parents=True, exist_ok=True)
        for i in range(images_per_class):
            draw_shape(label, i, image_size, seed).save(
                out / IDENTITY.format(label=label, index=i), optimize=False)
    return out
