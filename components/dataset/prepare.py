"""The dataset stage: a source -> sharded TFRecords per split, a manifest and a report.

One shard assignment (`splits.assign_shards`: the split and shard of every example), two
engines that carry it out with the same per-image work (`encode`): `local`, a pool of processes on
this machine's cores (`local_engine`), and `beam`, an Apache Beam pipeline, in this process
or as a Dataflow job (`beam_engine`, `dataflow`). Undecodable images are skipped and
listed; above a threshold the stage fails.
Shards are written straight into the output directory (on Vertex AI a Cloud Storage FUSE
path, where directories cannot be renamed into place) and the manifest last: a directory
is a prepared dataset only once its manifest exists, and a failure removes what was
written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from components.dataset.data_statistics import statistics
from components.dataset.dataflow import DataflowJob
from components.dataset.dataset_options import DatasetOptions
from components.dataset.dataset_report import REPORT_NAME, markdown_report
from components.dataset.local_engine import write_locally
from components.dataset.sources import DatasetError
from components.dataset.splits import assign_shards
from trainer.common import contract, files
from trainer.common.schema import OptionsError, validate

#: `prepare_source`'s keyword values that are the run's, not dataset options.
_RUN_VALUES = ("input_pipelines", "processes", "builtin_images_per_class", "report_path",
               "dataflow")


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
                    input_pipelines: int = 1, processes: int = 0,
                    builtin_images_per_class: int = 400,
                    report_path: str | os.PathLike | None = None,
                    dataflow: DataflowJob | None = None) -> dict[str, Any]:
    """Prepares sharded TFRecords per split and a manifest from an image source.

    Args:
        options: What to prepare (source, image size, split fractions, shards, bad-image
            threshold, stored format), as declared in `DatasetOptions`.
        output_dir: Directory to create; must not exist or be empty.
        input_pipelines: Stage 1's input pipelines (the processes that read the training
            data); shard counts are multiples of it.
        processes: Decoding processes; 0 uses every core.
        builtin_images_per_class: Images per class drawn for `builtin://shapes`.
        report_path: Also write the Markdown report here (for a KFP Markdown artifact).
        dataflow: With `options.engine` `beam`, the Dataflow job to run it as; None runs
            Beam in this process (`processes` SDK workers).

    Returns:
        The manifest (also written to `output_dir/manifest.json`).

    Raises:
        DatasetError: A parameter or the source is unusable, or too many images are bad.
    """
    if input_pipelines < 1:
        raise DatasetError(f"input_pipelines is {input_pipelines!r}; expected the number of "
                           "processes that read the training data, >= 1")
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()):
        raise DatasetError(f"output directory {str(out)!r} is not empty")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare(options, out, input_pipelines, processes or os.cpu_count() or 1,
                        builtin_images_per_class, report_path, dataflow)
    except BaseException:
        # Nothing half-written stays: the directory was empty (or absent) before.
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise


def _prepare(options: DatasetOptions, out: Path, input_pipelines: int, processes: int,
             builtin_images_per_class: int, report_path: str | os.PathLike | None,
             dataflow: DataflowJob | None) -> dict[str, Any]:
    """`prepare_dataset` once its parameters are checked: shards straight into `out` (on
    Vertex, a Cloud Storage FUSE path) by the chosen engine, the manifest last."""
    assignment = assign_shards(options, input_pipelines, builtin_images_per_class)
    if options.engine == "beam":
        try:
            from components.dataset.beam_engine import write_with_beam
        except ModuleNotFoundError as exc:
            if exc.name != "apache_beam":
                raise
            raise DatasetError("dataset.engine is 'beam', but Apache Beam is not installed: "
                               "install the project with the [beam] extra "
                               "(pip install -e '.[beam]')") from None
        written = write_with_beam(assignment, out, processes, dataflow)
    else:
        written = write_locally(assignment, out, processes)
    written.check(list(assignment.by_split), assignment.total, options.max_bad_fraction)
    listing = assignment.listing
    manifest: dict[str, Any] = {
        "format_version": contract.FORMAT_VERSION,
        "classes": listing.classes,
        "image_size": [assignment.image_size, assignment.image_size, 3],
        "image_format": assignment.image_format,
        "features": {"image": contract.FEATURE_IMAGE, "label": contract.FEATURE_LABEL,
                     "id": contract.FEATURE_ID},
        "source": options.source,
        "source_kind": listing.kind,
        "source_fingerprint": listing.fingerprint,
        "validation_fraction": options.validation_fraction,
        "test_fraction": options.test_fraction,
        "examples": assignment.total,
        "skipped": written.skipped,
        "bad_fraction": len(written.skipped) / assignment.total if assignment.total else 0.0,
        "splits": {split: written.split_entry(split, listing.classes)
                   for split in assignment.by_split},
        "statistics": statistics(written.facts, options.near_duplicate_difference),
        **({"dataflow_job": written.dataflow} if written.dataflow else {}),
    }
    report = markdown_report(manifest)
    files.write_text(out / REPORT_NAME, report)
    if report_path is not None:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        files.write_text(report_path, report)
    # Last: the manifest is what makes the directory a prepared dataset.
    contract.write_manifest(out, manifest)
    return manifest
