"""`tfds://NAME[/SPLIT]`: a TensorFlow Datasets dataset already on disk (the [tfds] extra;
never downloaded), listed and read by TFDS itself in one stream."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

from components.dataset.sources.base import (
    DatasetError,
    Example,
    SourceKind,
    SourceListing,
)
from trainer.common.errors import first_line
from trainer.common.shell_name import command

TFDS_PREFIX = "tfds://"

class Tfds(SourceKind):
    name = "tfds"
    form = f"{TFDS_PREFIX}NAME[/SPLIT] (a TensorFlow Datasets dataset on this machine's disk)"
    one_stream = True

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.startswith(TFDS_PREFIX)

    @classmethod
    def problem(cls, source: str) -> str | None:
        return None if re.fullmatch(r"[a-z0-9_]+(:[0-9.]+)?(/[\w\[\]:%+.-]+)?",
                                    source[len(TFDS_PREFIX):]) \
            else "expected tfds://NAME or tfds://NAME/SPLIT"

    @classmethod
    def preflight(cls, source: str) -> None:
        _tfds_builder(source)

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return ("a TensorFlow Datasets dataset on this machine's disk, which the pipeline on "
                "Vertex AI cannot read: its images hold neither TFDS nor the data; export the "
                "images to Cloud Storage as class folders or a CSV/JSONL manifest and give its "
                f"gs:// URI (or run it locally: {command()} run --local)")

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_tfds(source)

    @classmethod
    def bulk_results(cls, order: list[Example], image_size: int,
                     image_format: str) -> Iterator[Any] | None:
        return tfds_results(order, image_size, image_format)


def _list_tfds(source: str) -> SourceListing:
    name, _, split = source[len(TFDS_PREFIX):].partition("/")
    info = _tfds_builder(source).info
    classes = list(info.features["label"].names)
    split = split or "train"
    total = info.splits[split].num_examples
    examples = [Example(f"{source}#{i}", f"{name}/{split}/{i}", -1) for i in range(total)]
    fingerprint = f"tfds:{name}:{info.version}:{split}:{total}"
    return SourceListing("tfds", classes, examples, fingerprint)


def _tfds_builder(source: str) -> Any:
    """The TFDS builder of a `tfds://` source, checked to be prepared on disk."""
    name = source[len(TFDS_PREFIX):].partition("/")[0]
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"dataset source {source!r} needs tensorflow-datasets: install the "
                           "project with the [tfds] extra") from None
    try:
        builder = tfds.builder(name)
        prepared = os.path.isdir(builder.data_dir) and bool(os.listdir(builder.data_dir))
    except Exception as exc:  # noqa: BLE001 - tfds raises many types for unknown names
        # The first line only: tfds appends every dataset it knows (over 20 KB).
        raise DatasetError(f"TFDS dataset {name!r} cannot be used: {first_line(exc)}") from None
    if not prepared:
        raise DatasetError(f"TFDS dataset {name!r} is not on disk under {builder.data_dir}; "
                           "prepare it first (this stage never downloads)")
    return builder


def tfds_results(order: Sequence[Example], size: int, image_format: str) -> Iterator[Any]:
    """Encoded TFDS images, with the labels TFDS stores (read in TFDS order)."""
    import tensorflow_datasets as tfds
    from PIL import Image

    from components.dataset.encode import to_bytes  # the decoding pool's own encoding
    from components.dataset.image_facts import facts_of


    source = order[0].ref.split("#", 1)[0]
    name, _, split = source[len(TFDS_PREFIX):].partition("/")
    wanted = {int(e.ref.rsplit("#", 1)[1]): i for i, e in enumerate(order)}
    dataset = tfds.as_numpy(tfds.load(name, split=split or "train", download=False,
                                      as_supervised=True, shuffle_files=False))
    for position, (image, label) in enumerate(dataset):
        if position in wanted:
            if image.ndim == 3 and image.shape[-1] == 1:  # grayscale (MNIST): PIL wants HxW
                image = image[..., 0]
            img = Image.fromarray(image)
            # TFDS hands over decoded pixels: their source format is not known here.
            yield (wanted[position], to_bytes(img, size, image_format), None, int(label),
                   facts_of(img, image_format="array"))
