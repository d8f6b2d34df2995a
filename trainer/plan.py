"""The run plan: everything a replica decides before it trains, decided once.

Taken from TFX's `FnArgs`: a frozen record built from the options, the cluster and the
dataset manifest (devices, precision, batch sizes, steps, directories, what to cache and
augment), which every later step reads instead of deciding again. Pure Python: the caller
passes in what only TensorFlow can tell (the GPUs it sees, the replicas in sync), so the
plan is tested without TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer import paths
from trainer.cluster import ClusterInfo, local_cores
from trainer.contract import image_format, load_manifest, shard_paths
from trainer.data import InputSpec, fits_in_cache
from trainer.gcs import to_mount_path
from trainer.options import TrainingOptions

#: The splits a run reads: training, then validation (seeds `seed` and `seed + 1`).
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Locations:
    """Where a run reads and writes, as local or `/gcs/` paths."""

    data_dir: str
    job_dir: str
    checkpoint_dir: str
    tensorboard_dir: str
    model_dir: str


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What one replica does, decided once.

    Attributes:
        options: The training options.
        info: This replica's place in the cluster.
        strategy: The distribution strategy's name (`cluster.choose_strategy`).
        where: The run's directories.
        manifest: The prepared dataset's manifest.
        gpus: GPUs TensorFlow sees on this machine.
        threads: Cores this process owns in a local cluster (None: the whole machine).
        replicas: Replicas in sync (under ParameterServerStrategy a step is one worker's
            batch).
        mixed_precision: Compute in float16 (GPUs with tensor cores).
        xla: XLA-compile the training step.
        cache: Keep decoded images in memory.
        augment: Random crops and flips of training images.
    """

    options: TrainingOptions
    info: ClusterInfo
    strategy: str
    where: Locations
    manifest: Mapping[str, Any]
    gpus: int
    threads: int | None
    replicas: int
    mixed_precision: bool
    xla: bool
    cache: bool
    augment: bool

    @property
    def image_size(self) -> int:
        return int(self.manifest["image_size"][0])

    @property
    def classes(self) -> list[str]:
        return list(self.manifest["classes"])

    @property
    def image_format(self) -> str:
        return image_format(self.manifest)

    def count(self, split: str) -> int:
        """Examples of a split."""
        return int(self.manifest["splits"][split]["count"])

    @property
    def global_batch(self) -> int:
        return self.options.batch_size * self.replicas

    @property
    def steps_per_epoch(self) -> int:
        # Every worker runs the same number of steps, or the collectives wait forever.
        return max(1, self.count("train") // self.global_batch)

    @property
    def validation_steps(self) -> int:
        return max(1, self.count("validation") // self.global_batch)

    def input_spec(self, split: str, *, training: bool = True) -> InputSpec:
        """How `split` is read: the global batch, shuffled and repeated for `fit` (its
        steps are counted), augmented for the training split only."""
        return InputSpec(
            files=tuple(shard_paths(self.where.data_dir, self.manifest, split)),
            image_size=self.image_size, batch_size=self.global_batch, training=training,
            num_workers=self.info.num_workers, seed=self.options.seed + SPLITS.index(split),
            cache=self.cache, image_format=self.image_format,
            augment=self.augment and split == "train", threads=self.threads)

    def describe(self) -> str:
        """The plan in one log line."""
        return (f"{self.count('train')} train / {self.count('validation')} validation "
                f"examples, {len(self.classes)} classes, {self.image_format}; global batch "
                f"{self.global_batch} ({self.options.batch_size} per replica x "
                f"{self.replicas}), {self.steps_per_epoch} steps per epoch; cache "
                f"{self.cache}, augment {self.augment}, mixed precision "
                f"{self.mixed_precision}, XLA {self.xla}"
                + (f"; {self.threads} core(s) of a local cluster" if self.threads else ""))


def decide(setting: str, gpus: int) -> bool:
    """An `auto|on|off` GPU-speed switch: mixed precision and XLA pay off on GPUs (tensor
    cores, fused kernels); on CPU, float16 is emulated and XLA's compile time outweighs
    what it saves on small jobs."""
    return setting == "on" or (setting == "auto" and gpus > 0)


def locations(job_dir: str, data_dir: str, environ: Mapping[str, str], *,
              model_dir: str | None = None, checkpoint_dir: str | None = None,
              tensorboard_dir: str | None = None) -> Locations:
    """The run's directories: flags first, then Vertex AI's AIP_* variables, then under the
    job directory; `gs://` paths through the `/gcs/` mount."""
    job = to_mount_path(job_dir)
    return Locations(data_dir=to_mount_path(data_dir), job_dir=job,
                     checkpoint_dir=paths.checkpoint_dir(job, environ, checkpoint_dir),
                     tensorboard_dir=paths.tensorboard_dir(job, environ, tensorboard_dir),
                     model_dir=paths.model_dir(job, environ, model_dir))


def make_plan(options: TrainingOptions, info: ClusterInfo, strategy: str, where: Locations,
              environ: Mapping[str, str], *, gpus: int, replicas: int) -> RunPlan:
    """The plan of a replica (reads the dataset's manifest)."""
    manifest = load_manifest(where.data_dir)
    size = int(manifest["image_size"][0])
    examples = sum(int(manifest["splits"][s]["count"]) for s in SPLITS)
    cache = options.cache == "on" or (options.cache == "auto" and fits_in_cache(
        examples, size, options.cache_budget_mb))
    augment = options.augment == "on" or (options.augment == "auto"
                                          and image_format(manifest) == "jpeg")
    return RunPlan(options=options, info=info, strategy=strategy, where=where,
                   manifest=manifest, gpus=gpus, threads=len(local_cores(environ)) or None,
                   replicas=replicas, mixed_precision=decide(options.mixed_precision, gpus),
                   xla=decide(options.xla, gpus), cache=cache, augment=augment)


def report(plan: RunPlan, *, resumed_from_epoch: int, seconds: float,
           weights_sha256: str) -> dict[str, Any]:
    """The training report of a finished `fit` (`trainer.report`)."""
    opts = plan.options
    epochs_run = opts.epochs - resumed_from_epoch
    return {
        "task": plan.info.name, "strategy": plan.strategy,
        "num_workers": plan.info.num_workers,
        "parameter_servers": plan.info.layout.parameter_servers,
        "replicas_in_sync": plan.replicas, "global_batch_size": plan.global_batch,
        "per_replica_batch_size": opts.batch_size, "model": opts.model,
        "epochs": opts.epochs, "resumed_from_epoch": resumed_from_epoch,
        "steps_per_epoch": plan.steps_per_epoch, "mixed_precision": plan.mixed_precision,
        "xla": plan.xla, "cache": plan.cache, "train_seconds": round(seconds, 3),
        "examples_per_second": round(plan.steps_per_epoch * epochs_run * plan.global_batch
                                     / max(seconds, 1e-9), 1),
        "weights_sha256": weights_sha256, "model_dir": plan.where.model_dir,
    }
