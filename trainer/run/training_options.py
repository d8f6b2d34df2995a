"""The training options: declared once, used by the config file, the CLI, the pipeline and
the trainer.

Adding an option is one field here plus its use in the trainer: the config file's
`training` section, `gpu-pipeline` flags, the pipelines' `training` parameter and
`python -m trainer.task` flags all derive from this model (`trainer.common.schema`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import AfterValidator, Field

from trainer.cluster.roles import STRATEGIES
from trainer.common.schema import STRICT, Precision, Switch
from trainer.models.backbones import BACKBONES, IMAGENET
from trainer.models.factory import MODELS
from trainer.models.user_model import is_reference


def _model_name(value: str) -> str:
    if value not in MODELS and not is_reference(value):
        raise ValueError(f"expected one of {', '.join(MODELS)}, or package.module:function "
                         "naming your own model's function")
    return value


#: The metrics `fit` logs after every epoch, which a tuning study can compare trials by
#: (`--hypertune-metric`).
REPORTED_METRICS = ("val_accuracy", "val_loss", "accuracy", "loss")

#: A built-in model's name, or `package.module:function` (`trainer.models.user_model`).
ModelName = Annotated[str, AfterValidator(_model_name)]


class TrainingOptions(pydantic.BaseModel):
    """How the model is trained; the same on Vertex AI and on local workers."""

    model_config = STRICT

    epochs: int = Field(10, ge=1, le=10000, description="Passes over the training split.")
    batch_size: int = Field(32, ge=1, le=65536, description=(
        "Examples per replica and step; the global batch is this times the replicas in sync."))
    learning_rate: float = Field(0.003, gt=0, le=10, description=(
        "Adam learning rate (of phase 1, per replica's batch when scale_learning_rate)."))
    scale_learning_rate: bool = Field(False, description=(
        "Linear scaling rule: multiply the learning rates by the replicas in sync (the "
        "global batch over batch_size)."))
    warmup_epochs: int = Field(0, ge=0, le=1000, description=(
        "Epochs of linear learning-rate warm-up at the start of phase 1."))
    cosine_decay: bool = Field(False, description=(
        "Decay each phase's learning rate to 0 along a half cosine (after the warm-up)."))
    model: ModelName = Field("cnn", description=(
        f"cnn (a small CNN), a pretrained backbone ({', '.join(BACKBONES)}), or "
        "package.module:function returning your own tf.keras model."))
    weights: str = Field("", description=(
        f"Backbones: {IMAGENET} (fetched by Keras) or a weights file of the base "
        "(include_top=False; local, gs:// or /gcs/); empty for random weights. Your own "
        "model gets it as its weights argument."))
    freeze_base: bool = Field(False, description=(
        "Backbones: train only the new head (phase 1; always so before fine-tuning)."))
    fine_tune_epochs: int = Field(0, ge=0, le=10000, description=(
        "Backbones: epochs of phase 2 after phase 1 (epochs), with the top of the base "
        "unfrozen; 0: no phase 2."))
    fine_tune_learning_rate: float = Field(1e-5, gt=0, le=10, description=(
        "Adam learning rate of phase 2 (scaled like learning_rate)."))
    fine_tune_fraction: float = Field(1.0, gt=0, le=1, description=(
        "Share of the base's layers, from the top, that phase 2 trains (batch "
        "normalization stays frozen)."))
    early_stopping_patience: int = Field(0, ge=0, le=10000, description=(
        "Stop a phase after this many epochs without a better val_accuracy, keeping the "
        "best epoch's weights; 0: off."))
    cluster_wait: int = Field(0, ge=0, le=86400, description=(
        "Seconds each replica waits for the others to join its cluster before it stops, "
        "naming those it cannot reach; 0: auto (3 minutes in a local run, 30 on Vertex AI, "
        "whose machines start minutes apart)."))
    user_code: str = Field("", description=(
        "Directory holding your model's package (model: package.module:function): first on "
        "the import path, and packed into the image built for Vertex AI."))
    mixed_precision: Precision = Field("auto", description=(
        "Compute type of the training replicas: float16 (tensor cores, loss scaling), "
        "bfloat16 (compute capability 8.0+, no loss scaling) or off; auto: what measured "
        "fastest on the training GPU (results files: measurements), else bfloat16 from "
        "Ampere, float16 from Volta, off below and on CPUs; on: float16."))
    xla: Switch = Field("auto", description=(
        "XLA-compile the training step; auto: on only where a results file measured it "
        "faster on the training GPU, else off (its first compile can take minutes), and "
        "never under parameter servers, on CPUs or on GPUs TensorFlow's XLA cannot target."))
    nvidia_environment: Switch = Field("auto", description=(
        "GPU replicas start TensorFlow with the environment NVIDIA's TensorFlow ResNet-50 "
        "sets (TF_GPU_THREAD_MODE=gpu_private, TF_GPU_THREAD_COUNT=2, "
        "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1, TF_AUTOTUNE_THRESHOLD=2); auto: on "
        "where a results file measured it faster on the training GPU, else off."))
    steps_per_execution: int = Field(1, ge=1, le=1000, description=(
        "Training steps each call of the compiled step runs (Keras's steps_per_execution): "
        "the host hands over and returns to Python once per N steps, for a GPU that waits "
        "on the host; callbacks see every Nth step. 1 until a GPU measures more faster."))
    keep_nhwc: Switch = Field("auto", description=(
        "GPUs: keep the convolutions in the model's NHWC layout (Grappler's layout "
        "optimizer off). TensorFlow moves float32 training to NCHW with transposes around "
        "it and keeps float16 and bfloat16 in NHWC either way; auto: on where a results "
        "file measured it faster on the training GPU, else off."))
    prefetch_to_gpu: Switch = Field("auto", description=(
        "A machine with one GPU copies the next batches to it while a step runs (a "
        "one-device strategy); auto: on where a results file measured it faster on the "
        "training GPU, else off."))
    measurements: str = Field("", description=(
        "Where your GPU benchmark results files are (a folder or gs://BUCKET/PATH; every "
        ".json under it): the training plan reads them before the ones shipped with the "
        "trainer; empty: <vertex.pipeline_root>/measurements/ for runs on Vertex AI, none "
        "for local runs."))
    xla_cache: str = Field("", description=(
        "Where XLA's compiled steps and autotuning results are kept between runs (a folder "
        "or gs://BUCKET/PATH), per GPU type and trainer image: with XLA on, a run restores "
        "them before its warm-up and the chief saves what is new; empty: "
        "<vertex.pipeline_root>/xla-cache/ on Vertex AI, none for local runs."))
    cache: Switch = Field("auto", description=(
        "Keep decoded images in memory; auto: when they fit cache_budget_mb."))
    cache_budget_mb: float = Field(2048.0, gt=0, le=2**20, description=(
        "Memory for the decoded-image cache, in MB."))
    augment: Switch = Field("auto", description=(
        "Random crops and left-right flips of training images; auto: on for datasets "
        "stored as JPEG (photos), off for PNG (small or synthetic images)."))
    seed: int = Field(42, ge=0, le=2**31 - 1, description="Seed of weights and shuffling.")
    profile_steps: int = Field(0, ge=0, le=1000, description=(
        "Steps of the first epoch traced by TensorBoard's profiler on the chief and the "
        "first worker, after 5 warm-up steps (0: none); the trace is in TensorBoard's "
        "Profile tab."))
    strategy: Literal[STRATEGIES] = Field("auto", description=(
        "auto: ParameterServerStrategy when the cluster has parameter servers, else "
        "MultiWorkerMirroredStrategy on several machines."))

    @property
    def total_epochs(self) -> int:
        """Epochs of both phases."""
        return self.epochs + self.fine_tune_epochs

    def problems(self) -> list[str]:
        """Rules between the model and its options."""
        found = []
        backbones = ", ".join(BACKBONES)
        own = is_reference(self.model)
        if self.model not in BACKBONES:
            for name, value, default in (("freeze_base", self.freeze_base, False),
                                         ("fine_tune_epochs", self.fine_tune_epochs, 0)):
                if value != default:
                    found.append(f"{name} is {str(value).lower()}; it applies to the "
                                 f"pretrained backbones ({backbones}), not to model "
                                 f"{self.model!r}" + (" (freeze layers in your function)"
                                                      if own else ""))
        if self.model == "cnn" and self.weights:
            found.append(f"weights is {self.weights!r}; model cnn takes none (use a backbone: "
                         f"{backbones})")
        if self.user_code and not own:
            found.append(f"user_code is {self.user_code!r}, but model is {self.model!r}, a "
                         "built-in model; name your function as package.module:function")
        if self.warmup_epochs and self.warmup_epochs >= self.epochs:
            found.append(f"warmup_epochs is {self.warmup_epochs}; expected fewer than epochs "
                         f"({self.epochs}), the epochs of phase 1")
        return found
