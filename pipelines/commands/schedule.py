"""`gpu-pipeline schedule create|list|pause|resume|delete`: scheduled retraining on
Vertex AI."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from components.stage_messages import say
from pipelines.commands.common import (
    add_config_flags,
    add_vertex_flags,
    load,
    positive_int,
    vertex_config,
)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("schedule", help="Scheduled retraining on Vertex AI.")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=parser_class)
    create = actions.add_parser("create", help="Create a schedule around the run `submit` "
                                "would send.")
    add_config_flags(create)
    add_vertex_flags(create)
    create.add_argument("--cron", help="Cron expression, e.g. 'TZ=Etc/UTC 0 3 * * 1'.")
    create.add_argument("--max-concurrent-runs", type=positive_int,
                        help="Runs of the schedule allowed at once.")
    for name, what in (("list", "List the schedules: cron, state, last and next run."),
                       ("pause", "Pause a schedule."), ("resume", "Resume a paused schedule."),
                       ("delete", "Delete a schedule.")):
        action = actions.add_parser(name, help=what)
        if name != "list":
            action.add_argument("schedule_id", help="Schedule ID or resource name.")
        # Only what these requests use: the project and region, and whether to send them.
        action.add_argument("--config", type=Path, help="YAML configuration file.")
        action.add_argument("--project", help="Google Cloud project.")
        action.add_argument("--region", help="Vertex AI region.")
        action.add_argument("--dry-run", action="store_true",
                            help="Print the request without sending it.")


def run(args: argparse.Namespace) -> int:
    """Creates, lists, pauses, resumes or deletes a schedule."""
    from pipelines.vertex import schedules
    from pipelines.vertex.clients import to_json

    if args.action == "create":
        schedules.create_schedule(vertex_config(args), dry_run=args.dry_run,
                                  verbose=args.verbose)
        return 0
    config = load(args)
    if args.action == "list":
        if args.dry_run:
            say("dry run: Vertex AI would receive this ListSchedulesRequest:")
            print(to_json(schedules.list_request(config)))
            return 0
        for found in schedules.list_schedules(config):
            print(schedules.describe(found))
        return 0
    if args.dry_run:
        request = schedules.change_request(config, args.action, args.schedule_id)
        say(f"dry run: Vertex AI would receive this {type(request).__name__}:")
        print(to_json(request))
        return 0
    say(f"{args.action}: {schedules.change_schedule(config, args.action, args.schedule_id)}")
    return 0
