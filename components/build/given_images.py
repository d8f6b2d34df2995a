"""Images built outside the pipeline (a team's own CI), by digest: `vertex.images`.

With both set, nothing builds them: `compile` writes a spec whose components run the CPU
image, `submit` uploads no sources and starts no build, and the pipeline's build step
passes them on in the form its own builds take (`found`). The images must be built from
this project's Dockerfiles and locks (docs/vertex-ai.md, "Your own images"): the GPU image
runs the trainer (`python -m trainer.task`), the CPU image the components, the model server
and Dataflow's workers.
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import Field

from components.cloud_names import PinnedImage
from trainer.common.schema import STRICT


class GivenImages(pydantic.BaseModel):
    """The project's two images, built elsewhere, by digest (both, or neither)."""

    model_config = STRICT

    gpu: PinnedImage = Field("", description=(
        "The trainer's image for GPU machines (docker/gpu.Dockerfile), "
        "REPOSITORY/NAME@sha256:DIGEST; empty: the pipeline builds it."))
    cpu: PinnedImage = Field("", description=(
        "The components', CPU pools', model server's and Dataflow's image "
        "(docker/cpu.Dockerfile), by digest; empty: the pipeline builds it."))

    @pydantic.model_validator(mode="after")
    def _both(self) -> GivenImages:
        if bool(self.gpu) != bool(self.cpu):
            missing, given = ("cpu", "gpu") if self.gpu else ("gpu", "cpu")
            raise ValueError(f"{missing} is empty while {given} is set; give both images "
                             "(each by digest), or neither to have the pipeline build them")
        return self

    @property
    def given(self) -> bool:
        return bool(self.gpu)

    def found(self) -> dict[str, dict[str, Any]]:
        """As the build step returns images it found: per key, its `reference`, no content
        `tag` (they were not built from this checkout's context) and `built` False."""
        return {key: {"reference": getattr(self, key), "tag": "", "built": False}
                for key in ("gpu", "cpu")}
