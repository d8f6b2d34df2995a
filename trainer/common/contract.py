"""The prepared dataset's contract: what the dataset stage writes and training and export read.

A prepared dataset is a directory with `manifest.json` and TFRecord shards per split. Each
record is a `tf.train.Example` with the encoded image, its label index and its identity.
The dataset stage (`components.dataset`) produces it; the trainer and the export stage
consume it; all three import these names from here and nowhere else (the pattern of TF
Model Garden's `tf_example_feature_key`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainer.common import files, tfrecord
from trainer.common.errors import InputError

MANIFEST_NAME = "manifest.json"
#: Version of the manifest layout; readers refuse a newer one.
FORMAT_VERSION = 2
SPLITS = ("train", "validation", "test")

# Feature keys of every tf.train.Example.
FEATURE_IMAGE = "image/encoded"
FEATURE_LABEL = "image/class/label"
FEATURE_ID = "image/id"


class ManifestError(InputError):
    """A directory that is not a prepared dataset this code can read."""


def feature_spec(tf: Any) -> dict[str, Any]:
    """The parsing spec of the image and label features (`tf.io.parse_example`)."""
    return {FEATURE_IMAGE: tf.io.FixedLenFeature([], tf.string),
            FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64)}


def serialize_example(image: bytes, label: int, identity: str) -> bytes:
    """One record: encoded image bytes, label index and identity, serialised (a
    `tf.train.Example`, written without TensorFlow: `trainer.common.tfrecord`)."""
    return tfrecord.example({FEATURE_IMAGE: [image], FEATURE_LABEL: [label],
                             FEATURE_ID: [identity.encode("utf-8")]})


def write_manifest(dataset_dir: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Writes the manifest, the last file of a prepared dataset (its completion marker).

    Written beside and replaced in one step, so readers see the whole manifest or none;
    replacing a file (not a directory) works on Cloud Storage FUSE too.
    """
    files.write_json(Path(dataset_dir) / MANIFEST_NAME, manifest)


def load_manifest(dataset_dir: str | os.PathLike) -> dict[str, Any]:
    """Reads the manifest of a prepared dataset.

    Raises:
        ManifestError: The directory holds no manifest, or one of a newer format.
    """
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{str(dataset_dir)!r} is not a prepared dataset (no {MANIFEST_NAME})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{str(path)!r} is not a valid manifest ({exc})") from None
    version = manifest.get("format_version", 0) if isinstance(manifest, dict) else None
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ManifestError(f"{str(path)!r} has format_version {version!r}; this code reads "
                            f"versions up to {FORMAT_VERSION}")
    return manifest


def image_format(manifest: dict[str, Any]) -> str:
    """How the dataset's shards store images, `png` or `jpeg` (datasets prepared before
    the manifest said so are PNG)."""
    return manifest.get("image_format", "png")


def shard_paths(dataset_dir: str | os.PathLike, manifest: dict[str, Any], split: str) -> list[str]:
    """The absolute paths of a split's shards, in manifest order."""
    return [str(Path(dataset_dir) / s["file"]) for s in manifest["splits"][split]["shards"]]
