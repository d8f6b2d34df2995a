"""The training options: declared once, used by the config file, the CLI, the pipeline and
the trainer.

Adding an option is one field here plus its use in the trainer: the config file's
`training` section, `gpu-pipeline` flags, the pipelines' `training` parameter and
`python -m trainer.task` flags all derive from this model (`trainer.schema`).
"""

from __future__ import annotations

from typing import Literal

import pydantic
from pydantic import Field

from trainer.cluster import STRATEGIES
from trainer.model import MODELS
from trainer.schema import STRICT, Switch


class TrainingOptions(pydantic.BaseModel):
    """How the model is trained; the same on Vertex AI and on local workers."""

    model_config = STRICT

    epochs: int = Field(10, ge=1, le=10000, description="Passes over the training split.")
    batch_size: int = Field(32, ge=1, le=65536, description=(
        "Examples per replica and step; the global batch is this times the replicas in sync."))
    learning_rate: float = Field(0.003, gt=0, le=10, description="Adam learning rate.")
    model: Literal[MODELS] = Field("cnn", description=(
        "cnn (a small CNN) or resnet50 (keras.applications, nothing downloaded)."))
    weights: str = Field("", description=(
        "resnet50: weights file of the base (include_top=False); empty for random weights."))
    freeze_base: bool = Field(False, description="resnet50: train only the new head.")
    mixed_precision: Switch = Field("auto", description=(
        "mixed_float16 compute; auto: on with GPUs, off on CPU."))
    xla: Switch = Field("auto", description=(
        "XLA-compile the training step; auto: on with GPUs, off on CPU."))
    cache: Switch = Field("auto", description=(
        "Keep decoded images in memory; auto: when they fit cache_budget_mb."))
    cache_budget_mb: float = Field(2048.0, gt=0, le=2**20, description=(
        "Memory for the decoded-image cache, in MB."))
    augment: Switch = Field("auto", description=(
        "Random crops and left-right flips of training images; auto: on for datasets "
        "stored as JPEG (photos), off for PNG (small or synthetic images)."))
    seed: int = Field(42, ge=0, le=2**31 - 1, description="Seed of weights and shuffling.")
    strategy: Literal[STRATEGIES] = Field("auto", description=(
        "auto: ParameterServerStrategy when the cluster has parameter servers, else "
        "MultiWorkerMirroredStrategy on several machines."))
