"""`gpu-pipeline submit`: a run on Vertex AI Pipelines (with `--dry-run`, the requests
it would send)."""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.commands.common import (
    add_config_flags,
    add_vertex_flags,
    vertex_config,
)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("submit", help="Run the pipeline on Vertex AI Pipelines.")
    add_config_flags(parser)
    add_vertex_flags(parser)
    parser.add_argument("--json", action="store_true",
                        help="With --dry-run, print every request in one JSON document (the "
                             "progress lines go to stderr).")


def run(args: argparse.Namespace) -> int:
    """Submits the run to Vertex AI Pipelines (or prints it with --dry-run)."""
    from pipelines.vertex.runs import submit

    submit(vertex_config(args), dry_run=args.dry_run, verbose=args.verbose, as_json=args.json)
    return 0
