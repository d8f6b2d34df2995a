"""The dataset stage: a source -> sharded TFRecords per split, a manifest and a report.

Images are decoded, resized and re-encoded by a pool of processes (all cores) and written
as they come. Undecodable images are skipped and listed; above a threshold the stage fails.
Shards are written straight into the output directory (on Vertex AI a Cloud Storage FUSE
path, where directories cannot be renamed into place) and the manifest last: a directory
is a prepared dataset only once its manifest exists, and a failure removes what was
written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from components.dataset.dataset_report import REPORT_NAME, markdown_report
from components.dataset.encode import results
from components.dataset.options import DatasetOptions, stored_format
from components.dataset.shard_plan import estimated_bytes, plan_shards, split_of
from components.dataset.sources import DatasetError, Example, list_source
from trainer import contract, files, tfrecord
from trainer.schema import OptionsError, validate


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: `prepare_source`'s keyword values that are the run's, not dataset options.
_RUN_VALUES = ("min_shards", "processes", "builtin_images_per_class", "report_path")


def dataset_options(source: str, **values: Any) -> DatasetOptions:
    """Dataset options from keyword values, checked by their declaration.

    Raises:
        DatasetError: Naming each bad field, its value and what is valid.
    """
    try:
        return validate(DatasetOptions, {"source": source, **values}, prefix="dataset",
                        strict=False)
    except OptionsError as exc:
        raise DatasetError(str(exc)) from None


def prepare_source(source: str, output_dir: str | os.PathLike, **values: Any) -> dict[str, Any]:
    """`prepare_dataset` from keyword values (scripts, benchmarks, tests): the dataset
    options (`DatasetOptions` fields) and the run's own (`_RUN_VALUES`)."""
    run = {k: values.pop(k) for k in _RUN_VALUES if k in values}
    return prepare_dataset(dataset_options(source, **values), output_dir, **run)


def prepare_dataset(options: DatasetOptions, output_dir: str | os.PathLike, *,
                    min_shards: int = 1, processes: int = 0,
                    builtin_images_per_class: int = 400,
                    report_path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Prepares sharded TFRecords per split and a manifest from an image source.

    Args:
        options: What to prepare (source, image size, split fractions, shards, bad-image
            threshold, stored format), as declared in `DatasetOptions`.
        output_dir: Directory to create; must not exist or be empty.
        min_shards: Training workers; planned shard counts are multiples of it.
        processes: Decoding processes; 0 uses every core.
        builtin_images_per_class: Images per class drawn for `builtin://shapes`.
        report_path: Also write the Markdown report here (for a KFP Markdown artifact).

    Returns:
        The manifest (also written to `output_dir/manifest.json`).

    Raises:
        DatasetError: A parameter or the source is unusable, or too many images are bad.
    """
    if min_shards < 1:
        raise DatasetError(f"min_shards is {min_shards!r}; expected the number of training "
                           "workers, >= 1")
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise DatasetError(f"output directory {str(out)!r} is not empty")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare(options, out, min_shards, processes or os.cpu_count() or 1,
                        builtin_images_per_class, report_path)
    except BaseException:
        # Nothing half-written stays: the directory was empty (or absent) before.
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise


def _prepare(options: DatasetOptions, out: Path, min_shards: int, processes: int,
             builtin_images_per_class: int,
             report_path: str | os.PathLike | None) -> dict[str, Any]:
    """`prepare_dataset` once its parameters are checked: shards straight into `out` (on
    Vertex, a Cloud Storage FUSE path), the manifest last."""
    source, image_size, num_shards = options.source, options.image_size, options.num_shards
    validation_fraction, test_fraction = options.validation_fraction, options.test_fraction
    image_format = stored_format(options.image_format, source, image_size)
    listing = list_source(source, image_size, builtin_images_per_class)
    by_split = _split(listing, validation_fraction, test_fraction)
    shards = {split: min(num_shards, len(items)) if num_shards else plan_shards(
        len(items), estimated_bytes(len(items), image_size, image_format), min_shards)
        for split, items in by_split.items()}
    done = _write_shards(listing, by_split, shards, out, image_size, processes, image_format)
    total = sum(len(items) for items in by_split.values())
    _check_skipped(done, total, options.max_bad_fraction)
    manifest: dict[str, Any] = {
        "format_version": contract.FORMAT_VERSION,
        "classes": listing.classes,
        "image_size": [image_size, image_size, 3],
        "image_format": image_format,
        "features": {"image": contract.FEATURE_IMAGE, "label": contract.FEATURE_LABEL,
                     "id": contract.FEATURE_ID},
        "source": source,
        "source_kind": listing.kind,
        "source_fingerprint": listing.fingerprint,
        "validation_fraction": validation_fraction,
        "test_fraction": test_fraction,
        "examples": total,
        "skipped": done.skipped,
        "bad_fraction": len(done.skipped) / total if total else 0.0,
        "splits": {split: done.split_entry(split, out, listing.classes) for split in by_split},
    }
    report = markdown_report(manifest)
    files.write_text(out / REPORT_NAME, report)
    if report_path is not None:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        files.write_text(report_path, report)
    # Last: the manifest is what makes the directory a prepared dataset.
    contract.write_manifest(out, manifest)
    return manifest


def _split(listing: Any, validation_fraction: float,
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


@dataclasses.dataclass
class _Written:
    """What the writers wrote: per split, the shard files and their counts, the counts per
    class and in all; the skipped images."""

    names: dict[str, list[str]]
    counts: dict[str, list[int]]
    per_class: dict[str, list[int]]
    written: dict[str, int]
    skipped: list[dict[str, str]]

    def split_entry(self, split: str, out: Path, classes: list[str]) -> dict[str, Any]:
        """The manifest's entry of a split; a shard whose images were all skipped is
        removed."""
        shards = []
        for name, count in zip(self.names[split], self.counts[split], strict=True):
            if count:
                shards.append({"file": name, "count": count,
                               "bytes": (out / name).stat().st_size,
                               "sha256": _sha256_file(out / name)})
            else:
                (out / name).unlink()
        return {"count": self.written[split],
                "per_class": dict(zip(classes, self.per_class[split], strict=True)),
                "shards": shards}


def _write_shards(listing: Any, by_split: dict[str, list[Example]], shards: dict[str, int],
                  out: Path, image_size: int, processes: int, image_format: str) -> _Written:
    """Encodes every example in one ordered stream over the splits and writes each into
    its split's shards, round robin, as the results arrive."""
    order = [ex for items in by_split.values() for ex in items]
    split_of_index = [split for split, items in by_split.items() for _ in items]
    done = _Written(
        names={s: [f"{s}-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]
               for s, n in shards.items()},
        counts={s: [0] * n for s, n in shards.items()},
        per_class={s: [0] * len(listing.classes) for s in by_split},
        written={s: 0 for s in by_split}, skipped=[])
    writers: dict[str, list[Any]] = {}
    try:
        for split, names in done.names.items():
            writers[split] = [tfrecord.Writer(out / n) for n in names]
        for index, data, error, label in results(listing, order, image_size, processes,
                                                 image_format):
            ex, split = order[index], split_of_index[index]
            if data is None:
                done.skipped.append({"file": ex.ref, "reason": error or "unreadable"})
                continue
            label = ex.label if label is None else label
            shard = done.written[split] % shards[split]
            writers[split][shard].write(contract.serialize_example(data, label, ex.identity))
            done.counts[split][shard] += 1
            done.per_class[split][label] += 1
            done.written[split] += 1
    finally:
        for split_writers in writers.values():
            for w in split_writers:
                w.close()
    return done


def _check_skipped(done: _Written, total: int, max_bad_fraction: float) -> None:
    """Raises DatasetError when too many images were skipped, or a whole split."""
    bad_fraction = len(done.skipped) / total if total else 0.0
    if bad_fraction > max_bad_fraction:
        skipped = done.skipped
        first = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped[:5])
        raise DatasetError(f"{len(skipped)} of {total} images ({bad_fraction:.1%}) could not "
                           f"be decoded, above max_bad_fraction {max_bad_fraction:.1%}: "
                           f"{first}{' ...' if len(skipped) > 5 else ''}; fix or remove "
                           "them, or raise max_bad_fraction")
    for split, count in done.written.items():
        if not count:
            raise DatasetError(f"every image of the {split} split was skipped")
