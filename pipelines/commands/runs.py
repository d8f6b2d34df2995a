"""`gpu-pipeline runs`: the runs so far, one line each (when it ended, its state, the
data, the accuracy, the gate's decision, the cost, the duration), to compare them over
time: the local runs, or with --config (or --project) the Vertex AI runs, as Vertex AI
Experiments recorded them."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.common import add_listing_flags, load


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("runs", help="The runs so far, one line each: data, "
                                 "accuracy, decision, cost, duration (local; with --config "
                                 "or --project, Vertex AI's).")
    add_listing_flags(parser, "YAML configuration file: list the runs of its Vertex AI "
                              "Experiments experiment (vertex.experiment).")


def run(args: argparse.Namespace) -> int:
    """Prints the table of the local runs' history (`pipelines.run_history`), or of the
    Vertex AI runs (`components.export.experiments`)."""
    from pipelines import run_history
    from trainer.common.shell_name import command

    if args.config is not None or args.project is not None:
        from components.export.experiments import experiment_name, list_runs

        config = load(args)
        found = run_history.from_experiments(list_runs(config.vertex.project, config.vertex))
        if not found:
            print(f"no runs recorded in the Vertex AI Experiments experiment "
                  f"{experiment_name(config.vertex)!r} of {config.vertex.project} "
                  f"({config.vertex.region}) yet: each `{command()} submit` run is")
            return 0
        for line in run_history.table(found):
            print(line)
        return 0

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
