"""Planning: which split each example goes to, and how many shards each split gets."""

from __future__ import annotations

import hashlib
import math

#: Aim per shard for large data (the TFRecord guide's 100-200 MB).
TARGET_SHARD_BYTES = 150 * 2**20


#: Stored bytes per pixel of photos at 224x224 (benchmarks/input_pipeline.py: 17,853 and
#: 88,432 bytes per image), to plan shards by the size they will have, not the sources'.
BYTES_PER_PIXEL = {"jpeg": 0.36, "png": 1.76}


def estimated_bytes(examples: int, image_size: int, image_format: str) -> int:
    """What `examples` stored images of `image_size` will take in the shards (photos; the
    synthetic shapes take less, but are small anyway)."""
    return math.ceil(examples * image_size * image_size * BYTES_PER_PIXEL[image_format])


def split_of(identity: str, validation_fraction: float, test_fraction: float = 0.0) -> str:
    """Assigns an example to a split by a hash of its identity.

    The same identity always lands in the same split, and adding examples never moves
    existing ones.
    """
    digest = hashlib.sha256(identity.encode("utf-8")).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    if position < test_fraction:
        return "test"
    if position < test_fraction + validation_fraction:
        return "validation"
    return "train"


def plan_shards(examples: int, estimated_bytes: int, min_shards: int,
                target_bytes: int = TARGET_SHARD_BYTES) -> int:
    """Shards for a split: a multiple of the worker count, about `target_bytes` each.

    At least `min_shards` (the training workers), so each worker reads its own files; a
    multiple of it, so they read equal shares; never more than there are examples.
    """
    by_size = max(1, math.ceil(estimated_bytes / target_bytes))
    shards = max(min_shards, math.ceil(by_size / min_shards) * min_shards)
    return max(1, min(shards, examples))
