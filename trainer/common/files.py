"""Writing a file so that readers see the old one or the new one, never a torn one.

Every file the project publishes (manifests, reports, markers, indexes, compiled specs) is
written beside its destination under a unique temporary name and then replaces it in one
step. Replacing a file (not a directory) is atomic on local disks and supported on Cloud
Storage FUSE (Vertex AI's `/gcs/`), where the new object appears whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def replaced(path: str | os.PathLike, *, sync: bool = False) -> Iterator[Path]:
    """A temporary path beside `path` to write to; when the block ends without an error it
    replaces `path`, otherwise it is removed.

    Args:
        path: The destination.
        sync: Flush the file to disk before replacing (for markers that others wait on).

    Yields:
        The temporary path; it keeps `path`'s suffix (tools pick formats by it).
    """
    target = Path(path)
    # A directory nobody created yet (on Cloud Storage FUSE one exists only once an object
    # is under it: a job that wrote nothing leaves its job directory absent).
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.stem}.{uuid.uuid4().hex[:12]}.partial{target.suffix}")
    try:
        yield partial
        if sync:
            with open(partial, "rb") as f:
                os.fsync(f.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str, *, sync: bool = False) -> None:
    """Writes `text` to `path` in one step (see `replaced`)."""
    with replaced(path, sync=sync) as partial:
        partial.write_text(text)


def read_json(path: str | os.PathLike, missing: Any = None) -> Any:
    """The JSON document at `path`, or `missing` where no file is (what another step
    writes only sometimes)."""
    if not os.path.isfile(path):
        return missing
    with open(path) as f:
        return json.load(f)


def write_json(path: str | os.PathLike, value: Any, *, indent: int = 2,
               sync: bool = False) -> None:
    """Writes `value` as JSON to `path` in one step (see `replaced`)."""
    write_text(path, json.dumps(value, indent=indent) + "\n", sync=sync)
