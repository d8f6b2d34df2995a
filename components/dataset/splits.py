"""The shard assignment both engines carry out: which split and shard each example goes
to, and how many shards each split gets (`assign_shards`)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterator

from components.dataset.dataset_options import DatasetOptions, stored_format
from components.dataset.sources import DatasetError, Example, SourceListing, list_source
from trainer.common import contract

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


def shard_count(examples: int, estimated_bytes: int, input_pipelines: int,
                target_bytes: int = TARGET_SHARD_BYTES) -> int:
    """Shards for a split: a multiple of the input pipelines, about `target_bytes` each.

    At least `input_pipelines` (stage 1's input pipelines: the processes that read the data),
    so each reads its own files; a multiple of it, so they read equal shares; never more
    than there are examples.
    """
    by_size = max(1, math.ceil(estimated_bytes / target_bytes))
    shards = max(input_pipelines, math.ceil(by_size / input_pipelines) * input_pipelines)
    return max(1, min(shards, examples))


def shard_names(split: str, shards: int) -> list[str]:
    """The file names of a split's shards (`train-00003-of-00008.tfrecord`)."""
    return [f"{split}-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]


@dataclasses.dataclass(frozen=True)
class ShardAssignment:
    """What both engines write, decided before any image is read.

    Attributes:
        listing: What the source holds.
        by_split: The examples of each split, in listing order.
        shards: Shards of each split.
        image_size: Width and height of the stored images.
        image_format: `png` or `jpeg`.
    """

    listing: SourceListing
    by_split: dict[str, list[Example]]
    shards: dict[str, int]
    image_size: int
    image_format: str

    @property
    def total(self) -> int:
        """Examples in all splits."""
        return sum(len(items) for items in self.by_split.values())

    def assignments(self) -> Iterator[tuple[Example, str, int]]:
        """Every example with its split and shard, split after split: the n-th example of
        a split goes to shard n mod its shard count, so shards hold equal shares."""
        for split, items in self.by_split.items():
            for position, example in enumerate(items):
                yield example, split, position % self.shards[split]


def assign_shards(options: DatasetOptions, input_pipelines: int,
                 builtin_images_per_class: int) -> ShardAssignment:
    """Lists the source and assigns every example its split and shard.

    Raises:
        DatasetError: The source is unusable, or a split would be empty.
    """
    image_format = stored_format(options.image_format, options.source, options.image_size)
    listing = list_source(options.source, options.image_size, builtin_images_per_class)
    by_split = _split(listing, options.validation_fraction, options.test_fraction)
    shards = {split: min(options.num_shards, len(items)) if options.num_shards else
              shard_count(len(items), estimated_bytes(len(items), options.image_size,
                                                      image_format), input_pipelines)
              for split, items in by_split.items()}
    return ShardAssignment(listing, by_split, shards, options.image_size, image_format)


def _split(listing: SourceListing, validation_fraction: float,
           test_fraction: float) -> dict[str, list[Example]]:
    """The examples of each split the dataset has (test only with a test fraction), by the
    hash of each identity; a split left empty is an error."""
    wanted = [s for s in contract.SPLITS if s != "test" or test_fraction > 0]
    by_split: dict[str, list[Example]] = {s: [] for s in wanted}
    for ex in listing.examples:
        split = split_of(ex.identity, validation_fraction, test_fraction)
        if split in by_split:
            by_split[split].append(ex)
    for split, items in by_split.items():
        if not items:
            raise DatasetError(f"the {split} split is empty ({len(listing.examples)} "
                               f"examples, validation_fraction={validation_fraction}, "
                               f"test_fraction={test_fraction}); add images or change "
                               "the fractions")
    return by_split
