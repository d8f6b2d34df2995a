"""Compiles the Vertex AI pipeline spec, and compares specs for staleness."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainer.common import files

if TYPE_CHECKING:
    from pipelines.config import Config

#: Fields that change between builds without a change of the pipeline.
_VOLATILE = ("sdkVersion",)
#: libyaml's loader and dumper where PyYAML was built with it: a compiled spec is about
#: 250 KB, which PyYAML's own loader reads in 0.4 s and libyaml's in 0.04 s.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_spec(text: str) -> dict[str, Any]:
    """A compiled spec's YAML as data (safe: plain types only)."""
    return yaml.load(text, Loader=_LOADER)


def dump_spec(spec: dict[str, Any]) -> str:
    """A spec as YAML, its keys in their order."""
    return yaml.dump(spec, Dumper=_DUMPER, sort_keys=False)


def compile_pipeline(output: str | os.PathLike, parameters: dict[str, Any] | None = None,
                     resources: Any = None) -> Path:
    """Compiles the Vertex AI pipeline (`pipelines.pipeline`) to a YAML spec.

    The spec is written beside the target and moved into place, so a failed compile
    never leaves a half-written spec where the committed one was.

    Args:
        output: File to write; its directory is created.
        parameters: Default values for the spec's parameters (a configuration's values);
            the pipeline's own defaults otherwise.
        resources: CPU and memory of the heavy components (`pipeline.Resources`); the
            default configuration's otherwise.

    Returns:
        The written path.
    """
    from kfp import compiler

    from pipelines.pipeline import make_vertex_pipeline, vertex_pipeline

    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    # KFP picks the format from the suffix, which the partial file keeps.
    with files.replaced(path) as partial:
        pipeline = vertex_pipeline if resources is None else make_vertex_pipeline(resources)
        compiler.Compiler().compile(pipeline, str(partial),
                                    pipeline_parameters=parameters)
        partial.write_text(_stable_header(partial.read_text()))
    return path


def compile_config(config: Config, output: str | os.PathLike,
                   trainer_source_uri: str | None = None) -> Path:
    """Compiles the Vertex AI pipeline for a configuration (`pipelines.config.Config`): its
    values as the parameters' defaults and its component resources.

    Args:
        config: The configuration.
        output: File to write.
        trainer_source_uri: The uploaded sources the run builds from (a run's spec); None
            leaves the parameter without a default (the shared spec of `compile`).

    Returns:
        The written path.
    """
    from pipelines.pipeline import resources_of
    from pipelines.pipeline_arguments import vertex_arguments

    defaults = vertex_arguments(config, trainer_source_uri or "")
    if trainer_source_uri is None:
        defaults.pop("trainer_source_uri")
    if not config.vertex.project:
        defaults.pop("project")  # keep Vertex AI's own project placeholder
    return compile_pipeline(output, defaults, resources_of(config))


_HEADER_DEFAULT = re.compile(r"^#    (\w+): (\w+) \[Default: .*\]$", re.MULTILINE)


def _stable_header(text: str) -> str:
    """Rewrites list/dict defaults in the spec's header comment with sorted keys.

    KFP renders them in protobuf Struct order, which changes from one process to the
    next; the spec body itself is stable. Without this, every compile rewrites the file.
    """
    parameters = load_spec(text)["root"]["inputDefinitions"]["parameters"]

    def render(match: re.Match) -> str:
        default = parameters.get(match.group(1), {}).get("defaultValue")
        if not isinstance(default, (list, dict)):
            return match.group(0)
        return f"#    {match.group(1)}: {match.group(2)} [Default: " \
               f"{json.dumps(default, sort_keys=True)}]"

    return _HEADER_DEFAULT.sub(render, text)


def normalised_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Loads a compiled spec with build-dependent fields neutralised, for comparison."""
    spec = load_spec(Path(path).read_text())
    for key in _VOLATILE:
        spec.pop(key, None)
    return spec
