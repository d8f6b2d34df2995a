"""Training application: `python -m trainer.task`, the entry point of the trainer image.

Runs the same way on one machine, on several local processes and on a Vertex AI cluster:
the cluster comes from TF_CONFIG, outputs go under `--job-dir` (or Vertex's AIP_* dirs).

Keras 3 (TensorFlow >= 2.16) cannot run `model.fit` under MultiWorkerMirroredStrategy
(keras-team/keras#20585), so the trainer uses tf-keras; TF_USE_LEGACY_KERAS is set before
TensorFlow is imported so that anything reaching `tf.keras` gets the same implementation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from typing import Any, Sequence

from trainer import cluster as cluster_lib
from trainer import paths

log = logging.getLogger("trainer")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the trainer's flags."""
    parser = argparse.ArgumentParser(prog="python -m trainer.task",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--job-dir", required=True,
                        help="Output directory of the job (checkpoints, reports, default model "
                             "location); gs:// paths are read through the /gcs/ mount.")
    parser.add_argument("--data-dir", required=True,
                        help="Prepared dataset directory (manifest.json and TFRecord shards).")
    parser.add_argument("--model-dir", default=None,
                        help="Final SavedModel directory (default: $AIP_MODEL_DIR, else "
                             "<job-dir>/model).")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="Per-replica batch size; global batch = this x replicas in sync.")
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; expected >= 1")
    if args.learning_rate <= 0:
        parser.error(f"--learning-rate is {args.learning_rate}; expected > 0")
    return args


def _create_strategy(tf: Any, info: cluster_lib.ClusterInfo) -> Any:
    """Chooses the strategy; must run before any other TensorFlow op."""
    if info.num_workers > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def weights_digest(model: Any) -> str:
    """SHA-256 of the model's weights; equal on every worker when gradients are in sync."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()


def train(args: argparse.Namespace, info: cluster_lib.ClusterInfo,
          environ: dict[str, str]) -> dict[str, Any]:
    """Trains and exports the model; returns the training report (chief and workers)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    strategy = _create_strategy(tf, info)  # First TensorFlow op: collectives need it so.
    import tf_keras as keras

    from components.dataset import load_manifest, shard_paths
    from trainer.data import make_dataset
    from trainer.export import save_model
    from trainer.model import build_cnn

    replicas = strategy.num_replicas_in_sync
    log.info("cluster: task %s, %d worker(s), %d replica(s) in sync, chief=%s; devices: %s",
             info.name, info.num_workers, replicas, info.is_chief,
             ", ".join(d.name for d in tf.config.list_logical_devices()) or "none")

    data_dir = paths.local_path(args.data_dir)
    job_dir = paths.local_path(args.job_dir)
    manifest = load_manifest(data_dir)
    image_size = manifest["image_size"][0]
    classes = manifest["classes"]
    global_batch = args.batch_size * replicas
    train_count = manifest["splits"]["train"]["count"]
    val_count = manifest["splits"]["validation"]["count"]
    steps_per_epoch = max(1, train_count // global_batch)
    # Every worker must run the same number of steps, or the collectives wait forever.
    validation_steps = max(1, val_count // global_batch)
    log.info("data: %d train / %d validation examples, %d classes; global batch %d "
             "(%d per replica x %d), %d steps per epoch",
             train_count, val_count, len(classes), global_batch, args.batch_size, replicas,
             steps_per_epoch)

    keras.utils.set_random_seed(args.seed)
    train_ds = make_dataset(tf, shard_paths(data_dir, manifest, "train"), image_size,
                            global_batch, training=True, num_workers=info.num_workers,
                            seed=args.seed)
    val_ds = make_dataset(tf, shard_paths(data_dir, manifest, "validation"), image_size,
                          global_batch, training=True, num_workers=info.num_workers,
                          seed=args.seed + 1)
    with strategy.scope():
        model = build_cnn(keras, image_size, len(classes), args.learning_rate)

    class _EpochLog(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            log.info("epoch %d/%d: loss %.4f accuracy %.4f val_loss %.4f val_accuracy %.4f",
                     epoch + 1, args.epochs, logs.get("loss", float("nan")),
                     logs.get("accuracy", float("nan")), logs.get("val_loss", float("nan")),
                     logs.get("val_accuracy", float("nan")))

    started = time.monotonic()
    history = model.fit(train_ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
                        validation_data=val_ds, validation_steps=validation_steps,
                        callbacks=[_EpochLog()], verbose=0)
    seconds = time.monotonic() - started
    digest = weights_digest(model)
    log.info("trained %d epochs in %.1f s; weights digest %s", args.epochs, seconds, digest)

    destination = paths.model_dir(job_dir, environ, args.model_dir)
    report = {
        "task": info.name,
        "num_workers": info.num_workers,
        "replicas_in_sync": replicas,
        "global_batch_size": global_batch,
        "per_replica_batch_size": args.batch_size,
        "epochs": args.epochs,
        "steps_per_epoch": steps_per_epoch,
        "train_seconds": round(seconds, 3),
        "examples_per_second": round(steps_per_epoch * args.epochs * global_batch / seconds, 1),
        "history": {k: [float(v) for v in vals] for k, vals in history.history.items()},
        "weights_sha256": digest,
        "model_dir": destination,
    }
    saved = save_model(tf, model, destination, is_chief=info.is_chief, image_size=image_size,
                       class_names=classes, extra_metadata={"training": {
                           k: report[k] for k in ("num_workers", "replicas_in_sync",
                                                  "global_batch_size", "epochs")}})
    if saved:
        os.makedirs(job_dir, exist_ok=True)
        with open(os.path.join(job_dir, "training_report.json"), "w") as f:
            json.dump(report, f, indent=2)
        log.info("model written to %s", saved)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the trainer; returns the process exit code."""
    args = parse_args(argv)
    try:
        info = cluster_lib.cluster_from_env(os.environ)
    except cluster_lib.ClusterConfigError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    # Only the trainer's own logger prints INFO; TensorFlow's chatter stays at WARNING.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"[trainer {info.name}] %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    train(args, info, dict(os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
