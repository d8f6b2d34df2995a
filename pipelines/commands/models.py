"""`gpu-pipeline models list`: the models the pipeline registered (locally, or in the
Vertex AI Model Registry)."""

from __future__ import annotations

import argparse
from typing import Any

from components.stage_messages import say
from pipelines.commands.common import add_listing_flags, load
from trainer.common.shell_name import command


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("models", help="The models the pipeline registered.")
    model_actions = parser.add_subparsers(dest="action", required=True, parser_class=parser_class)
    listing = model_actions.add_parser(
        "list", help="The local registry's versions (the default marked *); with --config "
        "or --project, the Vertex AI Model Registry's.")
    add_listing_flags(listing, "YAML configuration file: list its vertex.parent_model "
                               "versions (or vertex.model_display_name models).")
    listing.add_argument("--dry-run", action="store_true",
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
