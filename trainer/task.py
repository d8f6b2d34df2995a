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
import contextlib
import hashlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

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
    machine = parser.add_argument_group("machine")
    machine.add_argument("--expected-gpus", type=_count, default=0, metavar="N",
                         help="GPUs this machine has (the CustomJob passes its pool's count): "
                              "stop before training when TensorFlow sees fewer; 0 (default) "
                              "expects none, as on local runs.")
    names = schema.add_arguments(parser.add_argument_group("training options"),
                                 TrainingOptions, with_defaults=True)
    args = parser.parse_args(argv)
    try:
        args.options = schema.validate(TrainingOptions, schema.given(args, names))
    except schema.OptionsError as exc:
        parser.error(str(exc))
    return args


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (expected 0 or more)")
    return value


def _create_strategy(tf: Any, name: str) -> Any:
    """The strategy `cluster.choose_strategy` chose; must run before any other TF op."""
    if name == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver)
    if name == "multi_worker_mirrored":
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


def _locations(args: argparse.Namespace, environ: dict[str, str]) -> tuple[str, str, str, str]:
    """(data dir, job dir, checkpoint dir, TensorBoard dir) as local or /gcs/ paths."""
    job_dir = to_mount_path(args.job_dir)
    return (to_mount_path(args.data_dir), job_dir,
            paths.checkpoint_dir(job_dir, environ, args.checkpoint_dir),
            paths.tensorboard_dir(job_dir, environ, args.tensorboard_dir))


def _datasets(tf: Any, keras: Any, strategy_name: str, data_dir: str, manifest: dict,
              batch: int, num_workers: int, seed: int, cache: bool, augment: bool,
              threads: int | None) -> tuple[Any, Any]:
    """The training and validation inputs: datasets, or under ParameterServerStrategy
    dataset functions that every worker runs on its own share of the files. Only the
    training split is augmented."""
    from trainer.contract import image_format, shard_paths
    from trainer.data import make_dataset

    size = manifest["image_size"][0]
    splits = [(shard_paths(data_dir, manifest, split), seed + i, augment and i == 0)
              for i, split in enumerate(("train", "validation"))]
    common = dict(cache=cache, image_format=image_format(manifest), threads=threads)
    if strategy_name != "parameter_server":
        return tuple(make_dataset(tf, files, size, batch, training=True, seed=s, augment=a,
                                  num_workers=num_workers, **common) for files, s, a in splits)

    def creator(files: list[str], split_seed: int, split_augment: bool) -> Any:
        def dataset_fn(context: Any) -> Any:
            return make_dataset(tf, files, size, batch, training=True, seed=split_seed,
                                augment=split_augment, num_workers=1,
                                shard=(context.num_input_pipelines, context.input_pipeline_id),
                                **common)
        return keras.utils.experimental.DatasetCreator(dataset_fn)

    return tuple(creator(*split) for split in splits)


def _epoch_checkpoints(keras: Any, directory: str, is_chief: bool,
                       keep: int = 3) -> list[Any]:
    """Weights after every epoch as `ckpt-<epoch>` (what the sidecar evaluator reads), the
    last `keep` kept.

    Only the chief prunes: the directory is the chief's (the other workers' ModelCheckpoint
    writes to temporary copies), and two processes removing the same files race.
    """
    class _Prune(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            stale = f"ckpt-{epoch + 1 - keep}."
            for name in os.listdir(directory):
                if name.startswith(stale):
                    with contextlib.suppress(FileNotFoundError):  # e.g. a restarted chief
                        os.remove(os.path.join(directory, name))

    save = keras.callbacks.ModelCheckpoint(os.path.join(directory, "ckpt-{epoch}"),
                                           save_weights_only=True)
    return [save, _Prune()] if is_chief else [save]


def train(args: argparse.Namespace, info: cluster_lib.ClusterInfo, strategy_name: str,
          environ: dict[str, str]) -> dict[str, Any]:
    """Trains and exports the model; returns the training report (chief and MWMS workers).

    Under ParameterServerStrategy only the chief runs this (it coordinates the workers).
    """
    import json

    opts: TrainingOptions = args.options
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    threads = len(cluster_lib.local_cores(environ)) or None
    if threads:  # before the first op, which creates the thread pools
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        from trainer.data import untuned_device_datasets
        untuned_device_datasets(tf)
    strategy = _create_strategy(tf, strategy_name)  # First TensorFlow op, as collectives need.
    import tf_keras as keras

    from trainer import evaluation
    from trainer import report as report_lib
    from trainer.contract import image_format, load_manifest
    from trainer.data import fits_in_cache
    from trainer.evaluator import EPOCHS_DIR, PLAN_FILE
    from trainer.export import save_model
    from trainer.model import build_model

    gpus = tf.config.list_physical_devices("GPU")
    # Under ParameterServerStrategy a step is one worker's batch; otherwise the replicas
    # in sync each take a batch.
    replicas = strategy.num_replicas_in_sync
    log.info("cluster: task %s of %s, %s with %d training machine(s), %d parameter "
             "server(s); %d replica(s) in sync, chief=%s", info.name,
             dict(info.cluster) or "single machine", strategy_name, info.num_workers,
             info.layout.parameter_servers, replicas, info.is_chief)
    log.info("devices: %s; GPUs: %s", ", ".join(d.name for d in tf.config.list_logical_devices()),
             ", ".join(f"/gpu:{i}" for i in range(len(gpus))) or "none")

    data_dir, job_dir, ckpt_dir, tensorboard_dir = _locations(args, environ)
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
    stored = image_format(manifest)
    augment = opts.augment == "on" or (opts.augment == "auto" and stored == "jpeg")
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_float16")
    log.info("data: %d train / %d validation examples, %d classes, %s; global batch %d (%d "
             "per replica x %d), %d steps per epoch; cache %s, augment %s, mixed precision %s, "
             "XLA %s%s", train_count, val_count, len(classes), stored, global_batch,
             opts.batch_size, replicas, steps_per_epoch, cache, augment, mixed, xla,
             f"; {threads} core(s) of a local cluster" if threads else "")

    keras.utils.set_random_seed(opts.seed)
    train_ds, val_ds = _datasets(tf, keras, strategy_name, data_dir, manifest, global_batch,
                                 info.num_workers, opts.seed, cache, augment, threads)
    with strategy.scope():
        model = build_model(keras, opts.model, image_size, len(classes), opts.learning_rate,
                            weights=opts.weights or None, freeze_base=opts.freeze_base,
                            jit_compile=xla)
    if strategy_name == "multi_worker_mirrored":
        from trainer.step_logs import keep_step_logs_local
        keep_step_logs_local(tf, model)  # the epoch logs stay the cluster's

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

    epochs_dir = os.path.join(ckpt_dir, EPOCHS_DIR)
    callbacks = [
        # First, so an epoch's backup exists before anything reports the epoch as done.
        keras.callbacks.BackupAndRestore(backup_dir=os.path.join(ckpt_dir, "backup")),
        *_epoch_checkpoints(keras, epochs_dir, info.is_chief),
        _EpochLog(),
    ]
    if info.is_chief:
        os.makedirs(epochs_dir, exist_ok=True)
        with open(os.path.join(epochs_dir, PLAN_FILE), "w") as f:  # for the evaluator
            json.dump({"epochs": opts.epochs, "steps_per_epoch": steps_per_epoch}, f)
        if strategy_name != "parameter_server":  # not supported under that strategy
            callbacks.append(keras.callbacks.TensorBoard(log_dir=tensorboard_dir,
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
        "strategy": strategy_name,
        "num_workers": info.num_workers,
        "parameter_servers": info.layout.parameter_servers,
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

    def measure(staged: str) -> dict[str, Any]:
        # The model as a prediction client sees it, before it is committed (the export
        # stage then reuses these figures instead of loading TensorFlow again).
        measured = evaluation.evaluate(tf, staged, data_dir, manifest)
        metrics = measured["metrics"]
        log.info("exported model through its serving signature: validation accuracy %.4f "
                 "on %d examples%s", metrics["accuracy"], metrics["examples"],
                 f", test accuracy {metrics['test_accuracy']:.4f} on "
                 f"{metrics['test_examples']}" if "test_accuracy" in metrics else "")
        return measured

    saved = save_model(tf, model, destination, is_chief=info.is_chief, image_size=image_size,
                       class_names=classes, evaluate=measure, extra_metadata={"training": {
                           k: report[k] for k in ("model", "strategy", "num_workers",
                                                  "parameter_servers", "replicas_in_sync",
                                                  "global_batch_size", "epochs")}})
    if saved:
        report_lib.write_reports(job_dir, report)
        log.info("model written to %s", saved)
    return report


def evaluate_beside(args: argparse.Namespace, info: cluster_lib.ClusterInfo,
                    environ: dict[str, str]) -> int:
    """The evaluator's role: the sidecar evaluator over the chief's checkpoints."""
    opts: TrainingOptions = args.options
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from trainer.contract import image_format, load_manifest, shard_paths
    from trainer.data import make_dataset
    from trainer.evaluator import run_sidecar
    from trainer.model import build_model

    data_dir, job_dir, ckpt_dir, tensorboard_dir = _locations(args, environ)
    manifest = load_manifest(data_dir)
    size = manifest["image_size"][0]
    if _resolve(opts.mixed_precision, len(tf.config.list_physical_devices("GPU"))):
        keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model(keras, opts.model, size, len(manifest["classes"]), opts.learning_rate,
                        weights=opts.weights or None, freeze_base=opts.freeze_base)
    data = make_dataset(tf, shard_paths(data_dir, manifest, "validation"), size,
                        opts.batch_size, training=False, num_workers=1, cache=False,
                        image_format=image_format(manifest),
                        threads=len(cluster_lib.local_cores(environ)) or None)
    evaluations = run_sidecar(keras, model, data, ckpt_dir, job_dir, tensorboard_dir, info)
    log.info("sidecar evaluator done after %d evaluation(s)", evaluations)
    return evaluations


def run(args: argparse.Namespace, info: cluster_lib.ClusterInfo,
        environ: dict[str, str]) -> None:
    """This replica's role in the strategy `cluster.choose_strategy` decides."""
    from trainer.report import REPORT_FILE
    from trainer.server import serve_until_done

    strategy_name = cluster_lib.choose_strategy(info.layout, args.options.strategy)
    if args.expected_gpus:  # before any role starts work, and before the strategy exists
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import tensorflow as tf

        from trainer.gpu_check import require_gpus

        found = require_gpus(tf, args.expected_gpus, environ)
        log.info("GPUs: %d visible, %d expected", found, args.expected_gpus)
    if info.task_type == "evaluator":
        evaluate_beside(args, info, environ)
    elif strategy_name == "parameter_server" and info.task_type in ("worker", "ps"):
        serve_until_done(info, os.path.join(_locations(args, environ)[1], REPORT_FILE))
    else:
        train(args, info, strategy_name, environ)


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
        cluster_lib.pin_local_cores(os.environ)  # before TensorFlow starts
        run(args, info, dict(os.environ))
    except ProjectError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
