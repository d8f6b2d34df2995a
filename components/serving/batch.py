"""Batch prediction: a folder or a manifest of images scored by the champion.

The same images, the same instances and the same output on both sides:
- **Instances**: one JSON object per image, `{"key": "<where the image is>", "b64":
  "<base64 image>"}`, the serving container's instance plus a key. On Vertex AI they are
  a JSONL file read by a BatchPredictionJob with `instance_config.key_field = "key"`: the
  key is left out of what the model is sent, and each output line carries it as `key`
  instead of the whole instance (REST reference, BatchPredictionJob.InstanceConfig).
- **Output**: Vertex AI's file names under the output directory,
  `prediction.results-00000-of-00001` with `{"key": ..., "prediction": {...}}` per line and
  `prediction.errors_stats-00000-of-00001` with `{"key": ..., "error": {...}}` for an image
  the model refused.
- Locally (`gpu-pipeline batch-predict`) the images are scored in this process by the
  serving container's own predictor (`trainer.serving.app`): the same request checks,
  signature and answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.common.errors import InputError
from trainer.serving.container import encoded_instance

if TYPE_CHECKING:
    from components.serving.batch_options import BatchPredictOptions
    from components.vertex_options import VertexOptions

#: Files a batch source's folder is searched for: what the serving signature's
#: `tf.io.decode_image` decodes, WebP included (TensorFlow 2.21's DecodeImage reads it, a
#: test checks it through the serving signature), so `batch-predict` takes what `predict`
#: takes.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
#: A manifest: one image per line (a path relative to the manifest, or a gs:// URI).
MANIFEST_SUFFIX = ".txt"
KEY = "key"
RESULTS = "prediction.results-00000-of-00001"
ERRORS = "prediction.errors_stats-00000-of-00001"


class BatchSourceError(InputError):
    """The batch source names no images, or images that cannot be read."""


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def image_paths(source: str, field: str = "SOURCE") -> list[str]:
    """The images a source names, in a stable order.

    Args:
        source: A folder (searched recursively for IMAGE_SUFFIXES), local or `gs://BUCKET/
            PREFIX/`, or a manifest (`.txt`): one image per line, blank lines and `#`
            comments skipped, relative paths relative to the manifest.
        field: How the user named the source, for the errors.
    """
    from trainer.common.gcs import read_bytes, split_gcs_uri, storage_client

    if source.endswith(MANIFEST_SUFFIX):
        try:
            text = read_bytes(source).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchSourceError(f"{field} {source!r} cannot be read as a manifest: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from None
        base = source.rsplit("/", 1)[0] + "/" if "/" in source else ""
        found = [line if line.startswith(("gs://", "/")) else f"{base}{line}"
                 for line in (raw.strip() for raw in text.splitlines())
                 if line and not line.startswith("#")]
    elif source.startswith("gs://"):
        bucket, prefix = split_gcs_uri(source.rstrip("/") + "/")
        found = sorted(f"gs://{bucket}/{blob.name}" for blob in
                       storage_client().list_blobs(bucket, prefix=prefix) if _is_image(blob.name))
    elif Path(source).is_dir():
        found = sorted(str(p) for p in Path(source).rglob("*") if p.is_file() and _is_image(p.name))
    else:
        raise BatchSourceError(f"{field} {source!r} is neither a folder nor a manifest; give a "
                               f"folder of images ({', '.join(IMAGE_SUFFIXES)}) or a "
                               f"{MANIFEST_SUFFIX} file with one image per line")
    if not found:
        raise BatchSourceError(f"{field} {source!r} names no images; expected files ending in "
                               f"{', '.join(IMAGE_SUFFIXES)}")
    return found


def instances(paths: Sequence[str], read: Callable[[str], bytes] | None = None,
              unreadable: Callable[[str, str], None] | None = None
              ) -> Iterator[dict[str, str]]:
    """Each image as an instance with its key (module docstring).

    Args:
        paths: The images.
        read: Reads one (local paths and gs:// URIs by default).
        unreadable: Told (path, why) of an image that cannot be read, which is then left
            out; None: such an image stops everything (`BatchSourceError`).
    """
    from trainer.common.gcs import read_bytes

    for path in paths:
        try:
            data = (read or read_bytes)(path)
        except OSError as exc:
            why = f"cannot be read: {exc.strerror or exc}"
            if unreadable is None:
                raise BatchSourceError(f"image {path!r} {why}") from None
            unreadable(path, why)
            continue
        yield {KEY: path, **encoded_instance(data)}


def write_instances(paths: Sequence[str], destination: str | Path) -> int:
    """The JSONL a BatchPredictionJob reads; returns how many lines were written."""
    count = 0
    with open(destination, "w") as f:
        for instance in instances(paths):
            f.write(json.dumps(instance) + "\n")
            count += 1
    return count


def prepare_vertex_job(options: BatchPredictOptions, promoted: bool, instances_path: str,
                       instances_uri: str, log: Callable[[str], None]) -> str:
    """The batch step's first half on Vertex AI: the instances of `options.source`
    (`vertex.batch_predict`) written to the step's artifact for the BatchPredictionJob.
    Returns the predictions' destination prefix, or "" when there is nothing to score (no
    source, or no model was promoted)."""
    if not options.source:
        return ""
    if not promoted:
        log("batch predict: nothing scored (this run promoted no model)")
        return ""
    count = write_instances(image_paths(options.source, "vertex.batch_predict.source"),
                            instances_path)
    destination = options.destination or f"{instances_uri.rsplit('/', 1)[0]}/predictions"
    log(f"batch predict: {count} images of {options.source} -> {instances_uri}; the "
        f"predictions go under {destination}")
    return destination


def score_local_run(registry_root: str, options: VertexOptions, job_name: str,
                    log: Callable[[str], None]) -> dict[str, Any] | None:
    """The batch step of a local run: when the run promoted its model (the gate's new
    default, or the deploy stage's promotion), `vertex.batch_predict.source` scored by it.
    The outcome goes into the run's record (for its summary); returns it, or None when
    there was nothing to score."""
    from components.export import local_registry
    from components.serving.rollout import serves_new
    from trainer.common import files

    batch = options.batch_predict
    if not batch.source:
        return None
    record = local_registry.run_record(registry_root, job_name)
    made = json.loads(record.read_text()) if record.is_file() else {}
    rollout = made.get("rollout")
    promoted = serves_new(rollout["outcome"]) if rollout else made.get("default")
    if not (promoted and made.get("registered_version")):
        log("batch predict: nothing scored (this run promoted no model)")
        return None
    paths = image_paths(batch.source, "vertex.batch_predict.source")
    entry, saved = local_registry.served(registry_root, options.model_display_name,
                                         made["registered_version"])
    destination = Path(batch.destination or Path(registry_root).parent / "batch-predictions"
                       / job_name)
    log(f"batch predict: {len(paths)} images of {batch.source} with version "
        f"{entry['version']}")
    # TensorFlow (2-3 s to import) only when there is something to score.
    from trainer.serving.app import SavedModelPredictor

    predictor = SavedModelPredictor()
    predictor.load(saved)
    results, errors = score(predictor, paths, batch_size=batch.batch_size)
    write_output(destination, results, errors)
    outcome = {"directory": str(destination), "predicted": len(results),
               "refused": len(errors), "version": entry["version"]}
    files.write_json(record, {**made, "batch_predictions": outcome})
    log(f"batch predict: {len(results)} predicted, {len(errors)} refused -> {destination}")
    return outcome


def score(predictor: Any, paths: Sequence[str], *, batch_size: int = 32,
          progress: Callable[[int], None] = lambda done: None
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(result lines, error lines) of the images, in batches through `predictor` (a loaded
    `trainer.serving.app.SavedModelPredictor`). A batch the model refuses is retried one
    image at a time, so that one bad image costs only its own line; so does an image that
    cannot be read."""
    from fastapi import HTTPException

    def run(batch: list[dict[str, str]]) -> list[dict[str, Any]]:
        request = {"instances": [{k: v for k, v in x.items() if k != KEY} for x in batch]}
        return predictor.answer(request)["predictions"]

    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []

    def unreadable(path: str, why: str) -> None:  # a missing file costs its own line too
        errors.append({KEY: path, "error": {"code": 400, "message": f"the image {why}"}})

    def answer(pending: list[dict[str, str]]) -> None:
        try:
            answered = list(zip(pending, run(pending), strict=True))
        except HTTPException:
            answered = []
            for one in pending:
                try:
                    answered.append((one, run([one])[0]))
                except HTTPException as exc:
                    detail = str(exc.detail).replace("instances[0]", "the image")
                    errors.append({KEY: one[KEY], "error": {"code": exc.status_code,
                                                            "message": detail}})
        results.extend({KEY: one[KEY], "prediction": got} for one, got in answered)
        progress(len(results) + len(errors))

    pending: list[dict[str, str]] = []
    for instance in instances(paths, unreadable=unreadable):
        pending.append(instance)
        if len(pending) == batch_size:
            answer(pending)
            pending = []
    if pending:
        answer(pending)
    return results, errors


def write_output(directory: str | Path, results: list[dict[str, Any]],
                 errors: list[dict[str, Any]]) -> list[Path]:
    """Writes the two files (each complete, or not there: written beside and renamed),
    with the permissions the user's umask gives a new file."""
    from trainer.common import files

    directory = Path(directory)
    written = []
    for name, lines in ((RESULTS, results), (ERRORS, errors)):
        files.write_text(directory / name, "".join(json.dumps(line) + "\n" for line in lines))
        written.append(directory / name)
    return written
