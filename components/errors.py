"""What every stage does with a user's mistake: one clear message, no traceback."""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


class InputError(ValueError):
    """Input a stage cannot use (a source, a parameter, a configuration).

    The message names the field, the value and what would be valid; it is the whole
    report, so components print it instead of a traceback.
    """


@contextlib.contextmanager
def stage_input_errors(stage: str) -> Iterator[None]:
    """Ends a component on an `InputError` with its message and exit code 1.

    KFP (locally and on Vertex) marks the task failed on the non-zero exit; the log shows
    the message alone, since a traceback would only point into our own code.
    """
    try:
        yield
    except InputError as exc:
        for line in str(exc).splitlines():
            print(f"[gpu-pipeline] {stage}: {line}", flush=True)
        sys.exit(1)
