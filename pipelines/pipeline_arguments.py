"""The pipelines' parameter values for a configuration: what `run --local` passes to the
local pipeline, and what `submit`, `schedule` and `compile` give the Vertex AI pipeline."""

from __future__ import annotations

from pipelines.config import Config
from trainer.models.user_model import USER_CODE_IN_IMAGE


def local_arguments(config: Config, registry_root: str = "") -> dict:
    """Arguments of `local_pipeline` for a configuration (`registry_root`: the local model
    registry, `<pipeline_root>/registry`)."""
    return {"dataset": config.dataset.model_dump(),
            "training": config.training_options().model_dump(),
            "vertex": config.vertex_options().model_dump(),
            "local_cluster": config.local_layout().to_dict(),
            "registry_root": registry_root,
            **({"tuning": config.tuning.model_dump(exclude_none=True)}
               if config.tuning.enabled else {})}


def vertex_arguments(config: Config, trainer_source_uri: str = "") -> dict:
    """Parameter values of `vertex_pipeline` for a configuration. A user's model code is
    read where the image holds it (`submit` packs it into the build context); the plan's
    measurements are read where the run's configuration says (`measurements_location`)."""
    training = config.vertex_training().model_dump()
    if training["user_code"]:
        training["user_code"] = USER_CODE_IN_IMAGE
    tuning = {"tuning": config.tuning.model_dump(exclude_none=True)} \
        if config.tuning.enabled else {}
    return {"project": config.vertex.project, "dataset": config.dataset.model_dump(),
            "training": training, **tuning,
            "vertex": config.vertex_options().model_dump(),
            "trainer_source_uri": trainer_source_uri}
