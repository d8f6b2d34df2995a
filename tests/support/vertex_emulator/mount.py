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
    """The mount's directory and its mirroring with a Cloud Storage client.

    What was last mirrored is remembered per object (its MD5 and the file's size and
    modification time then), so that a task boundary costs one listing per bucket and an
    upload or download per changed object, not a request per object: a run's later tasks
    are no slower than its first for what the earlier ones left on the mount."""

    def __init__(self, root: Path, storage: Any):
        self.root = root
        self.storage = storage
        self._synced: dict[tuple[str, str], tuple[str, tuple[int, int]]] = {}
        root.mkdir(parents=True, exist_ok=True)

    @property
    def prefix(self) -> str:
        """What `/gcs/` stands for in the emulated processes."""
        return f"{self.root}/"

    def path(self, uri: str) -> Path:
        """The local path of a `gs://` URI on the mount."""
        return self.root / uri[len("gs://"):]

    def pull(self) -> None:
        """Objects written through the API become files on the mount; objects deleted
        through it since the last mirroring disappear from it."""
        listed = set()
        for bucket in self.storage.list_buckets():
            for blob in self.storage.list_blobs(bucket.name):
                target = self.root / bucket.name / blob.name
                key = (bucket.name, blob.name)
                listed.add(key)
                if blob.name.endswith("/") or self._unchanged(key, target, blob.md5_hash):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                blob.download_to_filename(str(target))
                self._synced[key] = (blob.md5_hash, _stat(target))
        for key in set(self._synced) - listed:
            target = self.root.joinpath(*key)
            if target.is_file() and _stat(target) == self._synced[key][1]:
                target.unlink()
            del self._synced[key]

    def push(self) -> None:
        """Files written through the mount become objects; removed files are deleted."""
        present = set()
        for bucket_dir in (p for p in self.root.iterdir() if p.is_dir()):
            bucket = self.storage.lookup_bucket(bucket_dir.name) or \
                self.storage.create_bucket(bucket_dir.name)
            for path in (p for p in bucket_dir.rglob("*") if p.is_file()):
                key = (bucket.name, str(path.relative_to(bucket_dir)))
                present.add(key)
                known = self._synced.get(key)
                if known is not None and known[1] == _stat(path):
                    continue
                md5 = _md5(path)
                if known is None or known[0] != md5:
                    bucket.blob(key[1]).upload_from_filename(str(path))
                self._synced[key] = (md5, _stat(path))
        for bucket_name, name in set(self._synced) - present:
            blob = self.storage.bucket(bucket_name).get_blob(name)
            if blob is not None:
                blob.delete()
            del self._synced[(bucket_name, name)]

    def _unchanged(self, key: tuple[str, str], target: Path, md5: str) -> bool:
        """Whether the file is the object as last mirrored (or has its content)."""
        if not target.is_file():
            return False
        known = self._synced.get(key)
        if known is not None and known[1] == _stat(target):
            return known[0] == md5
        if _md5(target) != md5:
            return False
        self._synced[key] = (md5, _stat(target))
        return True


def _stat(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _md5(path: Path) -> str:
    return base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()
