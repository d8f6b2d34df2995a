"""A replica's setup: everything it decides before it trains, decided once.

Taken from TFX's `FnArgs`: a frozen record built from the options, the cluster and the
dataset manifest (devices, precision, batch sizes, steps, directories, what to cache and
augment), which every later step reads instead of deciding again. Pure Python: the caller
passes in what only TensorFlow can tell (the GPUs it sees, the replicas in sync), so the
setup is tested without TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer.cluster.local import local_cores
from trainer.cluster.tf_config import ClusterInfo
from trainer.cluster.training_plan import TrainingPlan
from trainer.common.contract import image_format, load_manifest, shard_paths
from trainer.common.gcs import to_mount_path
from trainer.run import paths
from trainer.run.data import InputSpec, fits_in_cache
from trainer.run.training_options import TrainingOptions

#: The splits a run reads: training, then validation (seeds `seed` and `seed + 1`).
SPLITS = ("train", "validation")
#: Fewer steps per epoch than this learn little and cannot be timed: the run says so.
FEW_STEPS = 8


@dataclasses.dataclass(frozen=True)
class Locations:
    """Where a run reads and writes, as local or `/gcs/` paths."""

    data_dir: str
    job_dir: str
    checkpoint_dir: str
    tensorboard_dir: str
    model_dir: str


@dataclasses.dataclass(frozen=True)
class Phase:
    """One `fit` of a run: phase 1 trains (the head only, for a frozen backbone); phase 2
    fine-tunes the unfrozen top of the backbone at a lower learning rate.

    Epochs and steps count on across phases (phase 2's first epoch follows phase 1's
    last), so checkpoints, logs and the learning-rate schedule have one timeline.

    Attributes:
        name: `train` or `fine_tune`.
        first_epoch: Epochs done before the phase (`fit`'s initial_epoch).
        end_epoch: Epochs done after it (`fit`'s epochs).
        learning_rate: Its peak learning rate, after the linear scaling rule.
        start_step: The optimizer step it starts at.
        steps: Its steps.
        warmup_steps: Steps of linear warm-up at its start.
        cosine: Cosine decay after the warm-up.
        backup: Its BackupAndRestore directory, under the checkpoint directory.
        keep_backup: Keep the backup when the phase ends: after a restart, the phase is
            restored as finished (no epoch runs again) and the next one resumes.
    """

    name: str
    first_epoch: int
    end_epoch: int
    learning_rate: float
    start_step: int
    steps: int
    warmup_steps: int
    cosine: bool
    backup: str
    keep_backup: bool


@dataclasses.dataclass(frozen=True)
class ReplicaSetup:
    """What one replica does, decided once.

    Attributes:
        options: The training options.
        info: This replica's place in the cluster.
        training: The cluster's training plan (strategy, all-reduce, mixed precision,
            XLA), decided once for every replica (`trainer.cluster.training_plan`).
        where: The run's directories.
        manifest: The prepared dataset's manifest.
        gpus: GPUs TensorFlow sees on this machine.
        threads: Cores this process owns in a local cluster (None: the whole machine).
        replicas: Replicas in sync (under ParameterServerStrategy a step is one worker's
            batch).
        cache: Keep decoded images in memory.
        augment: Random crops and flips of training images.
    """

    options: TrainingOptions
    info: ClusterInfo
    training: TrainingPlan
    where: Locations
    manifest: Mapping[str, Any]
    gpus: int
    threads: int | None
    replicas: int
    cache: bool
    augment: bool

    @property
    def strategy(self) -> str:
        return self.training.strategy

    @property
    def mixed_precision(self) -> str:
        """`float16`, `bfloat16` or `off`."""
        return self.training.mixed_precision

    @property
    def xla(self) -> bool:
        return self.training.xla

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
    def validation_copies(self) -> int:
        """How many times each validation image counts in an epoch's validation metrics;
        every image counts (`data.make_dataset` reads the split whole and once).
        MultiWorkerMirroredStrategy: once per training machine, each reading all of it;
        ParameterServerStrategy: once (`evaluation_shards`)."""
        return 1 if self.strategy == "parameter_server" else self.info.training_machines

    @property
    def evaluation_shards(self) -> int:
        """ParameterServerStrategy's exact evaluation shards (`factory.compile_model`): one
        per validation file, and never more than the split's batches. The split is sharded
        by element (`data.make_dataset`'s `exact`), a batch being an element, and
        TensorFlow refuses more shards than elements with "Could not apply FILE based
        sharding: the dataset only has 1 file(s), which is not enough for the required 4
        shards/workers" (38 images in batches of 16, 4 files: 3 batches, 4 shards; the
        AI Platform documents' parameter-server layout on small splits). With tf_keras's
        "auto" (5 per worker) and fewer files than that, TensorFlow refused to shard by
        file; with fewer shards than workers, some wait. 0 otherwise."""
        if self.strategy != "parameter_server":
            return 0
        files = len(shard_paths(self.where.data_dir, self.manifest, "validation"))
        batches = -(-self.count("validation") // self.global_batch)
        return max(1, min(files, batches))

    @property
    def validation_steps(self) -> int | None:
        """`fit`'s validation steps. MultiWorkerMirroredStrategy cuts each global batch,
        the last one partial, into a piece per replica, every worker stepping through all
        of them (TensorFlow's distributed input guide, "OFF"): the global batches times the
        training machines. ParameterServerStrategy's exact evaluation runs its shards to
        their end: None."""
        if self.strategy == "parameter_server":
            return None
        batches = -(-self.count("validation") // self.global_batch)
        return max(1, batches * self.info.training_machines)

    @property
    def learning_rate_scale(self) -> int:
        """The linear scaling rule's factor: the global batch over one replica's batch."""
        return self.replicas if self.options.scale_learning_rate else 1

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The run's `fit`s: training, then fine-tuning when it has epochs."""
        opts, steps = self.options, self.steps_per_epoch
        train = Phase(
            "train", 0, opts.epochs, opts.learning_rate * self.learning_rate_scale, 0,
            opts.epochs * steps, opts.warmup_epochs * steps, opts.cosine_decay, "backup",
            keep_backup=opts.fine_tune_epochs > 0)
        if not opts.fine_tune_epochs:
            return (train,)
        return train, Phase(
            "fine_tune", opts.epochs, opts.total_epochs,
            opts.fine_tune_learning_rate * self.learning_rate_scale, opts.epochs * steps,
            opts.fine_tune_epochs * steps, 0, opts.cosine_decay, "backup-fine-tune",
            keep_backup=False)

    @property
    def freeze_base(self) -> bool:
        """Phase 1 trains only the head: asked for, or before fine-tuning."""
        return self.options.freeze_base or self.options.fine_tune_epochs > 0

    def input_spec(self, split: str, *, training: bool = True) -> InputSpec:
        """How `split` is read: the global batch, shuffled and repeated for `fit` (its
        steps are counted), augmented for the training split only."""
        return InputSpec(
            files=tuple(shard_paths(self.where.data_dir, self.manifest, split)),
            image_size=self.image_size, batch_size=self.global_batch, training=training,
            training_machines=self.info.training_machines,
            seed=self.options.seed + SPLITS.index(split), cache=self.cache,
            image_format=self.image_format, augment=self.augment and split == "train",
            threads=self.threads)

    def lines(self, advice: bool = True) -> list[str]:
        """The setup for the log: the model and its pretrained weights, the data in one
        line, and (`advice`: the chief's log, so that a cluster says it once) what to change
        when the training split is a few global batches at most."""
        steps, train = self.steps_per_epoch, self.count("train")
        model = [f"model: {self.options.model}"
                 + (f", weights {self.options.weights}" if self.options.weights else "")]
        if steps >= FEW_STEPS or not advice:
            return model + [f"data: {self.describe()}"]
        fits = max(1, train // (FEW_STEPS * self.replicas))
        return model + [f"data: {self.describe()}",
                f"data: warning: {steps} step(s) per epoch ({train} training examples, global "
                f"batch {self.global_batch}): too few updates to learn much or to time the "
                f"steps; a training.batch_size of {fits} gives {FEW_STEPS} or more, or add "
                "images"]

    def describe(self) -> str:
        """The setup in one log line."""
        return (f"{self.count('train')} train / {self.count('validation')} validation "
                f"examples, {len(self.classes)} classes, {self.image_format}; global batch "
                f"{self.global_batch} ({self.options.batch_size} per replica x "
                f"{self.replicas}), {self.steps_per_epoch} steps per epoch; "
                + "; ".join(f"{p.name} epochs {p.first_epoch + 1}-{p.end_epoch} at learning "
                            f"rate {p.learning_rate:g}" for p in self.phases) + "; cache "
                f"{self.cache}, augment {self.augment}"
                + (f"; {self.threads} core(s) of a local cluster" if self.threads else ""))


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


def set_up(options: TrainingOptions, info: ClusterInfo, training: TrainingPlan,
              where: Locations, environ: Mapping[str, str], *, gpus: int,
              replicas: int) -> ReplicaSetup:
    """A replica's setup (reads the dataset's manifest)."""
    manifest = load_manifest(where.data_dir)
    size = int(manifest["image_size"][0])
    examples = sum(int(manifest["splits"][s]["count"]) for s in SPLITS)
    cache = options.cache == "on" or (options.cache == "auto" and fits_in_cache(
        examples, size, options.cache_budget_mb))
    augment = options.augment == "on" or (options.augment == "auto"
                                          and image_format(manifest) == "jpeg")
    return ReplicaSetup(options=options, info=info, training=training, where=where,
                   manifest=manifest, gpus=gpus, threads=len(local_cores(environ)) or None,
                   replicas=replicas, cache=cache, augment=augment)


def training_report(setup: ReplicaSetup, *, resumed_from_epoch: int, epochs_run: int,
                    seconds: float, weights_sha256: str) -> dict[str, Any]:
    """The training report of the finished phases (`trainer.run.history`)."""
    opts = setup.options
    return {
        "task": setup.info.name, "strategy": setup.strategy,
        "num_workers": setup.info.training_machines,
        "parameter_servers": setup.info.layout.parameter_servers,
        "replicas_in_sync": setup.replicas, "global_batch_size": setup.global_batch,
        "per_replica_batch_size": opts.batch_size, "model": opts.model,
        "epochs": opts.total_epochs, "epochs_run": epochs_run,
        "resumed_from_epoch": resumed_from_epoch,
        "phases": [{"name": p.name, "epochs": p.end_epoch - p.first_epoch,
                    "learning_rate": p.learning_rate} for p in setup.phases],
        "steps_per_epoch": setup.steps_per_epoch, "mixed_precision": setup.mixed_precision,
        "xla": setup.xla, "training_plan": setup.training.to_dict(), "cache": setup.cache,
        "train_seconds": round(seconds, 3),
        "examples_per_second": round(setup.steps_per_epoch * epochs_run * setup.global_batch
                                     / max(seconds, 1e-9), 1),
        "weights_sha256": weights_sha256, "model_dir": setup.where.model_dir,
    }
