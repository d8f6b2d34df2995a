"""The compiled spec for one run: the components' image pinned to the one built for it."""

from __future__ import annotations

from pathlib import Path

from components import images
from pipelines.compiler import compile_config, dump_spec, load_spec
from pipelines.config import Config
from trainer.common import files

#: The export stage's executor: it checks the new model in the real model server, so with
#: `vertex.serving_image` set it runs in that image (the check then is the serving
#: container's own).
EXPORT_EXECUTOR = "exec-export-model"


def compile_for_vertex(config: Config, output: Path, component_image: str,
                       trainer_source_uri: str) -> Path:
    """Compiles the spec of a run: `config`'s values as the parameters' defaults, and every
    component of the project running in `component_image` instead of the placeholder
    `compiled/` names (`images.pipeline_image()`), but the export stage in
    `vertex.serving_image` when it is set."""
    path = compile_config(config, output, trainer_source_uri)
    return pin_components(path, component_image, config.vertex.serving_image)


def pin_components(path: Path, component_image: str, serving_image: str = "") -> Path:
    """Rewrites a compiled spec so that every component of the project runs in
    `component_image` instead of the placeholder (`images.pipeline_image()`), but the export
    stage in `serving_image` when one is given."""
    spec = load_spec(path.read_text())
    default = images.pipeline_image()
    for name, executor in spec["deploymentSpec"]["executors"].items():
        container = executor.get("container")
        if container and container.get("image") == default:
            container["image"] = serving_image if (
                name == EXPORT_EXECUTOR and serving_image) else component_image
    files.write_text(path, dump_spec(spec))
    return path
