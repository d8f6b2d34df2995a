"""Dataset preparation: image folders -> sharded TFRecords with a manifest.

Plain functions; the KFP component in `components.ops` only calls `prepare_dataset`.
The embedded default source, `builtin://shapes`, is a small image-classification
dataset that this module draws itself (no download), so the pipeline runs offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

BUILTIN_SHAPES = "builtin://shapes"
SHAPE_CLASSES = ("circle", "cross", "square", "triangle")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "validation")

# Feature keys of every tf.train.Example the stage writes and the trainer reads.
FEATURE_IMAGE = "image/encoded"
FEATURE_LABEL = "image/class/label"
FEATURE_ID = "image/id"


class DatasetError(ValueError):
    """A dataset source or parameter the stage cannot use."""


def generate_shapes(out_dir: str | os.PathLike, images_per_class: int = 300,
                    image_size: int = 32, seed: int = 0) -> Path:
    """Draws the builtin shapes dataset as PNG files in one folder per class.

    Each image is one filled shape (circle, cross, square, triangle) of random size,
    position and colour on a darker background of random colour, with pixel noise: a
    task a small CNN learns in seconds, yet one that needs spatial features.

    Args:
        out_dir: Directory to create the class folders in.
        images_per_class: Number of images per class.
        image_size: Width and height in pixels.
        seed: Seed of the generator; the same seed draws the same images.

    Returns:
        The output directory.
    """
    from PIL import Image, ImageDraw

    out = Path(out_dir)
    rng = random.Random(seed)
    scale = 4  # Draw large and downsample, for anti-aliased edges.
    big = image_size * scale
    for label in SHAPE_CLASSES:
        (out / label).mkdir(parents=True, exist_ok=True)
    for i in range(images_per_class):
        for label in SHAPE_CLASSES:
            # A darker background and a brighter shape, each of random colour: the
            # shape's outline, not its colour, tells the class.
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
            else:  # cross
                bar = size / 6
                draw.rectangle([cx - half, cy - bar, cx + half, cy + bar], fill=colour)
                draw.rectangle([cx - bar, cy - half, cx + bar, cy + half], fill=colour)
            img = img.resize((image_size, image_size), Image.BILINEAR)
            # Noise from the seeded generator (Pillow's effect_noise is not seedable).
            noise = Image.frombytes("RGB", (image_size, image_size),
                                    rng.randbytes(image_size * image_size * 3))
            img = Image.blend(img, noise, 0.06)
            img.save(out / label / f"{label}_{i:05d}.png", optimize=False)
    return out


def list_image_folder(source_dir: str | os.PathLike) -> tuple[list[str], list[tuple[str, int]]]:
    """Lists an image folder with one sub-folder per class.

    Args:
        source_dir: Directory whose sub-folders are the class names.

    Returns:
        (class names sorted, [(path relative to source_dir, label index), ...]).

    Raises:
        DatasetError: The directory is missing, has fewer than two classes, or a class
            folder holds no image.
    """
    root = Path(source_dir)
    if not root.is_dir():
        raise DatasetError(f"dataset source {str(source_dir)!r} is not a directory; expected a "
                           f"folder with one sub-folder of images per class, or {BUILTIN_SHAPES!r}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DatasetError(f"dataset source {str(source_dir)!r} has {len(classes)} class "
                           f"folder(s) ({', '.join(classes) or 'none'}); classification needs "
                           "at least 2")
    examples: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).rglob("*")
                       if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
        if not files:
            raise DatasetError(f"class folder {str(root / name)!r} holds no image "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
        examples.extend((str(p.relative_to(root)), label) for p in files)
    return classes, examples


def split_of(identity: str, validation_fraction: float) -> str:
    """Assigns an example to a split by a hash of its identity.

    The same identity always lands in the same split, and adding examples never moves
    existing ones.
    """
    digest = hashlib.sha256(identity.encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    return "validation" if position < validation_fraction else "train"


def _fingerprint(root: Path, examples: list[tuple[str, int]]) -> str:
    h = hashlib.sha256()
    for rel, label in examples:
        stat = (root / rel).stat()
        h.update(f"{rel}\0{label}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
    return h.hexdigest()


def _encode_image(path: Path, image_size: int) -> bytes:
    import io

    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        if img.size != (image_size, image_size):
            img = img.resize((image_size, image_size), Image.BILINEAR)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        return buf.getvalue()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare_dataset(source: str, output_dir: str | os.PathLike, image_size: int = 32,
                    validation_fraction: float = 0.2, num_shards: int = 4,
                    builtin_images_per_class: int = 300) -> dict[str, Any]:
    """Prepares sharded TFRecords (train/validation) and a manifest from an image folder.

    Shards are written to a temporary directory beside `output_dir` and moved into place
    only when complete, so a failure never leaves a partial dataset behind.

    Args:
        source: A directory with one sub-folder per class, or `builtin://shapes`.
        output_dir: Directory to create; must not exist or be empty.
        image_size: Images are resized to image_size x image_size RGB.
        validation_fraction: Fraction of examples in the validation split, in (0, 1).
        num_shards: Shards per split; at least the number of training workers, so that
            every worker reads its own files.
        builtin_images_per_class: Images per class drawn for `builtin://shapes`.

    Returns:
        The manifest (also written to `output_dir/manifest.json`).

    Raises:
        DatasetError: A parameter or the source is unusable.
    """
    if not 0.0 < validation_fraction < 1.0:
        raise DatasetError(f"validation_fraction is {validation_fraction!r}; expected a number "
                           "strictly between 0 and 1")
    if num_shards < 1:
        raise DatasetError(f"num_shards is {num_shards!r}; expected an integer >= 1")
    if image_size < 8:
        raise DatasetError(f"image_size is {image_size!r}; expected an integer >= 8")
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise DatasetError(f"output directory {str(out)!r} is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix=".dataset-", dir=out.parent) as work:
        work_dir = Path(work)
        if source == BUILTIN_SHAPES:
            src_root = generate_shapes(work_dir / "source", builtin_images_per_class, image_size)
        else:
            src_root = Path(source)
        classes, examples = list_image_folder(src_root)
        fingerprint = (f"{BUILTIN_SHAPES}?images_per_class={builtin_images_per_class}"
                       f"&image_size={image_size}" if source == BUILTIN_SHAPES
                       else _fingerprint(src_root, examples))

        by_split: dict[str, list[tuple[str, int]]] = {s: [] for s in SPLITS}
        for rel, label in examples:
            by_split[split_of(rel, validation_fraction)].append((rel, label))
        for split, items in by_split.items():
            if not items:
                raise DatasetError(f"the {split} split is empty ({len(examples)} examples, "
                                   f"validation_fraction={validation_fraction}); add images "
                                   "or change validation_fraction")

        staging = work_dir / "shards"
        staging.mkdir()
        manifest: dict[str, Any] = {
            "format_version": 1,
            "classes": classes,
            "image_size": [image_size, image_size, 3],
            "image_format": "png",
            "features": {"image": FEATURE_IMAGE, "label": FEATURE_LABEL, "id": FEATURE_ID},
            "source": source,
            "source_fingerprint": fingerprint,
            "validation_fraction": validation_fraction,
            "splits": {},
        }
        import tensorflow as tf  # Late import: only this function needs TFRecord writing.

        for split, items in by_split.items():
            n = min(num_shards, len(items))
            names = [f"{split}-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]
            writers = [tf.io.TFRecordWriter(str(staging / name)) for name in names]
            counts = [0] * n
            per_class = [0] * len(classes)
            try:
                for i, (rel, label) in enumerate(items):
                    example = tf.train.Example(features=tf.train.Features(feature={
                        FEATURE_IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[_encode_image(src_root / rel, image_size)])),
                        FEATURE_LABEL: tf.train.Feature(int64_list=tf.train.Int64List(
                            value=[label])),
                        FEATURE_ID: tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[rel.encode("utf-8")])),
                    }))
                    writers[i % n].write(example.SerializeToString())
                    counts[i % n] += 1
                    per_class[label] += 1
            finally:
                for w in writers:
                    w.close()
            manifest["splits"][split] = {
                "count": len(items),
                "per_class": dict(zip(classes, per_class)),
                "shards": [{"file": name, "count": c, "bytes": (staging / name).stat().st_size,
                            "sha256": _sha256_file(staging / name)}
                           for name, c in zip(names, counts)],
            }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        shutil.move(str(staging), str(out))
    return manifest


def load_manifest(dataset_dir: str | os.PathLike) -> dict[str, Any]:
    """Reads the manifest of a prepared dataset.

    Raises:
        DatasetError: The directory holds no manifest.
    """
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        raise DatasetError(f"{str(dataset_dir)!r} is not a prepared dataset (no {MANIFEST_NAME})")
    return json.loads(path.read_text())


def shard_paths(dataset_dir: str | os.PathLike, manifest: dict[str, Any], split: str) -> list[str]:
    """Returns the absolute paths of a split's shards, in manifest order."""
    return [str(Path(dataset_dir) / s["file"]) for s in manifest["splits"][split]["shards"]]
