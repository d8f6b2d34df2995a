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
import dataclasses
import hashlib
import logging
import os
import posixpath
import sys
import time
from collections.abc import Sequence
from typing import Any

from trainer.cluster.local import cluster_wait_seconds, local_cores, pin_local_cores
from trainer.cluster.network import keep_cluster_off_proxies
from trainer.cluster.roles import ClusterConfigError
from trainer.cluster.tf_config import ClusterInfo, cluster_from_env
from trainer.cluster.training_plan import (
    TrainingPlan,
    choose_strategy,
    plan_training,
    requested,
)
from trainer.common.errors import ProjectError
from trainer.run import gpu_environment, xla_compile
from trainer.run.arguments import parse_args
from trainer.run.distribution import apply_precision, create_strategy, keep_nhwc
from trainer.run.replica_setup import (
    SPLITS,
    Locations,
    ReplicaSetup,
    locations,
    set_up,
    training_report,
)

log = logging.getLogger("trainer")


def weights_digest(model: Any) -> str:
    """SHA-256 of the model's weights; equal on every worker when gradients are in sync."""
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(w.tobytes())
    return h.hexdigest()


def _locations(args: argparse.Namespace, environ: dict[str, str]) -> Locations:
    job_dir = args.job_dir
    if args.hypertune_metric and environ.get("AIP_MODEL_DIR"):
        # A trial of a Vertex AI tuning job: trials share the job's arguments, but each has
        # its own base output directory, `<job's>/<trial id>/`, whose `model/` is
        # AIP_MODEL_DIR (gcpc HyperparameterTuningJobRunOp, base_output_directory); its
        # reports go there, beside its model, not over another trial's.
        job_dir = posixpath.dirname(environ["AIP_MODEL_DIR"].rstrip("/"))
    return locations(job_dir, args.data_dir, environ, model_dir=args.model_dir,
                     checkpoint_dir=args.checkpoint_dir, tensorboard_dir=args.tensorboard_dir)


def _start_tensorflow(environ: dict[str, str]) -> Any:
    """Imports TensorFlow with tf-keras, and sizes its thread pools to the cores a local
    cluster gave this process (before the first op, which creates them)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    threads = len(local_cores(environ))
    if threads:
        from trainer.run.data import untuned_device_datasets

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        untuned_device_datasets(tf)
    return tf


def _log_setup(tf: Any, setup: ReplicaSetup) -> None:
    info = setup.info
    log.info("cluster: task %s of %s, %s with %d training machine(s), %d parameter "
             "server(s); %d replica(s) in sync, chief=%s", info.name,
             dict(info.cluster) or "single machine", setup.strategy, info.training_machines,
             info.layout.parameter_servers, setup.replicas, info.is_chief)
    log.info("devices: %s; GPUs: %s", ", ".join(d.name for d in tf.config.list_logical_devices()),
             ", ".join(f"/gpu:{i}" for i in range(setup.gpus)) or "none")
    for line in setup.lines(advice=info.is_chief):
        log.info("%s", line)


def train(args: argparse.Namespace, info: ClusterInfo, training: TrainingPlan,
          environ: dict[str, str]) -> dict[str, Any]:
    """Trains and exports the model; returns the training report (chief and MWMS workers).

    Under ParameterServerStrategy only the chief runs this (it coordinates the workers).
    """
    if training.nvidia_environment and training.gpus_per_machine:
        log.info("NVIDIA's environment set: %s",
                 gpu_environment.set_nvidia_environment(os.environ))
    cache, said = xla_compile.open_cache(args.options.xla_cache, training.accelerator,
                                         os.environ) if training.xla else (None, "")
    if said:
        log.info("xla cache: %s", said)
    if training.xla and training.gpus_per_machine:
        os.environ.update(xla_compile.with_flags(
            os.environ, xla=xla_compile.parallel_where_possible(os.environ)))
    tf = _start_tensorflow(environ)
    from trainer.cluster.watch import formation_watch

    wait = cluster_wait_seconds(args.options.cluster_wait, environ)
    with formation_watch(info, wait, environ):
        # First TensorFlow op, as collectives need.
        strategy = create_strategy(tf, training)
    if keep_nhwc(tf, training.keep_nhwc):
        log.info("layout: NHWC kept on the GPUs (the plan's keep_nhwc: Grappler's layout "
                 "optimizer off)")
    import tf_keras as keras

    from trainer.models.factory import model_for
    from trainer.run import callbacks, profile_steps
    from trainer.run.data import build_inputs
    from trainer.run.sampler import Sampler, load_nvml
    from trainer.run.step_split import for_replica, stamp_arrivals

    setup = set_up(args.options, info, training, _locations(args, environ), environ,
                   gpus=len(tf.config.list_physical_devices("GPU")),
                   replicas=strategy.num_replicas_in_sync)
    _log_setup(tf, setup)
    apply_precision(keras, training)
    keras.utils.set_random_seed(setup.options.seed)
    # The validation split is read once an epoch, whole: every image counts
    # (`ReplicaSetup.validation_copies`).
    train_input, validation_input = (
        build_inputs(tf, keras, setup.input_spec(s, training=s == "train"), setup.strategy)
        for s in SPLITS)
    with strategy.scope():
        model = model_for(keras, setup)
    reporting = [callbacks.ReportMetric(args.hypertune_metric)] \
        if args.hypertune_metric and info.is_chief else []
    compiler = gpu_environment.describe(gpu_environment.compiler(os.environ)) \
        if setup.xla and setup.gpus else ""
    if compiler:
        log.info("xla: %s", compiler)  # once per replica
    series, timing = for_replica(tf, setup, compiler)
    if timing.arrivals is not None:
        train_input = stamp_arrivals(tf, train_input, timing.arrivals)
    nvml, nvml_missing = load_nvml()
    started = time.monotonic()
    with Sampler(series, nvml=nvml, nvml_missing=nvml_missing):
        progress = _fit_phases(tf, keras, strategy, model, setup,
                               (train_input, validation_input),
                               reporting + [timing] + profile_steps.for_replica(tf, setup))
    report = training_report(setup, resumed_from_epoch=progress.resumed_from(),
                             epochs_run=progress.epochs_run, seconds=time.monotonic() - started,
                             weights_sha256=weights_digest(model))
    log.info("trained %d epoch(s) in %.1f s; weights digest %s",
             report["epochs_run"], report["train_seconds"],
             report["weights_sha256"])
    _export(tf, model, setup, report)
    if cache is not None and info.is_chief:
        log.info("xla cache: %s", xla_compile.close_cache(cache, args.options.xla_cache,
                                                          training.accelerator, os.environ))
    return report


def _fit_phases(tf: Any, keras: Any, strategy: Any, model: Any, setup: ReplicaSetup,
                inputs: tuple[Any, Any], reporting: list[Any]) -> Any:
    """Runs `fit` for each phase of the plan (phase 2 unfreezes the backbone's top and
    re-compiles first); returns the progress log that followed them."""
    from trainer.models.factory import unfreeze_for_fine_tuning
    from trainer.models.learning_rate import learning_rate
    from trainer.run import callbacks

    progress = callbacks.EpochLog(setup)
    for phase in setup.phases:
        if phase.name == "fine_tune":
            with strategy.scope():
                unfrozen = unfreeze_for_fine_tuning(
                    keras, model, setup.options.fine_tune_fraction, learning_rate(phase),
                    jit_compile=setup.xla,
                    steps_per_execution=setup.options.steps_per_execution,
                    evaluation_shards=setup.evaluation_shards)
            log.info("fine-tuning: %d layer(s) of the backbone unfrozen, learning rate %g",
                     unfrozen, phase.learning_rate)
        if setup.strategy == "multi_worker_mirrored":
            from trainer.run.step_logs import keep_step_logs_local

            keep_step_logs_local(tf, model)  # the epoch logs stay the cluster's
        model.fit(inputs[0], initial_epoch=phase.first_epoch, epochs=phase.end_epoch,
                  steps_per_epoch=setup.steps_per_epoch, validation_data=inputs[1],
                  validation_steps=setup.validation_steps,
                  callbacks=callbacks.for_phase(setup, phase, progress) + reporting,
                  verbose=0)
    callbacks.drop_kept_backups(setup)
    return progress


def _export(tf: Any, model: Any, setup: ReplicaSetup, report: dict[str, Any]) -> None:
    """Saves the model (every worker; only the chief's copy is committed), measured through
    its serving signature before it is committed, and the chief's reports."""
    from trainer.run import history
    from trainer.serving import measure
    from trainer.serving.savedmodel import save_model

    def evaluate_staged(staged: str) -> dict[str, Any]:
        # The model as a prediction client sees it (the export stage then reuses these
        # figures instead of loading TensorFlow again).
        measured = measure.evaluate(tf, staged, setup.where.data_dir, setup.manifest)
        metrics = measured["metrics"]
        log.info("exported model through its serving signature: validation accuracy %.4f "
                 "on %d examples%s", metrics["accuracy"], metrics["examples"],
                 f", test accuracy {metrics['test_accuracy']:.4f} on "
                 f"{metrics['test_examples']}" if "test_accuracy" in metrics else "")
        return measured

    training = {k: report[k] for k in ("model", "strategy", "num_workers", "parameter_servers",
                                       "replicas_in_sync", "global_batch_size", "epochs",
                                       "phases")}
    saved = save_model(tf, model, setup.where.model_dir, is_chief=setup.info.is_chief,
                       image_size=setup.image_size, class_names=setup.classes,
                       evaluate=evaluate_staged, extra_metadata={"training": training})
    if saved:
        history.write_reports(setup.where.job_dir, report)
        log.info("model written to %s", saved)


def evaluate_beside(args: argparse.Namespace, info: ClusterInfo,
                    training: TrainingPlan, environ: dict[str, str]) -> int:
    """The evaluator's role: the sidecar evaluator over the chief's checkpoints."""
    tf = _start_tensorflow(environ)
    import tf_keras as keras

    from trainer.models.factory import model_for
    from trainer.run.data import make_dataset
    from trainer.run.sidecar import run_sidecar

    # The chief's model, layer for layer (the policy decides the layers' compute types).
    setup = set_up(args.options, info, training, _locations(args, environ), environ,
                   gpus=len(tf.config.list_physical_devices("GPU")), replicas=1)
    apply_precision(keras, training)
    # Each checkpoint replaces the weights; `evaluate` over the whole split needs 1 step
    # per call (Keras cannot size the data otherwise).
    model = model_for(keras, setup, pretrained=False, steps_per_execution=1)
    spec = dataclasses.replace(setup.input_spec("validation"), training=False, cache=False,
                               training_machines=1)
    where = setup.where
    evaluations = run_sidecar(keras, model, make_dataset(tf, spec), where.checkpoint_dir,
                              where.job_dir, where.tensorboard_dir, info)
    log.info("sidecar evaluator done after %d evaluation(s)", evaluations)
    return evaluations


def training_plan(args: argparse.Namespace, info: ClusterInfo,
                  gpus: int, capability: tuple[int, int] | None) -> TrainingPlan:
    """The plan this replica applies: the one it was given, checked against TF_CONFIG's
    cluster; else one made here from TF_CONFIG and this machine's GPUs (`gpus`, and the
    compute capability of the first) by the same rules.

    Raises:
        PlanError: The options cannot work on this cluster, or the plan given is invalid.
        ClusterConfigError: The plan given is for another cluster.
    """
    from trainer.cluster.accelerators import seen

    options = args.options
    if not args.training_plan:
        return plan_training(info.layout, **requested(options),
                             gpu=seen(capability) if gpus and capability else None, gpus=gpus)
    plan = TrainingPlan.from_json(args.training_plan)
    asked = "auto" if plan.strategy == "single" else plan.strategy
    try:
        runs = choose_strategy(info.layout, asked)
    except ClusterConfigError as exc:
        runs = f"no {plan.strategy} ({exc})"
    if runs != plan.strategy:
        raise ClusterConfigError(
            f"--training-plan is for {plan.strategy}, but TF_CONFIG's cluster "
            f"({dict(info.cluster) or 'one machine'}) runs {runs}: the plan was made for "
            "other worker pools")
    return plan


def _visible_gpus(args: argparse.Namespace, environ: dict[str, str]
                  ) -> tuple[int, tuple[int, int] | None]:
    """GPUs TensorFlow sees here and the first one's compute capability, checked against
    `--expected-gpus`; TensorFlow is imported only when either needs it."""
    if not args.expected_gpus and args.training_plan:
        return 0, None
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    from trainer.run.gpu_check import require_gpus

    found = require_gpus(tf, args.expected_gpus, environ)
    if args.expected_gpus:
        log.info("GPUs: %d visible, %d expected", found, args.expected_gpus)
    gpus = tf.config.list_physical_devices("GPU")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
    return found, details.get("compute_capability")


def run(args: argparse.Namespace, info: ClusterInfo,
        environ: dict[str, str]) -> None:
    """This replica's role in the training plan's strategy."""
    from trainer.run.history import REPORT_FILE
    from trainer.run.ps_server import serve_until_done

    # Before any role starts work, and before the strategy exists.
    plan = training_plan(args, info, *_visible_gpus(args, environ))
    if plan.reduction_server and plan.all_reduce == "nccl" and \
            info.task_type in ("chief", "worker"):
        from trainer.run.gpu_check import require_reduction_server_plugin

        log.info("NCCL network plugin: %s", require_reduction_server_plugin(environ))
    if info.is_chief:
        for line in plan.describe():
            log.info("training plan: %s", line)
    if info.task_type == "evaluator":
        evaluate_beside(args, info, plan, environ)
    elif plan.strategy == "parameter_server" and info.task_type in ("worker", "ps"):
        serve_until_done(info, os.path.join(_locations(args, environ).job_dir, REPORT_FILE))
    else:
        train(args, info, plan, environ)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the trainer; returns the process exit code."""
    args = parse_args(argv)
    try:
        info = cluster_from_env(os.environ)
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
        pin_local_cores(os.environ)  # before TensorFlow starts
        exempt = keep_cluster_off_proxies(info, os.environ)
        if exempt is not None and info.is_chief:
            log.info("proxy variables set: the cluster's gRPC goes direct (no_grpc_proxy=%s)",
                     exempt)
        run(args, info, dict(os.environ))
    except ProjectError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
