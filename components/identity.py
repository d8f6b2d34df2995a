"""The project's identity: its name, version and log prefix, each spelled once."""

from __future__ import annotations

from importlib import metadata

#: The distribution, the console script and the image name.
NAME = "gpu-pipeline"
#: The compiled pipeline's name (Vertex AI Pipelines, published packages).
PIPELINE_NAME = "gpu-training-pipeline"
#: Prefix of every progress line of the stages and the CLI (the local runner filters on it).
LOG_PREFIX = f"[{NAME}]"


def version() -> str:
    """The installed project's version (pyproject.toml, through the package metadata)."""
    return metadata.version(NAME)
