"""`gpu-pipeline models [list]`: the models the pipeline registered (locally, or in the
Vertex AI Model Registry)."""

from __future__ import annotations

import argparse
from typing import Any

from components.stage_messages import say
from pipelines.commands.common import add_listing_flags, load
from trainer.common.shell_name import command


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags: `list`, its one action, may be left out."""
    parser = commands.add_parser(
        "models", help="The models the pipeline registered: the local registry's versions "
        "(the default marked *); with --config or --project, the Vertex AI Model Registry's.")
    parser.add_argument("action", nargs="?", choices=("list",), default="list",
                        help="list (the default, and the one action)")
    add_listing_flags(parser, "YAML configuration file: list its vertex.parent_model "
                              "versions (or vertex.model_display_name models).")
    parser.add_argument("--dry-run", action="store_true",
                        help="Print the Vertex AI request without sending it.")


def run(args: argparse.Namespace) -> int:
    """Lists the registered models: the local registry's, or Vertex AI's."""
    if args.config is None and args.project is None:
        from components.export import local_registry as local
        from pipelines.local_run import REGISTRY

        root = args.pipeline_root / REGISTRY
        found = local.models(root)
        if not found:
            say(f"no model registered under {str(root)!r} yet (`{command()} run --local` "
                "registers the models the gate accepts)")
        for name, index in found.items():
            print("\n".join(local.describe(name, index)))
        return 0
    from pipelines.vertex import model_registry as models
    from pipelines.vertex.clients import to_json

    config = load(args)
    if args.dry_run:
        request = models.list_request(config)
        say(f"dry run: Vertex AI would receive this {type(request).__name__}:")
        print(to_json(request))
        return 0
    for model in models.list_models(config):
        print(models.describe(model))
    return 0
