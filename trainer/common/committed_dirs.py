"""Publishing a directory on object storage: a fresh directory, then a small marker last.

On Vertex AI, outputs live on Cloud Storage through its FUSE mount (`/gcs/`), where a
directory cannot be renamed into place: Cloud Storage FUSE refuses directory renames on
flat buckets by default (`rename-dir-limit` is 0) and otherwise emulates them object by
object, so a crash leaves a half-moved directory. A single small object, however, appears
whole or not at all. So a directory is written under a new, unique name inside its parent,
and published by writing `COMMITTED.json` (naming it) last; readers only ever follow the
marker, so they see a complete directory or none. Locally the same holds (the marker is
written beside and replaced in one step).

Layout of a committed location::

    <parent>/COMMITTED.json        {"directory": "v-20261121T101500-1a2b3c4d", ...}
    <parent>/v-20261121T101500-1a2b3c4d/...   the complete contents
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

from trainer.common import files
from trainer.common.errors import StageError

MARKER = "COMMITTED.json"
_PREFIX = "v-"


class NotCommittedError(StageError):
    """A location holds no committed directory (the writer failed or has not finished)."""


def _write_marker(parent: str, record: dict[str, Any]) -> None:
    files.write_json(os.path.join(parent, MARKER), record, sync=True)


def committed(parent: str | os.PathLike) -> str | None:
    """The complete directory published under `parent`, or None when there is none."""
    path = os.path.join(parent, MARKER)
    try:
        with open(path) as f:
            record = json.load(f)
        name = record["directory"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    directory = os.path.join(parent, name)
    return directory if isinstance(name, str) and os.path.isdir(directory) else None


def require_committed(parent: str | os.PathLike) -> str:
    """`committed(parent)`, or NotCommittedError saying what is missing."""
    directory = committed(parent)
    if directory is None:
        raise NotCommittedError(f"{str(parent)!r} holds no complete output ({MARKER} is "
                                "missing or names no directory): the step that writes it did "
                                "not finish")
    return directory


@contextlib.contextmanager
def commit_directory(parent: str | os.PathLike, **record: Any) -> Iterator[str]:
    """Yields a fresh directory inside `parent`; publishes it when the block succeeds.

    A failure removes the fresh directory and publishes nothing; a crash leaves an
    unpublished directory that readers never see and the next commit removes. Earlier
    versions are removed once the new one is published.

    Args:
        parent: Where the committed directory and its marker go (created if needed).
        **record: More fields for the marker (e.g. what wrote it).
    """
    parent = os.path.abspath(parent)
    os.makedirs(parent, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    name = f"{_PREFIX}{stamp}-{uuid.uuid4().hex[:8]}"
    directory = os.path.join(parent, name)
    os.makedirs(directory)
    try:
        yield directory
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    _write_marker(parent, {"directory": name, "committed_at": stamp, **record})
    for other in os.listdir(parent):
        if other.startswith(_PREFIX) and other != name:
            shutil.rmtree(os.path.join(parent, other), ignore_errors=True)
