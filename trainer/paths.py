"""Output locations of the trainer, from flags and the variables Vertex AI sets."""

from __future__ import annotations

import os
from typing import Mapping


def local_path(uri: str) -> str:
    """Maps `gs://bucket/path` to Vertex AI's Cloud Storage FUSE mount `/gcs/bucket/path`.

    Plain file APIs (and atomic renames) then work on Vertex without TensorFlow's GCS
    filesystem plugin; other paths are returned unchanged.
    """
    if uri.startswith("gs://"):
        return "/gcs/" + uri[len("gs://"):]
    return uri


def model_dir(job_dir: str, environ: Mapping[str, str], explicit: str | None = None) -> str:
    """Where the chief writes the final SavedModel.

    Order: the `--model-dir` flag, Vertex AI's `AIP_MODEL_DIR`, then `<job-dir>/model`.
    """
    chosen = explicit or environ.get("AIP_MODEL_DIR") or os.path.join(job_dir, "model")
    return local_path(chosen)
