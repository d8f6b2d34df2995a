"""The Keras callbacks of a run: restart backups, epoch checkpoints, progress and reports.

Imported only after TensorFlow has been set up (`trainer.run.replica`): tf-keras is imported at
the top, so that the callbacks are plain classes of this module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from typing import TYPE_CHECKING, Any

import tf_keras as keras

from trainer.common import files
from trainer.run import history
from trainer.run.paths import EPOCHS_DIR, PLAN_FILE

if TYPE_CHECKING:
    from trainer.run.replica_setup import ReplicaSetup

log = logging.getLogger("trainer")


class EpochLog(keras.callbacks.Callback):
    """Logs each completed epoch and, on the chief, keeps the history across restarts.

    One instance follows every phase of the run.

    Attributes:
        first_epoch: The first epoch this process ran (after a restart, the one after the
            last backed-up epoch); None before one starts.
        epochs_run: Epochs this process completed.
    """

    def __init__(self, setup: ReplicaSetup):
        super().__init__()
        self.setup = setup
        self.first_epoch: int | None = None
        self.epochs_run = 0

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = epoch
            if epoch:
                log.info("resumed from the backup: epochs 1-%d are done, continuing with "
                         "epoch %d", epoch, epoch + 1)

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        self.epochs_run += 1
        if "val_examples" in logs:
            # The count summed over the replicas holds each image this many times.
            logs["val_examples"] = float(logs["val_examples"]) / self.setup.validation_copies
        log.info("epoch %d/%d: loss %.4f accuracy %.4f val_loss %.4f val_accuracy %.4f on %d "
                 "validation images", epoch + 1, self.setup.options.total_epochs,
                 logs.get("loss", float("nan")), logs.get("accuracy", float("nan")),
                 logs.get("val_loss", float("nan")), logs.get("val_accuracy", float("nan")),
                 int(logs.get("val_examples", 0)))
        if self.setup.info.is_chief:
            history.record_epoch(self.setup.where.job_dir, epoch, logs)

    def resumed_from(self) -> int:
        """The epoch training resumed from (all of them when no epoch ran)."""
        return self.setup.options.total_epochs if self.first_epoch is None else self.first_epoch


class PruneCheckpoints(keras.callbacks.Callback):
    """Keeps the last `keep` epoch checkpoints. Only the chief prunes: the directory is the
    chief's (the other workers' ModelCheckpoint writes to temporary copies), and two
    processes removing the same files race."""

    def __init__(self, directory: str, keep: int = 3):
        super().__init__()
        self.directory, self.keep = directory, keep

    def on_epoch_end(self, epoch, logs=None):
        stale = f"ckpt-{epoch + 1 - self.keep}."
        for name in os.listdir(self.directory):
            if name.startswith(stale):
                with contextlib.suppress(FileNotFoundError):  # e.g. a restarted chief
                    os.remove(os.path.join(self.directory, name))


class RecordEvaluation(keras.callbacks.Callback):
    """The sidecar evaluator's record of each evaluated epoch (`trainer.run.history`)."""

    def __init__(self, job_dir: str, name: str, steps_per_epoch: int):
        super().__init__()
        self.job_dir, self.name, self.steps = job_dir, name, steps_per_epoch
        self.done: list[int] = []

    def on_test_end(self, logs=None):
        iterations = int(self.model.optimizer.iterations.numpy())
        epoch = max(1, round(iterations / self.steps)) - 1
        history.record_evaluation(self.job_dir, epoch, logs or {})
        self.done.append(epoch)
        log.info("%s evaluated epoch %d: %s", self.name, epoch + 1, ", ".join(
            f"{k} {v:.4f}" for k, v in (logs or {}).items()))


class ReportMetric(keras.callbacks.Callback):
    """A tuning trial's metric, reported the way Vertex AI Vizier reads it.

    `cloudml-hypertune` writes each report as a JSON line to `$CLOUD_ML_HP_METRIC_FILE`
    (default `/tmp/hypertune/output.metrics`), which Vertex AI's hyperparameter tuning
    service reads from the trial's primary replica (docs: "Configure a hyperparameter
    tuning job"). The chief reports the study's metric after every epoch, the epoch as
    the step; the last report is the trial's final measurement. A local study points the
    variable at each trial's own file.
    """

    def __init__(self, tag: str):
        super().__init__()
        import hypertune

        self.tag = tag
        self.reporter = hypertune.HyperTune()

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.tag)
        if value is None:
            log.warning("no %s in the logs of epoch %d: nothing reported", self.tag, epoch + 1)
            return
        self.reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=self.tag, metric_value=float(value),
            global_step=epoch + 1)


def for_phase(setup: ReplicaSetup, phase: Any, progress: EpochLog) -> list[Any]:
    """The callbacks of a phase's `fit`: the phase's restart backup first (an epoch's
    backup exists before anything reports the epoch as done), weights after every epoch
    as `ckpt-<epoch>` (what the sidecar evaluator reads), the progress log, early stopping
    when asked for, and on the chief TensorBoard and the evaluator's plan.

    A phase followed by another keeps its backup when it ends: a restarted job restores
    it as finished and goes on with the next phase, whose own backup holds its progress.
    """
    where = setup.where
    epochs_dir = os.path.join(where.checkpoint_dir, EPOCHS_DIR)
    callbacks = [
        keras.callbacks.BackupAndRestore(
            backup_dir=os.path.join(where.checkpoint_dir, phase.backup),
            delete_checkpoint=not phase.keep_backup),
        keras.callbacks.ModelCheckpoint(os.path.join(epochs_dir, "ckpt-{epoch}"),
                                        save_weights_only=True),
        progress,
    ]
    if setup.options.early_stopping_patience:
        # Validation metrics are the cluster's on every worker, so all stop together.
        callbacks.append(keras.callbacks.EarlyStopping(
            monitor="val_accuracy", mode="max", restore_best_weights=True,
            patience=setup.options.early_stopping_patience))
    if setup.info.is_chief:
        os.makedirs(epochs_dir, exist_ok=True)
        files.write_json(os.path.join(epochs_dir, PLAN_FILE), {
            "epochs": setup.options.total_epochs, "steps_per_epoch": setup.steps_per_epoch})
        callbacks.insert(2, PruneCheckpoints(epochs_dir))
        if setup.strategy != "parameter_server":  # not supported under that strategy
            callbacks.append(keras.callbacks.TensorBoard(log_dir=where.tensorboard_dir,
                                                         write_graph=False, profile_batch=0))
    return callbacks


def drop_kept_backups(setup: ReplicaSetup) -> None:
    """After the last phase, the chief removes the backups earlier phases kept for a
    restart (a later run with the same checkpoint directory must not find them)."""
    if setup.info.is_chief:
        for phase in setup.phases:
            if phase.keep_backup:
                shutil.rmtree(os.path.join(setup.where.checkpoint_dir, phase.backup),
                              ignore_errors=True)
