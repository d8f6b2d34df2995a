"""A SavedModel's metrics, measured through its serving signature on a prepared dataset.

The model is fed the splits' encoded images, exactly as a prediction client sends them.
The trainer's chief measures the model it has just saved, before committing it, and
commits the figures beside it (`EVALUATION_FILE`): TensorFlow is loaded there already,
and on Vertex AI it runs on the training machines' accelerators. The export stage reads
them back and evaluates again only a model measured on other data (a champion trained
before the dataset changed). Not to be confused with `trainer.run.sidecar`, the sidecar
evaluator of checkpoints during training.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from trainer.common.contract import FEATURE_IMAGE, FEATURE_LABEL, feature_spec, shard_paths
from trainer.common.errors import StageError
from trainer.serving.container import SIGNATURE_BYTES

#: Beside a SavedModel: {"dataset": digest of the splits measured, "metrics": {...},
#: "reference": {"split": ..., "class_index": [...]}, "confusion": {"split": ...,
#: "classes": [...], "matrix": [[...]]}, "correct": {"split": ..., "images": "1101..."}}
#: (the held-out split's; rows are true classes; each image right or wrong in file order,
#: for the gate's paired test).
EVALUATION_FILE = "evaluation.json"
#: How many of the held-out split's first images keep their predicted class as the
#: reference a serving check compares the model server's answers with.
REFERENCE_IMAGES = 24
#: The splits a model is measured on; metrics of the test split are prefixed `test_`.
SPLITS = ("validation", "test")


class EvaluationError(StageError):
    """The model cannot be evaluated (no serving signature, an empty split)."""


def dataset_digest(manifest: dict[str, Any]) -> str:
    """What the metrics were measured on: the checksums of the evaluated splits' shards."""
    h = hashlib.sha256()
    for split in SPLITS:
        for shard in manifest["splits"].get(split, {}).get("shards", []):
            h.update(f"{split}\0{shard['file']}\0{shard['sha256']}\n".encode())
    return "sha256:" + h.hexdigest()


def _split_metrics(tf: Any, serve: Any, files: list[str], classes: list[str],
                   batch_size: int, first: list[int] | None = None,
                   correct: list[str] | None = None,
                   ) -> tuple[dict[str, Any], list[list[int]]]:
    """The split's metrics and confusion matrix; with `first`, the predicted classes of
    its first `REFERENCE_IMAGES` images (in file order) are appended to it; with `correct`,
    each image's "1" (right) or "0" (wrong), in file order."""
    features = feature_spec(tf)
    ds = (tf.data.TFRecordDataset(files)
          .batch(batch_size)
          .map(lambda r: tf.io.parse_example(r, features)))
    matrix = [[0] * len(classes) for _ in classes]
    for batch in ds:
        predicted = serve(image_bytes=batch[FEATURE_IMAGE])["class_index"].numpy()
        if first is not None and len(first) < REFERENCE_IMAGES:
            first.extend(int(p) for p in predicted[:REFERENCE_IMAGES - len(first)])
        for label, guess in zip(batch[FEATURE_LABEL].numpy(), predicted, strict=True):
            matrix[label][guess] += 1
            if correct is not None:
                correct.append("1" if label == guess else "0")
    total = [sum(row) for row in matrix]
    correct = [matrix[i][i] for i in range(len(classes))]
    examples = sum(total)
    metrics: dict[str, Any] = {"accuracy": sum(correct) / examples if examples else 0.0,
                               "examples": examples}
    for name, c, t in zip(classes, correct, total, strict=True):
        metrics[f"accuracy_{name}"] = c / t if t else 0.0
    return metrics, matrix


def evaluate(tf: Any, model_dir: str | os.PathLike, dataset_dir: str | os.PathLike,
             manifest: dict[str, Any], batch_size: int = 256) -> dict[str, Any]:
    """Measures the SavedModel in `model_dir` through its `serving_default` signature.

    Args:
        tf: The tensorflow module.
        model_dir: A SavedModel directory.
        dataset_dir: The prepared dataset.
        manifest: Its manifest.
        batch_size: Examples per signature call.

    Returns:
        `{"dataset": dataset_digest(manifest), "metrics": {...}, "reference": {...},
        "confusion": {...}}`, the
        metrics being the validation split's `accuracy`, `examples` and per-class
        `accuracy_<class>`, and, when the dataset has a test split, `test_accuracy` and
        `test_examples`; the reference the predicted classes of the held-out split's first
        images (`REFERENCE_IMAGES`; the test split, else validation), and that split's
        confusion matrix.

    Raises:
        EvaluationError: The model lacks the signature, or the validation split is empty.
    """

    loaded = tf.saved_model.load(str(model_dir))
    if SIGNATURE_BYTES not in loaded.signatures:
        raise EvaluationError(f"SavedModel {str(model_dir)!r} has no {SIGNATURE_BYTES!r} "
                              f"signature (has: {', '.join(loaded.signatures) or 'none'})")
    serve = loaded.signatures[SIGNATURE_BYTES]
    classes = manifest["classes"]
    held_out, first, correct = reference_split(manifest), [], []
    metrics, matrix = _split_metrics(
        tf, serve, shard_paths(dataset_dir, manifest, "validation"), classes, batch_size,
        *((first, correct) if held_out == "validation" else (None, None)))
    if not metrics["examples"]:
        raise EvaluationError(f"the validation split of {str(dataset_dir)!r} is empty")
    if held_out == "test":
        test, matrix = _split_metrics(tf, serve, shard_paths(dataset_dir, manifest, "test"),
                                      classes, batch_size, first, correct)
        metrics.update(test_accuracy=test["accuracy"], test_examples=test["examples"])
    return {"dataset": dataset_digest(manifest), "metrics": metrics,
            "reference": {"split": held_out, "class_index": first},
            "confusion": {"split": held_out, "classes": list(classes), "matrix": matrix},
            "correct": {"split": held_out, "images": "".join(correct)}}


def reference_split(manifest: dict[str, Any]) -> str:
    """The held-out split a model's reference predictions come from."""
    return "test" if "test" in manifest["splits"] else "validation"


def reference(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The reference predictions committed beside a SavedModel, if measured on this
    dataset (`{"split": ..., "class_index": [...]}`); None otherwise."""
    found = _committed(model_dir, manifest).get("reference")
    return found if isinstance(found, dict) and isinstance(found.get("class_index"), list) \
        else None


def confusion(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The held-out split's confusion matrix committed beside a SavedModel, if measured on
    this dataset (`{"split": ..., "classes": [...], "matrix": [[...]]}`); None otherwise."""
    found = _committed(model_dir, manifest).get("confusion")
    return found if isinstance(found, dict) and isinstance(found.get("matrix"), list) else None


def correctness(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> str | None:
    """Each held-out image right ("1") or wrong ("0"), in file order, committed beside a
    SavedModel if measured on this dataset; None otherwise (or an older evaluation)."""
    found = _committed(model_dir, manifest).get("correct")
    return str(found["images"]) if isinstance(found, dict) and \
        isinstance(found.get("images"), str) else None


def write(model_dir: str | os.PathLike, evaluation: dict[str, Any]) -> None:
    """Writes an evaluation beside its SavedModel."""
    (Path(model_dir) / EVALUATION_FILE).write_text(json.dumps(evaluation, indent=2) + "\n")


def read(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The metrics committed beside a SavedModel, if they were measured on this dataset's
    splits; None otherwise (none written, other data, or an older layout)."""
    metrics = _committed(model_dir, manifest).get("metrics")
    return metrics if isinstance(metrics, dict) and "accuracy" in metrics else None


def _committed(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> dict[str, Any]:
    """The evaluation beside a SavedModel if it was measured on this dataset; {} if not."""
    try:
        evaluation = json.loads((Path(model_dir) / EVALUATION_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(evaluation, dict) or evaluation.get("dataset") != dataset_digest(manifest):
        return {}
    return evaluation
