"""A stand-in for Vertex AI's Cloud Storage FUSE mount (`/gcs/BUCKET/PATH`).

A local directory (`<root>/BUCKET/PATH`) mirrored with the Cloud Storage emulator at task
boundaries: before a task, objects written through the API appear as files; after it,
files written through the mount become objects (and files it removed are deleted), so
`gs://` readers (the model upload, the serving container) see what the task wrote. The
processes of the emulated run see this directory as `/gcs/` and cannot rename
directories in it (`site/sitecustomize.py`), as on Cloud Storage FUSE.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any


class StandInMount:
    """The mount's directory and its mirroring with a Cloud Storage client."""

    def __init__(self, root: Path, storage: Any):
        self.root = root
        self.storage = storage
        self._objects: set[tuple[str, str]] = set()
        root.mkdir(parents=True, exist_ok=True)

    @property
    def prefix(self) -> str:
        """What `/gcs/` stands for in the emulated processes."""
        return f"{self.root}/"

    def path(self, uri: str) -> Path:
        """The local path of a `gs://` URI on the mount."""
        return self.root / uri[len("gs://"):]

    def pull(self) -> None:
        """Objects written through the API become files on the mount."""
        for bucket in self.storage.list_buckets():
            for blob in self.storage.list_blobs(bucket.name):
                target = self.root / bucket.name / blob.name
                if blob.name.endswith("/") or (target.is_file() and _md5(target) == blob.md5_hash):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                blob.download_to_filename(str(target))
                self._objects.add((bucket.name, blob.name))

    def push(self) -> None:
        """Files written through the mount become objects; removed files are deleted."""
        present = set()
        for bucket_dir in (p for p in self.root.iterdir() if p.is_dir()):
            bucket = self.storage.lookup_bucket(bucket_dir.name) or \
                self.storage.create_bucket(bucket_dir.name)
            for path in (p for p in bucket_dir.rglob("*") if p.is_file()):
                name = str(path.relative_to(bucket_dir))
                present.add((bucket.name, name))
                blob = bucket.get_blob(name)
                if blob is None or blob.md5_hash != _md5(path):
                    bucket.blob(name).upload_from_filename(str(path))
        for bucket_name, name in self._objects - present:
            blob = self.storage.bucket(bucket_name).get_blob(name)
            if blob is not None:
                blob.delete()
        self._objects = present


def _md5(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()
