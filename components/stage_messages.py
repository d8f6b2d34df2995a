"""What every stage prints: progress lines with the project's prefix, and a user's mistake
as its message alone (no traceback) with exit code 1."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from components.identity import LOG_PREFIX
from trainer.common.errors import ProjectError


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
        for line in rest:
            say(f"{stage}: {line}")
        sys.exit(1)
