"""Training application: `python -m trainer.task`, the entry point of the trainer image.

Runs the same way on one machine, on several local processes and on a Vertex AI cluster:
the cluster comes from TF_CONFIG, outputs go under `--job-dir` (or Vertex's AIP_* dirs).
A job restarted after a maintenance event or a lost worker resumes from its last
completed epoch (BackupAndRestore under the checkpoint dir).

Keras 3 (TensorFlow >= 2.16) cannot run `model.fit` under MultiWorkerMirroredStrategy
(keras-team/keras#20585), so the trainer uses tf-keras; TF_USE_LEGACY_KERAS is set before
TensorFlow is imported so that anything reaching `tf.keras` gets the same implementation.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from typing import Any, Sequence

from trainer import cluster as cluster_lib
from trainer import paths, schema
from trainer.errors import ProjectError
from trainer.gcs import to_mount_path
from trainer.options import TrainingOptions

log = logging.getLogger("trainer")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the trainer's flags: the job's locations, then every training option.

    Returns:
        The namespace; `options` holds the validated `TrainingOptions`.
    """
    parser = argparse.ArgumentParser(prog="python -m trainer.task",
                                     description=__doc__.split("\n")[0])
    where = parser.add_argument_group("locations")
    where.add_argument("--job-dir", required=True,
                       help="Output directory of the job (reports; default checkpoint, "
                            "TensorBoard and model locations); gs:// paths are read through "
                            "the /gcs/ mount.")
    where.add_argument("--data-dir", required=True,
                       help="Prepared dataset directory (manifest.json and TFRecord shards).")
    where.add_argument("--model-dir", help="Final SavedModel directory (default: "
                       "$AIP_MODEL_DIR, else <job-dir>/model).")
    where.add_argument("--checkpoint-dir", help="Checkpoints and restart backup (default: "
                       "$AIP_CHECKPOINT_DIR, else <job-dir>/checkpoints).")
    where.add_argument("--tensorboard-dir", help="TensorBoard logs (default: "
                       "$AIP_TENSORBOARD_LOG_DIR, else <job-dir>/tensorboard).")
    names = schema.add_arguments(parser.add_argument_group("training options"),
                                 TrainingOptions, with_defaults=True)
    args = parser.parse_args(argv)
    try:
        args.options = schema.validate(TrainingOptions, schema.given(args, names))
    except schema.OptionsError as exc:
        parser.error(str(exc))
    return args


def _create_strategy(tf: Any, info: cluster_lib.ClusterInfo) -> Any:
    """Chooses the strategy; must run before any other TensorFlow op."""
    if info.num_workers > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def _resolve(setting: str, gpus: int) -> bool:
    # Mixed precision and XLA pay off on GPUs (tensor cores, fused kernels); on CPU,
    # float16 is emulated and XLA's compile time outweighs what it saves on small jobs.
    return setting == "on" or (setting == "auto" and gpus > 0)


def weights_digest(model: Any) -> str:
    """SHA-256 of the model's weights; equal on every worker when gradients are in sync."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()


def train(args: argparse.Namespace, info: cluster_lib.ClusterInfo,
          environ: dict[str, str]) -> dict[str, Any]:
    """Trains and exports the model; returns the training report (chief and workers)."""
    opts: TrainingOptions = args.options
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    strategy = _create_strategy(tf, info)  # First TensorFlow op: collectives need it so.
    import tf_keras as keras

    from trainer import report as report_lib
    from trainer.contract import load_manifest, shard_paths
    from trainer.data import fits_in_cache, make_dataset
    from trainer.export import save_model
    from trainer.model import build_model

    gpus = tf.config.list_physical_devices("GPU")
    replicas = strategy.num_replicas_in_sync
    log.info("cluster: task %s of %s, %d worker(s), %d replica(s) in sync, chief=%s",
             info.name, dict(info.cluster) or "single machine", info.num_workers, replicas,
             info.is_chief)
    log.info("devices: %s; GPUs: %s", ", ".join(d.name for d in tf.config.list_logical_devices()),
             ", ".join(f"/gpu:{i}" for i in range(len(gpus))) or "none")

    data_dir = to_mount_path(args.data_dir)
    job_dir = to_mount_path(args.job_dir)
    ckpt_dir = paths.checkpoint_dir(job_dir, environ, args.checkpoint_dir)
    manifest = load_manifest(data_dir)
    image_size = manifest["image_size"][0]
    classes = manifest["classes"]
    global_batch = opts.batch_size * replicas
    train_count = manifest["splits"]["train"]["count"]
    val_count = manifest["splits"]["validation"]["count"]
    # Every worker must run the same number of steps, or the collectives wait forever.
    steps_per_epoch = max(1, train_count // global_batch)
    validation_steps = max(1, val_count // global_batch)

    mixed = _resolve(opts.mixed_precision, len(gpus))
    xla = _resolve(opts.xla, len(gpus))
    cache = opts.cache == "on" or (opts.cache == "auto" and fits_in_cache(
        train_count + val_count, image_size, opts.cache_budget_mb))
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_float16")
    log.info("data: %d train / %d validation examples, %d classes; global batch %d (%d per "
             "replica x %d), %d steps per epoch; cache %s, mixed precision %s, XLA %s",
             train_count, val_count, len(classes), global_batch, opts.batch_size, replicas,
             steps_per_epoch, cache, mixed, xla)

    keras.utils.set_random_seed(opts.seed)
    common = dict(num_workers=info.num_workers, cache=cache)
    train_ds = make_dataset(tf, shard_paths(data_dir, manifest, "train"), image_size,
                            global_batch, training=True, seed=opts.seed, **common)
    val_ds = make_dataset(tf, shard_paths(data_dir, manifest, "validation"), image_size,
                          global_batch, training=True, seed=opts.seed + 1, **common)
    with strategy.scope():
        model = build_model(keras, opts.model, image_size, len(classes), opts.learning_rate,
                            weights=opts.weights or None, freeze_base=opts.freeze_base, jit_compile=xla)

    first_epoch: list[int] = []

    class _EpochLog(keras.callbacks.Callback):
        """Logs each completed epoch and, on the chief, keeps the history across restarts."""

        def on_epoch_begin(self, epoch, logs=None):
            if not first_epoch:
                first_epoch.append(epoch)
                if epoch:
                    log.info("resumed from the backup: epochs 1-%d are done, continuing "
                             "with epoch %d", epoch, epoch + 1)

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            log.info("epoch %d/%d: loss %.4f accuracy %.4f val_loss %.4f val_accuracy %.4f",
                     epoch + 1, opts.epochs, logs.get("loss", float("nan")),
                     logs.get("accuracy", float("nan")), logs.get("val_loss", float("nan")),
                     logs.get("val_accuracy", float("nan")))
            if info.is_chief:
                report_lib.record_epoch(job_dir, epoch, logs)

    callbacks = [
        # First, so an epoch's backup exists before anything reports the epoch as done.
        keras.callbacks.BackupAndRestore(backup_dir=os.path.join(ckpt_dir, "backup")),
        keras.callbacks.ModelCheckpoint(os.path.join(ckpt_dir, "latest"), save_weights_only=True),
        _EpochLog(),
    ]
    if info.is_chief:
        callbacks.append(keras.callbacks.TensorBoard(
            log_dir=paths.tensorboard_dir(job_dir, environ, args.tensorboard_dir),
            write_graph=False, profile_batch=0))

    started = time.monotonic()
    model.fit(train_ds, epochs=opts.epochs, steps_per_epoch=steps_per_epoch,
              validation_data=val_ds, validation_steps=validation_steps, callbacks=callbacks,
              verbose=0)
    seconds = time.monotonic() - started
    digest = weights_digest(model)
    epochs_run = opts.epochs - (first_epoch[0] if first_epoch else opts.epochs)
    log.info("trained %d epoch(s) in %.1f s; weights digest %s", epochs_run, seconds, digest)

    destination = paths.model_dir(job_dir, environ, args.model_dir)
    report = {
        "task": info.name,
        "num_workers": info.num_workers,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch,
        "per_replica_batch_size": opts.batch_size,
        "model": opts.model,
        "epochs": opts.epochs,
        "resumed_from_epoch": first_epoch[0] if first_epoch else opts.epochs,
        "steps_per_epoch": steps_per_epoch,
        "mixed_precision": mixed,
        "xla": xla,
        "cache": cache,
        "train_seconds": round(seconds, 3),
        "examples_per_second": round(steps_per_epoch * epochs_run * global_batch
                                     / max(seconds, 1e-9), 1),
        "weights_sha256": digest,
        "model_dir": destination,
    }
    saved = save_model(tf, model, destination, is_chief=info.is_chief, image_size=image_size,
                       class_names=classes, extra_metadata={"training": {
                           k: report[k] for k in ("model", "num_workers", "replicas_in_sync",
                                                  "global_batch_size", "epochs")}})
    if saved:
        report_lib.write_reports(job_dir, report)
        log.info("model written to %s", saved)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the trainer; returns the process exit code."""
    args = parse_args(argv)
    try:
        info = cluster_lib.cluster_from_env(os.environ)
    except ProjectError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return exc.exit_code
    # Only the trainer's own logger prints INFO; TensorFlow's chatter stays at WARNING.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"[trainer {info.name}] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        train(args, info, dict(os.environ))
    except ProjectError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
