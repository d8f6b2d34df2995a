"""What every stage prints: progress lines with the project's prefix, and a user's mistake
as its message alone (no traceback) with exit code 1."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from components.identity import LOG_PREFIX
from trainer.common.errors import ProjectError

#: A local run's file where each failed stage writes its first line, for the run's summary:
#: the local runner gives the exit handler only "Task exit-handler-1 failed." (set by
#: `pipelines.local_run` for its tasks, which all run on this machine).
FAILURES_ENV = "GPU_PIPELINE_STAGE_FAILURES"


def say(message: str) -> None:
    """Prints one progress line (`[gpu-pipeline] message`)."""
    print(f"{LOG_PREFIX} {message}", flush=True)


@contextlib.contextmanager
def stage_errors(stage: str) -> Iterator[None]:
    """Ends a component on a project error with its message and exit code 1.

    KFP (locally and on Vertex) marks the task failed on the non-zero exit; the log shows
    the message alone, since a traceback would only point into our own code. Errors that
    are not the project's (bugs) keep their traceback.
    """
    try:
        yield
    except ProjectError as exc:
        first, *rest = str(exc).splitlines() or [""]
        say(f"{stage} failed: {first}")  # the line a run's summary names as its reason
        _note_failure(f"{stage} failed: {first}")
        for line in rest:
            say(f"{stage}: {line}")
        sys.exit(1)


def _note_failure(line: str) -> None:
    """Appends a failed stage's line to the run's failures file, when there is one."""
    path = os.environ.get(FAILURES_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(line + "\n")
        except OSError:
            pass  # the log has the line all the same


def first_failure() -> str:
    """The first failed stage's line of this run ("" when none, or outside a local run)."""
    path = os.environ.get(FAILURES_ENV)
    try:
        with open(path or "") as f:
            return f.readline().strip()
    except OSError:
        return ""
