"""`gs://BUCKET/PREFIX` with one folder of images per class, listed with
google-cloud-storage."""

from __future__ import annotations

import hashlib
from typing import Any

from components.cloud_names import gcs_uri_problem
from components.dataset.sources.base import (
    DatasetError,
    Example,
    SourceKind,
    SourceListing,
    check_extension,
    classes_from,
    raise_unknown,
)
from trainer.common.errors import first_line
from trainer.common.gcs import split_gcs_uri, storage_client


def _list_gcs_folder(source: str) -> SourceListing:
    bucket, prefix = split_gcs_uri(source.rstrip("/") + "/")
    from google.api_core import exceptions

    try:
        blobs = sorted(storage_client().list_blobs(bucket, prefix=prefix),
                       key=lambda b: b.name)
    except exceptions.GoogleAPIError as exc:
        first = first_line(exc)
        raise DatasetError(f"dataset source {source!r} cannot be listed: {first[:300]}") from None
    by_class: dict[str, list[Any]] = {}
    unknown: list[str] = []
    for blob in blobs:
        rel = blob.name[len(prefix):]
        if "/" not in rel or rel.endswith("/") or any(p.startswith(".") for p in rel.split("/")):
            continue
        if check_extension(rel, "", unknown):
            by_class.setdefault(rel.split("/", 1)[0], []).append(blob)
    if not blobs:
        raise DatasetError(f"dataset source {source!r} holds no objects; expected "
                           f"{source.rstrip('/')}/<class>/<image> objects")
    raise_unknown(unknown, f"dataset source {source!r}")
    classes = classes_from(by_class, f"dataset source {source!r}")
    examples = []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        for blob in by_class[name]:
            rel = blob.name[len(prefix):]
            examples.append(Example(f"gs://{bucket}/{blob.name}", rel, label, blob.size or 0))
            h.update(f"{rel}\0{label}\0{blob.size}\0{blob.md5_hash}\0{blob.generation}\n".encode())
    return SourceListing("gcs-folder", classes, examples, "sha256:" + h.hexdigest())


class GcsFolder(SourceKind):
    name = "gcs-folder"
    form = "gs://BUCKET/PREFIX holding one folder of images per class"

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.startswith("gs://")

    @classmethod
    def problem(cls, source: str) -> str | None:
        return gcs_uri_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_gcs_folder(source)
