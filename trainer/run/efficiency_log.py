"""Each replica's efficiency series: the file format the trainer appends to and the
training report merges (`components.training.efficiency`).

One JSON Lines file per replica under `JOB_DIR/efficiency/`, named for its task
(`chief-0.jsonl`, `worker-1.jsonl`). Every line is an object with a `kind`:
- `epoch`: the step split of one epoch on this replica (`trainer.run.step_split`);
- `sample`: the machine's figures at one moment (`trainer.run.sampler`).

Lines are only ever appended, a batch at a time (the Cloud Storage FUSE mount of
Vertex AI writes files, but renames no directories), so a replica restarted after a
failure adds to its file instead of losing it.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

DIRECTORY = "efficiency"
SUFFIX = ".jsonl"


def replica_name(task_type: str | None, task_index: int) -> str:
    """`chief-0`, `worker-1`; `single-0` for a process without TF_CONFIG."""
    return f"{task_type or 'single'}-{task_index}"


def replica_path(job_dir: str, name: str) -> str:
    return os.path.join(job_dir, DIRECTORY, name + SUFFIX)


class SeriesFile:
    """A replica's file, appended to in batches (thread-safe: the sampler's thread and the
    training loop's callbacks both write)."""

    def __init__(self, path: str):
        self.path = path
        self._pending: list[str] = []
        self._lock = threading.Lock()

    def add(self, kind: str, **figures: Any) -> None:
        line = json.dumps({"kind": kind, **figures}, allow_nan=False, default=str)
        with self._lock:
            self._pending.append(line)

    def flush(self) -> None:
        """Appends what was added since the last flush."""
        with self._lock:
            lines, self._pending = self._pending, []
        if lines:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a") as f:
                f.write("".join(line + "\n" for line in lines))


def read_series(job_dir: str) -> dict[str, list[dict[str, Any]]]:
    """Every replica's lines, by replica name; a line cut short (a replica killed while it
    wrote) is skipped."""
    directory = os.path.join(job_dir, DIRECTORY)
    found: dict[str, list[dict[str, Any]]] = {}
    if not os.path.isdir(directory):
        return found
    for name in sorted(os.listdir(directory)):
        if not name.endswith(SUFFIX):
            continue
        lines = []
        with open(os.path.join(directory, name)) as f:
            for raw in f:
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    continue
        found[name[:-len(SUFFIX)]] = lines
    return found
