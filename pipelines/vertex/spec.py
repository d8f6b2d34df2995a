"""The compiled spec for one run: the components' image pinned to the one built for it."""

from __future__ import annotations

from pathlib import Path

import yaml

from components import images
from pipelines.compiler import compile_config
from pipelines.config import Config
from trainer.common import files


def compile_for_vertex(config: Config, output: Path, component_image: str,
                       trainer_source_uri: str) -> Path:
    """Compiles the spec of a run: `config`'s values as the parameters' defaults, and every
    component of the project running in `component_image` instead of the placeholder
    `compiled/` names (`images.pipeline_image()`)."""
    path = compile_config(config, output, trainer_source_uri)
    spec = yaml.safe_load(path.read_text())
    default = images.pipeline_image()
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container and container.get("image") == default:
            container["image"] = component_image
    files.write_text(path, yaml.safe_dump(spec, sort_keys=False))
    return path
