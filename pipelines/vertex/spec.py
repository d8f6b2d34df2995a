"""The compiled spec for one run: the components' image pinned to the one built for it."""

from __future__ import annotations

from pathlib import Path

import yaml

from components import images
from pipelines.compile import compile_pipeline


def compile_for_vertex(output: Path, component_image: str) -> Path:
    """Compiles the Vertex spec with the components running in `component_image`."""
    path = compile_pipeline(output)
    spec = yaml.safe_load(path.read_text())
    default = images.pipeline_image()
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container and container.get("image") == default:
            container["image"] = component_image
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
