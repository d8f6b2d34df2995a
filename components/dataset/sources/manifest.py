"""A CSV (`image,label`) or JSONL manifest of images and labels: local, `/gcs/` or
`gs://`, its image URIs absolute or relative to it."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

from components.cloud_names import gcs_uri_problem
from components.dataset.sources.base import (
    DatasetError,
    Example,
    SourceKind,
    SourceListing,
    check_extension,
    classes_from,
    local_path_problem,
    raise_unknown,
)
from trainer.common.gcs import mounted_gcs_uri, read_bytes


def _manifest_rows(source: str, text: str) -> Iterator[tuple[int, str | None, str | None]]:
    if source.lower().endswith(".jsonl"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{source}:{number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{source}:{number} is not a JSON object with image and label")
            yield number, row.get("image"), row.get("label")
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = {"image", "label"} - set(reader.fieldnames or ())
        if missing:
            raise DatasetError(f"{source} lacks the column(s) {', '.join(sorted(missing))}; a "
                               "CSV manifest needs a header with image,label")
        for number, row in enumerate(reader, 2):
            yield number, row.get("image"), row.get("label")


def _list_manifest(source: str) -> SourceListing:
    try:
        text = read_bytes(source).decode("utf-8")
    except FileNotFoundError:
        raise DatasetError(f"dataset manifest {source!r} does not exist") from None
    base = os.path.dirname(source)
    rows, problems, unknown = [], [], []
    for number, image, label in _manifest_rows(source, text):
        label = str(label).strip() if label not in (None, "") else ""
        if not image:
            problems.append(f"{source}:{number}: no image URI")
        elif not label:
            problems.append(f"{source}:{number}: image {image!r} has no label")
        elif check_extension(str(image), "", unknown):
            ref = image if image.startswith("gs://") or os.path.isabs(image) \
                else os.path.join(base, image)
            rows.append((ref, label, str(image)))
    if problems:
        raise DatasetError(f"dataset manifest {source!r} has {len(problems)} unusable row(s): "
                           + "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))
    raise_unknown(unknown, f"dataset manifest {source!r}")
    if not rows:
        raise DatasetError(f"dataset manifest {source!r} lists no images")
    classes = classes_from((label for _, label, _ in rows), f"dataset manifest {source!r}")
    index = {c: i for i, c in enumerate(classes)}
    # An image's identity (its split) is its path as the manifest writes it: a relative
    # one stays put when the manifest and its images move, as a folder's images do.
    examples = [Example(ref, written, index[label]) for ref, label, written in rows]
    h = hashlib.sha256(text.encode())
    for ex in examples:  # the images' own state, so a replaced file changes the key
        if not ex.ref.startswith("gs://") and os.path.exists(ex.ref):
            stat = os.stat(ex.ref)
            h.update(f"{ex.ref}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return SourceListing("manifest", classes, examples, "sha256:" + h.hexdigest())


class Manifest(SourceKind):
    name = "manifest"
    form = "a CSV (image,label) or JSONL manifest: local, /gcs/ or gs://"

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.lower().endswith((".csv", ".jsonl"))

    @classmethod
    def problem(cls, source: str) -> str | None:
        return gcs_uri_problem(source) if source.startswith("gs://") else None

    @classmethod
    def preflight(cls, source: str) -> None:
        if "://" not in source and not mounted_gcs_uri(source) and not Path(source).is_file():
            raise DatasetError("this manifest does not exist")

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return local_path_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_manifest(source)
