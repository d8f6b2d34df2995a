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
    overrides,
)
from trainer.common.schema import short
from trainer.common.shell_name import command


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("compile", help="Compile the Vertex AI pipeline spec.")
    parser.add_argument("--output", type=Path, help=(
        f"Spec file to write (default: {DEFAULT_SPEC}, the project's own spec, when no "
        "configuration is given; with --config, CONFIG_NAME.pipeline.yaml beside it; with "
        f"other flags, {CUSTOM_SPEC}: never over the project's spec)."))
    parser.add_argument("--image", action="append", default=[], metavar="KEY=REF", help=(
        "An image you built (docker/gpu.Dockerfile: gpu=..., or trainer=...; docker/"
        "cpu.Dockerfile: cpu=...), by digest, REPOSITORY/NAME@sha256:DIGEST; give both: the "
        "spec then runs them and builds nothing (vertex.images)."))
    add_config_flags(parser)


#: Where a spec of flags other than the project's defaults goes without --output.
CUSTOM_SPEC = DEFAULT_SPEC.with_name("custom_pipeline.yaml")


def output_of(args: argparse.Namespace) -> Path:
    """Where the spec goes: `--output`; else the project's own spec (which `make compile`
    regenerates and a test holds against the code) only when nothing changes it; a
    configuration's beside its file; other flags' in CUSTOM_SPEC."""
    if args.output is not None:
        return args.output
    if args.config is not None:
        return args.config.with_name(f"{args.config.stem}.pipeline.yaml")
    given = any(value is not None for section in overrides(args).values()
                for value in section.values())
    return CUSTOM_SPEC if given or args.image else DEFAULT_SPEC


def run(args: argparse.Namespace) -> int:
    """Writes the Vertex AI spec of the configuration."""
    args.output = output_of(args)
    config = with_images(load(args), args.image)  # every refusal before compiling
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
    if config.vertex.images.given:
        from pipelines.vertex.spec import pin_components

        pin_components(path, config.vertex.images.cpu, config.vertex.serving_image)
        say(f"wrote {path}: its components run {config.vertex.images.cpu}, its GPU pools "
            f"{config.vertex.images.gpu} (vertex.images: nothing is built)")
        return 0
    say(f"wrote {path}")
    _say_it_is_a_template(path)
    return 0


#: `--image` keys: the image key each names (`trainer` is the GPU image's other name).
IMAGE_KEYS = {"gpu": "gpu", "trainer": "gpu", "cpu": "cpu"}


def with_images(config: Any, given: list[str]) -> Any:
    """The configuration with `--image KEY=REF` flags as its `vertex.images`.

    Raises:
        UsageError: A flag that is not KEY=REF with a known key, or a key given twice.
        OptionsError: An image not by digest, or one of the two missing.
    """
    if not given:
        return config
    import re

    from components.build.given_images import GivenImages
    from components.images import DEFAULT_IMAGE_REPOSITORY
    from trainer.common.schema import validate

    found: dict[str, str] = {}
    for flag in given:
        key, _, reference = flag.partition("=")
        if key not in IMAGE_KEYS or not reference:
            raise UsageError(f"--image {flag!r}: expected KEY=REF with KEY one of "
                             f"{', '.join(IMAGE_KEYS)} (e.g. --image cpu=REPOSITORY/"
                             "gpu-pipeline-cpu@sha256:DIGEST)")
        if IMAGE_KEYS[key] in found:
            raise UsageError(f"--image names the {IMAGE_KEYS[key]} image twice")
        found[IMAGE_KEYS[key]] = reference
    images = validate(GivenImages, found, prefix="vertex.images")
    update: dict[str, Any] = {"images": images}
    repository = images.cpu.split("@", 1)[0].rsplit("/", 1)[0]
    if config.vertex.image_repository == DEFAULT_IMAGE_REPOSITORY and re.fullmatch(
            r"[a-z0-9-]+-docker\.pkg\.dev/[a-z][a-z0-9-]*/[a-z][a-z0-9-]*", repository):
        update["image_repository"] = repository  # not the placeholder's PROJECT_ID
    return config.model_copy(update={"vertex": config.vertex.model_copy(update=update)})


def _say_it_is_a_template(path: Path) -> None:
    """A compiled spec names the project's images by a placeholder (their digests exist only
    once they are built): says so, and what makes a spec that runs."""
    from components.images import pipeline_image
    from pipelines.compiler import load_spec

    placeholder = pipeline_image()
    executors = load_spec(Path(path).read_text())["deploymentSpec"]["executors"]
    named = sum(e.get("container", {}).get("image") == placeholder for e in executors.values())
    if named:
        say(f"it is a template: {named} of its {len(executors)} steps run the placeholder "
            f"image {placeholder}; `{command()} submit --config CONFIG` builds the images and "
            f"runs it on Vertex AI, `{command()} publish DESTINATION --config CONFIG` "
            "shares a spec that runs (its images built or found, by digest), and `--image "
            "gpu=REF --image cpu=REF` names images you built (docs/vertex-ai.md)")
