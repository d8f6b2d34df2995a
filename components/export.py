"""Stage 5, export: load the trained SavedModel back, evaluate it, and publish it.

The model is evaluated through its serving signature on the validation split's encoded
images, exactly as a prediction client would send them, then committed to the exported
model location with its metrics (`trainer.commit`: a fresh directory and a marker written
last, as Cloud Storage FUSE cannot rename directories).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.commit import MARKER, commit_directory, committed
from trainer.contract import (
    FEATURE_IMAGE,
    FEATURE_LABEL,
    feature_spec,
    load_manifest,
    shard_paths,
)
from trainer.errors import StageError


class ExportError(StageError):
    """The trained model is missing or unusable."""


def evaluate_saved_model(model_dir: str | os.PathLike, dataset_dir: str | os.PathLike,
                         split: str = "validation", batch_size: int = 256) -> dict[str, Any]:
    """Evaluates a SavedModel's `serving_default` signature on a dataset split.

    Args:
        model_dir: A SavedModel directory, or a location the trainer committed one to.
        dataset_dir: Prepared dataset directory.
        split: Split to evaluate on.
        batch_size: Examples per signature call.

    Returns:
        Metrics: `accuracy`, `examples`, per-class `accuracy_<class>`.

    Raises:
        ExportError: The model directory holds no SavedModel or lacks the signature.
    """
    from trainer.export import SIGNATURE_BYTES

    model_dir = saved_model_dir(model_dir)
    if not (Path(model_dir) / "saved_model.pb").is_file():
        raise ExportError(f"{str(model_dir)!r} holds no SavedModel (no saved_model.pb)")
    import tensorflow as tf  # The SavedModel is served without Keras.

    loaded = tf.saved_model.load(str(model_dir))
    if SIGNATURE_BYTES not in loaded.signatures:
        raise ExportError(f"SavedModel {str(model_dir)!r} has no {SIGNATURE_BYTES!r} signature "
                          f"(has: {', '.join(loaded.signatures) or 'none'})")
    serve = loaded.signatures[SIGNATURE_BYTES]
    manifest = load_manifest(dataset_dir)
    classes = manifest["classes"]
    features = feature_spec(tf)
    ds = (tf.data.TFRecordDataset(shard_paths(dataset_dir, manifest, split))
          .batch(batch_size)
          .map(lambda r: tf.io.parse_example(r, features)))
    correct = [0] * len(classes)
    total = [0] * len(classes)
    for batch in ds:
        predicted = serve(image_bytes=batch[FEATURE_IMAGE])["class_index"].numpy()
        for label, guess in zip(batch[FEATURE_LABEL].numpy(), predicted):
            total[label] += 1
            correct[label] += int(label == guess)
    examples = sum(total)
    if examples == 0:
        raise ExportError(f"the {split} split of {str(dataset_dir)!r} is empty")
    metrics: dict[str, Any] = {"accuracy": sum(correct) / examples, "examples": examples}
    for name, c, t in zip(classes, correct, total):
        metrics[f"accuracy_{name}"] = c / t if t else 0.0
    return metrics


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
                  metrics: dict[str, Any], extra: dict[str, Any] | None = None) -> str:
    """Commits a copy of the SavedModel under `destination`, with its evaluation beside it.

    Args:
        model_dir: Trained SavedModel directory (or where the trainer committed it).
        destination: Exported model location (`trainer.commit` layout).
        metrics: Evaluation metrics, written to `evaluation.json` in the copy.
        extra: More JSON files for the copy, by name (e.g. `lineage.json`).

    Returns:
        The committed SavedModel directory (what a model upload points at).
    """
    source = saved_model_dir(model_dir)
    with commit_directory(destination, written_by="export") as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)
        for name, content in {"evaluation.json": metrics, **(extra or {})}.items():
            (Path(staging) / name).write_text(json.dumps(content, indent=2) + "\n")
    return staging


def evaluate(model_dir: str | os.PathLike, dataset_dir: str | os.PathLike) -> dict[str, Any]:
    """A model's metrics on the validation split, and the held-out test split when the
    dataset has one: `accuracy`, `examples`, per-class accuracies, `test_accuracy`,
    `test_examples`."""
    results = evaluate_saved_model(model_dir, dataset_dir)
    if "test" in load_manifest(dataset_dir)["splits"]:
        test = evaluate_saved_model(model_dir, dataset_dir, split="test")
        results.update(test_accuracy=test["accuracy"], test_examples=test["examples"])
    return results
