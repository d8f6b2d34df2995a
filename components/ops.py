"""The pipeline's KFP components: thin interfaces over the plain stage modules.

Each component body only imports its stage module and calls it, so all behaviour is
tested without KFP. The bodies run in the project's CPU image (on Vertex) or in this
environment (kfp.local's SubprocessRunner), where the project is installed; that is
why `install_kfp_package=False` and why imports sit inside the functions (lightweight
components are shipped as their source).

Options arrive as dict parameters (`dataset`, `training`, `vertex`) and are read back
through their declared models, so a partial dict from another team's pipeline gets the
defaults and a bad value gets the same message as on the command line. The components are
listed in the order the pipeline runs them.
"""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def validate_gpu_config(vertex: dict, training: dict, local_cluster: dict) -> NamedTuple(
        "GpuConfig", [("worker_pool_specs", list), ("training_workers", int),
                      ("strategy", str), ("training_plan", dict), ("alternatives", list)]):
    """Stage 1: the Vertex worker pools checked against the GPU rules and the strategy's
    roles, normalised, and the training plan every replica applies; the same for every
    alternative of `vertex.fallbacks`.

    Returns the primary configuration's normalised pools, strategy and training plan
    (strategy, all-reduce, mixed precision, XLA, with reasons), the number of processes
    that read the training data (the dataset's shard multiple: a multiple of every
    alternative's), and every alternative with its own pools and plan, in the order the
    training step tries them. `local_cluster` (workers, parameter servers, evaluators) is
    the layout of a local run, whose CPU processes train with a plan of their own; empty
    on Vertex AI.
    """
    from collections import namedtuple

    from components.capacity.alternatives import batch_lines, check_alternatives, shard_multiple
    from components.stage import say, stage_errors
    from components.training.layout import input_pipelines
    from components.vertex_options import VertexOptions
    from trainer.cluster import Layout
    from trainer.options import TrainingOptions
    from trainer.schema import validate
    from trainer.training_plan import plan_training, requested

    with stage_errors("GPU config"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        trainer = validate(TrainingOptions, training, prefix="training", strict=False)
        checked = check_alternatives(options, trainer)
        for warning in checked.warnings:
            say(f"warning: {warning}")
        checked.raise_for_errors()
        result, plan = checked.primary, checked.primary.plan
        readers = shard_multiple(checked.alternatives)
        if local_cluster:
            layout = Layout(**{k: int(v) for k, v in local_cluster.items()})
            plan = plan_training(layout, **requested(trainer))
            readers = input_pipelines(layout, plan.strategy)
    say(f"GPU configuration valid for {options.region}: {result.describe()}")
    say(f"training plan on Vertex AI: {result.plan.summary()}")
    for alternative in checked.alternatives[1:]:
        say(f"{alternative.label}, tried after a stock-out or a quota refusal: "
            f"{alternative.describe()}; training plan: {alternative.plan.summary()}")
    if len(checked.alternatives) > 1:
        for line in batch_lines(checked.alternatives, trainer):
            say(line)
    if local_cluster:
        say(f"training plan of this local run: {plan.summary()}")
    outputs = namedtuple("GpuConfig", ["worker_pool_specs", "training_workers", "strategy",
                                       "training_plan", "alternatives"])
    return outputs(result.specs, readers, plan.strategy, plan.to_dict(),
                   [a.to_dict() for a in checked.alternatives])


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def fingerprint_dataset_source(options: dict) -> str:
    """Stage 2, first part: a cheap key of the source's state (never cached itself)."""
    from components.dataset.options import DatasetOptions
    from components.dataset.sources import source_fingerprint
    from components.stage import say, stage_errors
    from trainer.schema import validate

    with stage_errors("dataset"):
        dataset = validate(DatasetOptions, options, prefix="dataset", strict=False)
        fingerprint = source_fingerprint(dataset.source, dataset.image_size)
    say(f"dataset source {dataset.source}: fingerprint {fingerprint}")
    return fingerprint


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def dataflow_launch(project: str, vertex: dict, images: dict) -> dict:
    """Stage 2 on Vertex AI with `dataset.engine: beam`, after stage 3: what the dataset
    stage needs to start its Dataflow job (the run's project, region and service account,
    and the CPU image by digest, which the Dataflow workers run)."""
    from components.dataset.dataflow import launch_settings
    from components.stage import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.schema import validate

    with stage_errors("dataset"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        settings = launch_settings(project, options.region, options.service_account, images)
    say(f"the dataset is prepared by a Dataflow job in {settings['region']} whose workers run "
        f"{settings['sdk_image']}")
    return settings


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def prepare_dataset(options: dict, source_fingerprint: str, min_shards: int,
                    dataset: Output[Dataset], report: Output[Markdown], dataflow: dict = None):
    """Stage 2: image sources -> sharded TFRecords per split, manifest and report.

    `source_fingerprint` is not used here: it is an input so that KFP's cache key changes
    exactly when the source does. `min_shards` is the number of training workers.
    `dataflow` (`dataflow_launch`'s output), with `dataset.engine: beam`, runs the Beam
    pipeline as a Dataflow job; empty, it runs here.
    """
    from components.dataset.dataflow import dataflow_job
    from components.dataset.options import DatasetOptions
    from components.dataset.prepare import prepare_dataset as prepare
    from components.stage import say, stage_errors
    from trainer.schema import validate

    with stage_errors("dataset"):
        settings = validate(DatasetOptions, options, prefix="dataset", strict=False)
        job = dataflow_job(settings, output_uri=dataset.uri, **dataflow) \
            if dataflow and settings.engine == "beam" else None
        manifest = prepare(settings, dataset.path, min_shards=min_shards,
                           report_path=report.path, dataflow=job)
    dataset.metadata.update({
        "classes": manifest["classes"],
        "image_size": manifest["image_size"],
        "source_fingerprint": manifest["source_fingerprint"],
        "skipped": len(manifest["skipped"]),
        **{f"{split}_examples": info["count"] for split, info in manifest["splits"].items()},
    })
    counts = ", ".join(f"{s} {i['count']} in {len(i['shards'])} shards"
                       for s, i in manifest["splits"].items())
    say(f"dataset: {len(manifest['classes'])} classes ({', '.join(manifest['classes'])}); "
        f"{counts}; {len(manifest['skipped'])} skipped; prepared by the {settings.engine} "
        + ("engine as a Dataflow job" if job else "engine"))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def build_images(vertex: dict, training: dict, push: bool, trainer_source_uri: str,
                 build_context: Output[Artifact]) -> dict:
    """Stage 3: the images' build context and digest; on Vertex, the images built from it.

    Returns, per image (`gpu`: the trainer on GPU machines, `cpu`: components, CPU-only
    pools and serving), its `reference` by digest alone (`REPO/NAME@sha256:...`, the form
    Vertex AI accepts), its content `tag` and whether it was `built` now (Cloud Build runs
    only for missing tags); an empty dict locally, where training uses the trainer installed
    in the environment.
    """
    from components.build.build_images import run_build_stage
    from components.stage import stage_errors
    from components.vertex_options import VertexOptions
    from trainer.schema import validate

    with stage_errors("build"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        found, metadata = run_build_stage(
            build_context.path, build_context.uri, options.image_repository, push=push,
            trainer_source_uri=trainer_source_uri, user_code=training.get("user_code", ""),
            settings=options.build_settings())
    build_context.metadata.update(metadata)
    return found


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def train_on_local_workers(dataset: Input[Dataset], training: dict, local_cluster: dict,
                           training_plan: dict, model: Output[Model],
                           training_job: Output[Artifact]):
    """Stage 4 (local): the trainer as one process per replica of `local_cluster` (workers,
    parameter servers, evaluators besides the chief) on localhost, each applying stage 1's
    `training_plan` for this local cluster."""
    from components.stage import say, stage_errors
    from components.training.local_cluster import replica_names, run_local_cluster
    from trainer.cluster import Layout
    from trainer.options import TrainingOptions
    from trainer.schema import to_flags, validate
    from trainer.training_plan import TrainingPlan

    with stage_errors("training"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        plan = TrainingPlan.from_dict(training_plan)
        layout = Layout(**{k: int(v) for k, v in local_cluster.items()})
        say(f"training: {len(replica_names(layout))} processes on localhost (1 chief, "
            f"{layout.workers} worker(s), {layout.parameter_servers} parameter server(s), "
            f"{layout.evaluators} evaluator(s)), TF_CONFIG as Vertex AI sets it")
        chosen = run_local_cluster(layout, [
            "--job-dir", training_job.path, "--data-dir", dataset.path,
            "--model-dir", model.path, *to_flags(options)], plan=plan)
    model.metadata.update({"framework": "tensorflow", "strategy": chosen,
                           "training_plan": plan.summary()})


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def tune_on_local_workers(dataset: Input[Dataset], training: dict, tuning: dict,
                          local_cluster: dict, training_plan: dict, trials: Output[Markdown],
                          study: Output[Artifact]) -> NamedTuple(
                              "TuningOutputs", [("training", dict), ("record", dict)]):
    """Stage 4 (local), first part: the `tuning` study, each trial a local cluster of the
    trainer (Open Source Vizier suggests them); returns the training options with the best
    trial's parameters (unchanged without a study) and the study's record."""
    from collections import namedtuple

    from components.stage import say, stage_errors
    from components.tuning.options import TuningOptions
    from components.tuning.trials import trials_table
    from components.tuning.tune_locally import tune_on_local_workers as tune
    from trainer import files
    from trainer.cluster import Layout
    from trainer.options import TrainingOptions
    from trainer.schema import validate
    from trainer.training_plan import TrainingPlan

    with stage_errors("tuning"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        study_options = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        layout = Layout(**{k: int(v) for k, v in local_cluster.items()})
        best, record = tune(dataset.path, options, study_options, layout, study.path, log=say,
                            plan=TrainingPlan.from_dict(training_plan))
    files.write_text(trials.path, trials_table(record) if record
                     else "No tuning: the configuration has no study.\n")
    study.metadata.update({k: record[k] for k in ("best_trial", "best_metric")} if record
                          else {})
    return namedtuple("TuningOutputs", ["training", "record"])(best, record)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def vertex_tuning_spec(worker_pool_specs: list, images: dict, dataset: Input[Dataset],
                       training: dict, tuning: dict, vertex: dict, training_plan: dict,
                       tuning_job: Output[Artifact]) -> NamedTuple(
                           "VertexTuningSpec", [
                               ("worker_pool_specs", list), ("base_output_directory", str),
                               ("display_name", str), ("study_spec_metrics", list),
                               ("study_spec_parameters", list), ("max_trial_count", int),
                               ("parallel_trial_count", int), ("max_failed_trial_count", int),
                               ("study_spec_algorithm", str),
                               ("study_spec_measurement_selection_type", str), ("region", str),
                               ("service_account", str), ("network", str)]):
    """Stage 4 (Vertex) with a study, part 1: the HyperparameterTuningJob's trials on the
    validated pools, each replica applying stage 1's `training_plan`, and its study."""
    from collections import namedtuple

    from components.stage import stage_errors
    from components.training.vertex_job import plan_flags
    from components.tuning.options import TuningOptions, vertex_problems
    from components.tuning.vertex_study import tuning_job_spec
    from components.vertex_options import VertexOptions
    from trainer.errors import InputError
    from trainer.options import TrainingOptions
    from trainer.schema import to_flags, validate

    with stage_errors("tuning"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        study = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        if not study.enabled:
            raise InputError("tuning has no parameters, but this pipeline was compiled with a "
                             "study: give tuning.parameters, or compile without tuning")
        problems = vertex_problems(study)
        if problems:
            raise InputError("; ".join(problems))
        job = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        spec = tuning_job_spec(worker_pool_specs, images, dataset_path=dataset.path,
                               output_uri=tuning_job.uri, output_path=tuning_job.path,
                               trainer_args=[*to_flags(options), *plan_flags(training_plan)],
                               tuning=study,
                               job_name=job.job_name)
    values = {**spec, "region": job.region, "service_account": job.service_account,
              "network": job.network}
    return namedtuple("VertexTuningSpec", list(values))(**values)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def best_vertex_trial(gcp_resources: str, training: dict, tuning: dict,
                      trials: Output[Markdown]) -> NamedTuple(
                          "BestTrial", [("training", dict), ("record", dict)]):
    """Stage 4 (Vertex) with a study, part 3: the tuning job's trials read back, and the
    training options with the best trial's parameters."""
    from collections import namedtuple

    from components.stage import say, stage_errors
    from components.tuning.options import TuningOptions
    from components.tuning.trials import study_record, trials_table
    from components.tuning.vertex_study import job_name_of, read_tuning_job, trials_of
    from trainer import files
    from trainer.schema import validate

    with stage_errors("tuning"):
        study = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        job = read_tuning_job(job_name_of(gcp_resources))
        record = study_record(study, trials_of(job, study))
    files.write_text(trials.path, trials_table(record))
    say(f"tuning: best trial {record['best_trial']} of {len(record['trials'])} "
        f"({study.metric} {record['best_metric']:.4f}): " + ", ".join(
            f"{k}={v}" for k, v in record["best_parameters"].items()))
    return namedtuple("BestTrial", ["training", "record"])(
        {**training, **record["best_parameters"]}, record)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def train_on_vertex_ai(project: str, alternatives: list, images: dict, dataset: Input[Dataset],
                       training: dict, vertex: dict, training_job: Output[Artifact]
                       ) -> NamedTuple("VertexTraining", [
                           ("model_uri", str), ("worker_pool_specs", list), ("strategy", str),
                           ("training_plan", dict), ("capacity", dict),
                           ("gcp_resources", str)]):
    """Stage 4 (Vertex): the trainer as a Vertex AI CustomJob on the first of stage 1's
    `alternatives` with capacity (the primary, then `vertex.fallbacks`; a stock-out or a
    quota refusal moves on, any other failure fails the step); every replica applies its
    alternative's training plan. Returns the model's URI, the pools, strategy and plan
    that trained, the capacity record (which alternative trained and why not the others)
    and the jobs it created."""
    from collections import namedtuple

    from components.capacity.launcher import gcp_resources, run_training_job, summary
    from components.stage import say, stage_errors
    from components.training.vertex_job import MODEL_SUBDIR

    with stage_errors("training"):
        done = run_training_job(project, alternatives, images, dataset_path=dataset.path,
                                output_uri=training_job.uri, output_path=training_job.path,
                                training=training, vertex=vertex, log=say)
    record = done.record()
    say(f"training: {summary(record)}")
    training_job.metadata.update({"capacity": summary(record), "custom_job": done.job.name})
    outputs = namedtuple("VertexTraining", ["model_uri", "worker_pool_specs", "strategy",
                                            "training_plan", "capacity", "gcp_resources"])
    plan = done.alternative.plan
    return outputs(f"{training_job.uri.rstrip('/')}/{MODEL_SUBDIR}",
                   done.alternative.worker_pool_specs, plan.strategy, plan.to_dict(), record,
                   gcp_resources(record["attempts"]))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def report_training(training_job: Input[Artifact], metrics: Output[Metrics],
                    curves: Output[HTML]):
    """Stage 4 (both targets), last part: the trainer's curves and final metrics."""
    from components.stage import say, stage_errors
    from components.training.training_report import publish_training_report

    with stage_errors("training report"):
        summary = publish_training_report(training_job.path, curves.path)
    for name, value in summary["metrics"].items():
        metrics.log_metric(name, value)
    say(f"training: {summary['epochs']} epochs, {summary['strategy']} on "
        f"{summary['num_workers']} training machine(s) and {summary['parameter_servers']} "
        f"parameter server(s), {summary['examples_per_second']:.0f} examples/s; "
        f"{summary['evaluations']} sidecar evaluation(s); final " + ", ".join(
            f"{k} {v:.4f}" for k, v in summary["metrics"].items()
            if k not in ("epochs_completed", "evaluator_epochs")))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def export_model(dataset: Input[Dataset], trained_model: Input[Model], training: dict,
                 vertex: dict, strategy: str, worker_pool_specs: list, training_plan: dict,
                 images: dict,
                 registry_root: str, job_name: str, tuning: dict, capacity: dict,
                 exported_model: Output[Model],
                 metrics: Output[Metrics], comparison: Output[Markdown]) -> NamedTuple(
                     "ExportOutputs", [("accuracy", float), ("model_uri", str),
                                       ("register", bool), ("default", bool),
                                       ("decision", str), ("labels", dict),
                                       ("description", str)]):
    """Stage 5: the new model's and the champion's metrics on the same splits (the
    trainer's own when measured on this dataset), the champion/challenger gate's decision,
    and the new model exported with its lineage.

    `registry_root` is the local registry (`run --local`: the model is registered there);
    "" on Vertex AI, where the champion is `vertex.parent_model`'s default version and the
    model upload that follows acts on the decision. `capacity` (Vertex AI) says which of
    the alternatives trained and why not the ones before it.
    """
    from collections import namedtuple

    from components.export.export_model import run_export_stage
    from components.stage import stage_errors

    with stage_errors("export"):
        done = run_export_stage(
            trained_model.path, dataset.path, exported_model.path, vertex=vertex,
            training=training, images=images, registry_root=registry_root, job_name=job_name,
            cluster={"strategy": strategy, "worker_pool_specs": worker_pool_specs,
                     "training_plan": training_plan, "capacity": capacity},
            exported_uri=exported_model.uri, comparison_path=comparison.path, tuning=tuning)
    for name, value in done.metrics.items():
        metrics.log_metric(name, value)
    exported_model.metadata.update({**done.metadata, "trained_model": trained_model.uri,
                                    "dataset": dataset.uri})
    return namedtuple("ExportOutputs", list(done.outputs))(**done.outputs)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def registration_plan(vertex: dict, register: bool, default: bool, images: dict) -> NamedTuple(
        "RegistrationPlan", [("register", bool), ("region", str), ("display_name", str),
                             ("parent_model", str), ("parent_model_uri", str),
                             ("serving_image", str), ("version_aliases", list)]):
    """Stage 5 (Vertex), part 2: how the gate's decision is registered.

    The model is served by `vertex.serving_image`, by default the run's own CPU image (by
    digest, from stage 3's `images`), which runs the TensorFlow it was trained with. A new
    version becomes the default only with the `default` alias (Vertex AI docs: "How to use
    model version aliases"); without it, the champion stays the default. The parent model
    is imported as gcpc's `VertexModel` artifacts are: its URI is the resource's API URL.
    """
    from collections import namedtuple

    from components.cloud_names import vertex_resource_uri
    from components.stage import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.schema import validate

    with stage_errors("registration"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
    serving = options.serving_image or images["cpu"]["reference"]
    aliases = ["default"] if default and options.parent_model else []
    say(f"registration: {'registering' if register else 'not registered'}"
        + (" as the default version" if register and default else
           " as a non-default version" if register and options.parent_model else ""))
    say(f"registration: served by {serving}")
    parent_uri = vertex_resource_uri(options.region, options.parent_model) \
        if options.parent_model else ""
    fields = ["register", "region", "display_name", "parent_model", "parent_model_uri",
              "serving_image", "version_aliases"]
    return namedtuple("RegistrationPlan", fields)(
        register, options.region, options.model_display_name, options.parent_model,
        parent_uri, serving, aliases)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def summarize_run(status: dsl.PipelineTaskFinalStatus, registry_root: str, job_name: str,
                  summary: Output[Markdown]):
    """The exit handler: runs whatever the outcome and says how the run ended, with the
    champion/challenger decision when there was one."""
    import json
    from pathlib import Path

    from components.export.local_registry import RUNS
    from components.stage import say

    facts = [("state", status.state)]
    if status.error_message:
        facts.append(("error", status.error_message))
    decision = Path(registry_root) / RUNS / f"{job_name}.json" if registry_root else None
    if decision is not None and decision.is_file():
        made = json.loads(decision.read_text())
        facts.append(("champion/challenger", made["reason"]))
        if made.get("registered_version"):
            facts.append(("local registry version", made["registered_version"]))
    trials = made.get("trials", "") if decision is not None and decision.is_file() else ""
    Path(summary.path).parent.mkdir(parents=True, exist_ok=True)
    Path(summary.path).write_text("\n".join(
        [f"# Run {status.pipeline_job_resource_name}", ""]
        + [f"- {name}: {value}" for name, value in facts]) + "\n"
        + (f"\n{trials}" if trials else ""))
    for name, value in facts:
        say(f"run {name}: {value}")
    for line in trials.splitlines()[2:]:  # the table and the best parameters
        say(line)
