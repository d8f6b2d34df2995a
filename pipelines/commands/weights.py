"""`gpu-pipeline weights copy --to gs://...`: Keras' ImageNet weights of the configured
backbone, checked and copied into a bucket, for runs that cannot reach the internet
(`trainer.models.weights_mirror`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from components.cloud_names import gcs_uri_problem
from components.stage_messages import say
from pipelines.commands.common import UsageError


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("weights", help="Pretrained weights for runs without "
                                 "internet access.")
    actions = parser.add_subparsers(dest="action", required=True, parser_class=parser_class)
    copy = actions.add_parser(
        "copy", help="Copy Keras' ImageNet weights of the backbone into a bucket (checked "
        "against their published hash); prints the training.weights to set.")
    copy.add_argument("--to", required=True, metavar="gs://BUCKET/PATH",
                      help="Where the weights file goes (its Keras name is kept).")
    copy.add_argument("--config", type=Path, help="YAML configuration: its training.model.")
    copy.add_argument("--model", help="The backbone (instead of the config's training.model).")


def run(args: argparse.Namespace) -> int:
    """Copies the weights and says what to set."""
    from pipelines.commands.common import load
    from trainer.models.weights_mirror import copy_weights

    problem = gcs_uri_problem(args.to)
    if problem:
        raise UsageError(f"--to {args.to!r}: {problem}")
    name = args.model or load(args).training.model
    uri = copy_weights(name, args.to, log=say)
    print(f"set in the configuration (runs then need no internet for their weights):\n"
          f"training:\n  model: {name}\n  weights: {uri}")
    return 0
