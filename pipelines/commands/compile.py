"""`gpu-pipeline compile`: the Vertex AI pipeline spec of a configuration."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from components.stage_messages import say
from pipelines.commands.common import (
    DEFAULT_SPEC,
    UsageError,
    add_config_flags,
    check_model,
    is_path,
    load,
    make_directory,
)
from trainer.common.schema import short
from trainer.common.shell_name import command


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("compile", help="Compile the Vertex AI pipeline spec.")
    parser.add_argument("--output", type=Path, default=DEFAULT_SPEC,
                        help=f"Spec file to write (default: {DEFAULT_SPEC}).")
    add_config_flags(parser)


def run(args: argparse.Namespace) -> int:
    """Writes the Vertex AI spec of the configuration."""
    config = load(args)  # Refuse an invalid configuration before compiling anything.
    check_model(config)
    from components.tuning.tuning_options import vertex_problems

    problems = vertex_problems(config.tuning)  # the spec is for Vertex AI
    if problems:
        raise UsageError("; ".join(problems))
    if args.output.suffix not in (".yaml", ".yml", ".json"):
        raise UsageError(f"--output {str(args.output)!r} must end in .yaml, .yml or .json "
                         "(the spec's format follows the suffix)")
    if is_path(args.output, Path.is_dir):
        raise UsageError(f"--output {str(args.output)!r} is a directory; give a file path "
                         f"such as {str(args.output / DEFAULT_SPEC.name)!r}")
    make_directory(args.output.parent, "--output's directory")
    from pipelines.compiler import compile_config

    try:  # the configuration's values become the spec's parameter defaults
        path = compile_config(config, args.output)
    except OSError as exc:
        raise UsageError(f"--output {short(str(args.output))} cannot be written "
                         f"({exc.strerror or exc}); give a writable file path") from None
    say(f"wrote {path}")
    _say_it_is_a_template(path)
    return 0


def _say_it_is_a_template(path: Path) -> None:
    """A compiled spec names the project's images by a placeholder (their digests exist only
    once they are built): says so, and what makes a spec that runs."""
    import yaml

    from components.images import pipeline_image

    placeholder = pipeline_image()
    executors = yaml.safe_load(Path(path).read_text())["deploymentSpec"]["executors"]
    named = sum(e.get("container", {}).get("image") == placeholder for e in executors.values())
    if named:
        say(f"it is a template: {named} of its {len(executors)} steps run the placeholder "
            f"image {placeholder}; `{command()} submit --config CONFIG` builds the images and "
            f"runs it on Vertex AI, and `{command()} publish DESTINATION --config CONFIG` "
            "shares a spec that runs (its images built or found, by digest)")
