"""`gpu-pipeline`: run the pipeline locally, compile it for Vertex AI, validate GPU configs.

Each command is a module of `pipelines.commands` with `add_parser` (its flags) and `run`
(what it does); this module assembles them and maps errors to exit codes: user mistakes end
with one clear message and exit code 2, a failed stage with exit code 1. Neither prints a
traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from components import identity
from pipelines.commands import (
    batch_predict,
    benchmark,
    compile,
    models,
    predict,
    prices,
    publish,
    run,
    runs,
    schedule,
    serve,
    submit,
    validate_gpu,
    weights,
)
from trainer.common.errors import ProjectError

#: The commands in the order `--help` lists them, by name.
COMMANDS = {"run": run, "compile": compile, "submit": submit, "schedule": schedule,
            "models": models, "predict": predict, "batch-predict": batch_predict, "serve": serve,
            "publish": publish, "validate-gpu": validate_gpu, "benchmark": benchmark,
            "weights": weights, "prices": prices, "runs": runs}


class _Parser(argparse.ArgumentParser):
    """Flags are taken whole (`--epoch` is not `--epochs`), and a usage error is one line."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """Reports a usage error in one line, with where the usage is, and exits with
        code 2 (no traceback)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `gpu-pipeline` argument parser: every command's own."""
    parser = _Parser(prog=identity.NAME, description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {identity.version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMANDS.values():
        module.add_parser(commands, _Parser)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line parsed; a flag its command does not take is that command's usage
    error (argparse would report it as the top-level parser's)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        commands = next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


_signals_received: list[int] = []
_left_running: list[int] = []


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT or SIGTERM: stop every process this command started, then unwind."""
    from pipelines.process_tree import stop_descendants

    _signals_received.append(signum)
    # First the processes: KFP's runner waits for a task in another thread, which an
    # exception in this one would not stop.
    _left_running[:] = stop_descendants()
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gpu-pipeline` console script; returns the exit code.

    A project error ends with its message: exit code 2 for a user's input (`InputError`),
    1 for a failed stage (`StageError`). Anything else is a bug and keeps its traceback.
    """
    from pipelines.local_run import LocalRunError

    args = parse(argv)
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C and SIGTERM (a scheduler, `kill`) stop the whole run.
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
    from pipelines.process_tree import marked_run

    try:
        with marked_run():  # every process the command starts is found when it stops
            return COMMANDS[args.command].run(args)
    except LocalRunError as exc:
        print(f"error: the pipeline failed: {exc} (its log is above)", file=sys.stderr)
        return exc.exit_code
    except ProjectError as exc:
        print(f"error: {exc}{_offline_hint(args, exc)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `gpu-pipeline ... | head`: the reader left; so do we
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(interrupted_words(args.command, _left_running), file=sys.stderr)
        return 128 + _signals_received[-1] if _signals_received else 130


def _offline_hint(args: argparse.Namespace, exc: ProjectError) -> str:
    """For missing credentials, the command's own way to go on without them, if it has one
    (`submit`, `schedule create` and `models` have `--dry-run`; `runs` has none)."""
    from trainer.common.cloud_calls import CredentialsError

    if isinstance(exc, CredentialsError) and getattr(args, "dry_run", None) is False:
        return " (`--dry-run` needs none)"
    return ""


#: What Ctrl-C leaves behind, by command, where it is more than its processes stopped.
LEFT_BEHIND = {"run": "every process of the run was stopped, and what it had written was "
                      "removed",
               "serve": "the model server was stopped"}


def interrupted_words(command: str, left_running: Sequence[int]) -> str:
    """The line an interrupted `command` ends with: what it stopped, in its own terms, or
    which processes it could not stop."""
    if left_running:
        return (f"interrupted: processes {list(left_running)} that {command} started could "
                "not be stopped")
    return "interrupted: " + LEFT_BEHIND.get(
        command, f"every process {command} started was stopped")


if __name__ == "__main__":
    sys.exit(main())
