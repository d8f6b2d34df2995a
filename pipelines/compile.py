"""Compiles the Vertex AI pipeline spec, and compares specs for staleness."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

#: Fields that change between builds without a change of the pipeline.
_VOLATILE = ("sdkVersion",)


def compile_pipeline(output: str | os.PathLike) -> Path:
    """Compiles `pipelines.pipeline.vertex_pipeline` to a YAML spec.

    Args:
        output: File to write; its directory is created.

    Returns:
        The written path.
    """
    from kfp import compiler

    from pipelines.pipeline import vertex_pipeline

    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(vertex_pipeline, str(path))
    return path


def normalised_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Loads a compiled spec with build-dependent fields neutralised, for comparison."""
    spec = yaml.safe_load(Path(path).read_text())
    for key in _VOLATILE:
        spec.pop(key, None)
    return spec
