"""Stage 5, export: the trained model's metrics, and its publication.

The model's metrics are those its serving signature scores on the dataset's encoded
images (`trainer.serving.measure`): measured by the trainer before it committed the model, and
measured here (with TensorFlow) only for a model that was measured on other data, such
as a champion from before the dataset changed. The model is then committed to the
exported model location with its metrics (`trainer.common.committed_dirs`: a fresh directory and a
marker written last, as Cloud Storage FUSE cannot rename directories).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.common.committed_dirs import MARKER, commit_directory, committed
from trainer.common.contract import load_manifest
from trainer.common.errors import StageError
from trainer.serving import measure


class ExportError(StageError):
    """The trained model is missing or unusable."""


def model_metrics(model_dir: str | os.PathLike,
                  dataset_dir: str | os.PathLike) -> tuple[dict[str, Any], bool]:
    """A model's metrics on the dataset's validation and test splits.

    Args:
        model_dir: A SavedModel directory, or a location one was committed to.
        dataset_dir: Prepared dataset directory.

    Returns:
        The metrics (`trainer.serving.measure.evaluate`), and whether they were read from
        beside the model rather than measured here.

    Raises:
        ExportError: The location holds no SavedModel, or it cannot be evaluated.
    """
    metrics, _, known = model_evaluation(model_dir, dataset_dir)
    return metrics, known


def model_evaluation(model_dir: str | os.PathLike, dataset_dir: str | os.PathLike
                     ) -> tuple[dict[str, Any], str, bool]:
    """`model_metrics`, and each held-out image right ("1") or wrong ("0") in file order
    (the gate's paired test): read from beside the model when it was measured on this
    dataset with them, else measured here.

    Raises:
        ExportError: The location holds no SavedModel, or it cannot be evaluated.
    """
    model_dir = saved_model_dir(model_dir)
    manifest = load_manifest(dataset_dir)
    known, correct = measure.read(model_dir, manifest), measure.correctness(model_dir, manifest)
    if known is not None and correct is not None:
        return known, correct, True
    import tensorflow as tf  # only for a model not measured on this data

    try:
        found = measure.evaluate(tf, model_dir, dataset_dir, manifest)
    except measure.EvaluationError as exc:
        raise ExportError(str(exc)) from None
    return found["metrics"], found["correct"]["images"], False


def model_classes(location: str | os.PathLike) -> list[str] | None:
    """The class names a model answers with, in label order (its serving metadata); None
    when it does not say (a model exported otherwise).

    Raises:
        ExportError: The location holds no SavedModel.
    """
    from trainer.serving.container import METADATA_FILE

    path = Path(saved_model_dir(location)) / METADATA_FILE
    try:
        return [str(name) for name in json.loads(path.read_text())["class_names"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def saved_model_dir(location: str | os.PathLike) -> str:
    """The SavedModel directory at `location`: itself, or the one committed under it.

    Raises:
        ExportError: Neither holds a SavedModel.
    """
    if (Path(location) / "saved_model.pb").is_file():
        return str(location)
    found = committed(location)
    if found is None:
        raise ExportError(f"{str(location)!r} holds no SavedModel and no committed one "
                          f"({MARKER}); did training finish?")
    return found


def publish_model(model_dir: str | os.PathLike, destination: str | os.PathLike,
                  metrics: dict[str, Any], dataset_dir: str | os.PathLike,
                  extra: dict[str, Any] | None = None, correct: str = "") -> str:
    """Commits a copy of the SavedModel under `destination`, with its evaluation beside it.

    Args:
        model_dir: Trained SavedModel directory (or where the trainer committed it).
        destination: Exported model location (`trainer.common.committed_dirs` layout).
        metrics: The model's metrics (`model_metrics`).
        dataset_dir: The dataset they were measured on (named in `evaluation.json`).
        extra: More JSON files for the copy, by name (e.g. `lineage.json`).
        correct: Each held-out image right or wrong (`model_evaluation`), kept for the
            next run's paired test, when this model is its champion.

    Returns:
        The committed SavedModel directory (what a model upload points at).
    """
    source = saved_model_dir(model_dir)
    manifest = load_manifest(dataset_dir)
    measured = {"dataset": measure.dataset_digest(manifest), "metrics": metrics}
    kept = measure.reference(source, manifest)
    if kept is not None:  # the serving check compares the model server's answers with it
        measured["reference"] = kept
    matrix = measure.confusion(source, manifest)
    if matrix is not None:  # the run's report draws it
        measured["confusion"] = matrix
    correct = correct or measure.correctness(source, manifest) or ""
    if correct:  # a later run's gate compares its challenger with this model image by image
        measured["correct"] = {"split": measure.reference_split(manifest), "images": correct}
    with commit_directory(destination, written_by="export") as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        for name, content in {measure.EVALUATION_FILE: measured, **(extra or {})}.items():
            (Path(staging) / name).write_text(json.dumps(content, indent=2) + "\n")
    return staging
