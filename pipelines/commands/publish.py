"""`gpu-pipeline publish`: the pipeline shared with other teams (Artifact Registry or
Cloud Storage)."""

from __future__ import annotations

import argparse
from typing import Any

from components.stage_messages import say
from pipelines.commands.common import (
    add_config_flags,
    add_vertex_flags,
    vertex_config,
)


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "publish", help="Share the pipeline with other teams: the spec of this configuration, "
        "its components pinned to the project's CPU image (built or found, as submit does).")
    parser.add_argument("destination", help="https://REGION-kfp.pkg.dev/PROJECT/REPO (Artifact "
                        "Registry Kubeflow Pipelines repository) or gs://BUCKET/PATH.")
    parser.add_argument("--tag", action="append", dest="tags",
                        help="Version tag (repeatable; default: v<version> and latest).")
    add_config_flags(parser)
    add_vertex_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Publishes the spec of the configuration where other teams read it."""
    from components.identity import version
    from pipelines.vertex.publishing import check_target, publish_run

    tags = args.tags or [f"v{version()}", "latest"]
    check_target(args.destination, tags)  # the user's own input, before the configuration
    config = vertex_config(args)
    for where in publish_run(config, args.destination, tags, dry_run=args.dry_run):
        say(f"published {where}")
    return 0
