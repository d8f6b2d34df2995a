"""Where `training.weights` is read from: Keras's ImageNet fetch, a local file, or Cloud
Storage (`gs://` or Vertex AI's `/gcs/` mount), for jobs without internet access whose
weights are mirrored to a bucket."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from trainer.common.cloud_calls import remote_call
from trainer.common.gcs import GCS_MOUNT, read_bytes, to_mount_path
from trainer.models.backbones import IMAGENET


@contextlib.contextmanager
def local_weights(value: str) -> Iterator[str | None]:
    """`training.weights` as what Keras loads: None (none), `imagenet`, or a local path.

    A `gs://` URI is read through the `/gcs/` mount where it exists (Vertex AI), else
    downloaded to a temporary file for the duration of the block (a local run); whether a
    file exists and fits is `trainer.models.backbones.build_base`'s to say.
    """
    if not value or value == IMAGENET:
        yield value or None
        return
    if value.startswith("gs://") and not os.path.isdir(GCS_MOUNT):
        with remote_call(f"reading training.weights {value}"):
            data = read_bytes(value)
        suffix = os.path.splitext(value)[1] or ".h5"
        with tempfile.TemporaryDirectory(prefix="weights-") as directory:
            path = os.path.join(directory, "weights" + suffix)
            with open(path, "wb") as f:
                f.write(data)
            yield path
        return
    yield to_mount_path(value)
