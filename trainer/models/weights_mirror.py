"""Keras' published ImageNet weights of a backbone, copied into a bucket (`gpu-pipeline
weights copy`), so that jobs without internet access train from them: inside a VPC Service
Controls perimeter `weights: imagenet` cannot reach storage.googleapis.com, and
`training.weights` takes the copy's `gs://` path instead.

Keras itself finds the file: the backbone is built with `weights="imagenet"`, and Keras'
`get_file` downloads it from its published origin (or finds it in its cache) and checks it
against the hash published with it; what it fetched is recorded on its way. The copy keeps
Keras' file name, its object carries the origin and the hashes as metadata, and Cloud
Storage's own MD5 of the object is checked against the file's once it is uploaded.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError, StageError
from trainer.models.backbones import BACKBONES, IMAGENET, MIN_IMAGE_SIZE, build_base


class NotABackbone(InputError):
    """The model has no published weights to copy."""


class CopyError(StageError):
    """The object in the bucket is not the file that was checked."""


@dataclasses.dataclass(frozen=True)
class Published:
    """A weights file as Keras fetched and checked it.

    Attributes:
        path: Where Keras keeps it (its cache).
        origin: The URL Keras publishes it at.
        file_hash: The hash Keras checked it against (MD5 or SHA-256, as published).
    """

    path: str
    origin: str
    file_hash: str


def fetch_published(name: str) -> Published:
    """Keras' no-top ImageNet weights of backbone `name`, fetched and checked by Keras.

    Raises:
        NotABackbone: `name` is not one of the built-in backbones.
        WeightsError: Keras could not fetch the file, or it did not match its hash.
    """
    if name not in BACKBONES:
        raise NotABackbone(f"training.model is {name!r}, which has no published weights: "
                           f"weights are copied for the backbones ({', '.join(BACKBONES)})")
    import tf_keras as keras
    from tf_keras.src.utils import data_utils

    fetched: list[Published] = []
    get_file = data_utils.get_file

    def recording(fname: Any = None, origin: Any = None, *args: Any, **kwargs: Any) -> str:
        path = get_file(fname, origin, *args, **kwargs)  # downloads and checks the hash
        fetched.append(Published(path, origin, kwargs.get("file_hash") or ""))
        return path

    # Every application asks `data_utils.get_file` (tf_keras/src/applications/*.py) for
    # its file, with the origin and hash it publishes.
    data_utils.get_file = recording
    try:
        build_base(keras, BACKBONES[name], MIN_IMAGE_SIZE, IMAGENET)
    finally:
        data_utils.get_file = get_file
    return fetched[-1]


def copy_weights(name: str, destination: str, *, storage: Any = None,
                 log: Callable[[str], None] = print) -> str:
    """Copies backbone `name`'s published weights under `destination` (`gs://BUCKET/PATH`).

    Returns:
        The copy's `gs://` URI, for `training.weights`.

    Raises:
        NotABackbone, WeightsError: As `fetch_published`.
        CopyError: Cloud Storage holds other bytes than the file that was checked.
    """
    from trainer.common.gcs import split_gcs_uri, storage_client

    published = fetch_published(name)
    data = Path(published.path).read_bytes()
    algorithm = "sha256" if len(published.file_hash) == 64 else "md5"
    log(f"{name}: Keras fetched {Path(published.path).name} ({len(data):,} bytes) from "
        f"{published.origin} and checked it against its published {algorithm} "
        f"{published.file_hash}")
    uri = f"{destination.rstrip('/')}/{Path(published.path).name}"
    bucket, key = split_gcs_uri(uri)
    sha256, md5 = hashlib.sha256(data).hexdigest(), hashlib.md5(data).digest()
    with remote_call(f"copying the weights to {uri}"):
        storage = storage or storage_client()
        blob = storage.bucket(bucket).blob(key)
        blob.metadata = {"keras-origin": published.origin,
                         f"keras-{algorithm}": published.file_hash, "sha256": sha256}
        blob.upload_from_string(data, content_type="application/x-hdf5")
        blob.reload()
    if blob.md5_hash and base64.b64decode(blob.md5_hash) != md5:
        raise CopyError(f"{uri} holds other bytes than the checked file (its MD5 is "
                        f"{base64.b64decode(blob.md5_hash).hex()}, the file's {md5.hex()})")
    log(f"copied to {uri} (sha256 {sha256}); Cloud Storage's MD5 of it matches")
    return uri
