"""`gpu-pipeline runs`: the local runs so far, one line each (when it ended, its state, the
data, the accuracy, the gate's decision, the cost, the duration), to compare them over
time."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipelines.commands.common import DEFAULT_LOCAL_ROOT


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("runs", help="The local runs so far, one line each: data, "
                                 "accuracy, decision, cost, duration.")
    parser.add_argument("--pipeline-root", type=Path, default=DEFAULT_LOCAL_ROOT,
                        help=f"The local runs' root (default: {DEFAULT_LOCAL_ROOT}/).")


def run(args: argparse.Namespace) -> int:
    """Prints the table of the local runs' history (`pipelines.run_history`)."""
    from pipelines import run_history
    from trainer.common.shell_name import command

    runs, unread = run_history.load(args.pipeline_root)
    if not runs:
        print(f"no runs recorded under {args.pipeline_root}/ yet: `{command()} run --local` "
              "records each run it makes")
        return 0
    for line in run_history.table(runs):
        print(line)
    if unread:
        print(f"({unread} line(s) of {args.pipeline_root / run_history.FILE} could not be "
              "read)")
    return 0
