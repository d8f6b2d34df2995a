"""The project's error model: one base, two kinds.

Every error the project raises on purpose derives from `InputError` (a user's input cannot
be used: the command line reports it with exit code 2, a stage with exit code 1 and the
message alone) or `StageError` (work failed although its input was valid: exit code 1).
Anything else is a bug and keeps its traceback.

It lives at the bottom of the import graph, in the trainer package, because the trainer
runs alone in its container and must not import the pipeline's packages; the trainer's own
errors derive from the same two kinds, so every layer reports them the same way.
"""

from __future__ import annotations


class ProjectError(Exception):
    """Base of every error the project raises on purpose; the message is the whole report.

    Attributes:
        exit_code: What the command line exits with.
    """

    exit_code = 1


class InputError(ProjectError, ValueError):
    """A user's input (a flag, a config value, a dataset, a file) cannot be used.

    The message names the field, the value and what would be valid.
    """

    exit_code = 2


class StageError(ProjectError, RuntimeError):
    """Work that failed although its input was valid (a stage, a build, a remote call)."""

    exit_code = 1


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first non-empty line of an error's message, at most `limit` characters; the
    error's type when the message is empty (the one way messages quote other errors)."""
    text = str(error).strip()
    line = text.splitlines()[0].strip() if text else ""
    if not line:
        line = type(error).__name__ if isinstance(error, BaseException) else "(no message)"
    return line if len(line) <= limit else line[:limit - 3] + "..."
