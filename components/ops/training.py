"""Stage 4 as KFP components: training (and a study first, when one is configured) on
local worker processes or on Vertex AI, and the training report."""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def train_on_local_workers(dataset: Input[Dataset], training: dict, local_cluster: dict,
                           training_plan: dict, model: Output[Model],
                           training_job: Output[Artifact]):
    """Stage 4 (local): the trainer as one process per replica of `local_cluster` (workers,
    parameter servers, evaluators besides the chief) on localhost, each applying stage 1's
    `training_plan` for this local cluster."""
    from components.stage_messages import say, stage_errors
    from components.training.local_cluster import replica_names, run_local_cluster
    from trainer.cluster.roles import Layout
    from trainer.cluster.training_plan import TrainingPlan
    from trainer.common.schema import to_flags, validate
    from trainer.run.training_options import TrainingOptions

    with stage_errors("training"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        plan = TrainingPlan.from_dict(training_plan)
        layout = Layout.from_dict(local_cluster)
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

    from components.stage_messages import say, stage_errors
    from components.tuning.trials import trials_table
    from components.tuning.tune_locally import tune_on_local_workers as tune
    from components.tuning.tuning_options import TuningOptions
    from trainer.cluster.roles import Layout
    from trainer.cluster.training_plan import TrainingPlan
    from trainer.common import files
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    with stage_errors("tuning"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        study_options = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        layout = Layout.from_dict(local_cluster)
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
                               ("service_account", str), ("network", str),
                               ("encryption_key", str)]):
    """Stage 4 (Vertex) with a study, part 1: the HyperparameterTuningJob's trials on the
    validated pools, each replica applying stage 1's `training_plan`, and its study."""
    from collections import namedtuple

    from components.gpu.worker_pool import parse_pools
    from components.stage_messages import stage_errors
    from components.training.vertex_job import trainer_flags
    from components.tuning.tuning_options import TuningOptions
    from components.tuning.vertex_study import tuning_job_spec
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    with stage_errors("tuning"):
        options = validate(TrainingOptions, training, prefix="training", strict=False)
        study = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        job = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        spec = tuning_job_spec(parse_pools(worker_pool_specs), images,
                               dataset_path=dataset.path,
                               output_uri=tuning_job.uri, output_path=tuning_job.path,
                               trainer_args=trainer_flags(options, training_plan),
                               tuning=study,
                               job_name=job.job_name)
    values = {**spec, "region": job.region, "service_account": job.training_account,
              "network": job.network, "encryption_key": job.encryption_key}
    return namedtuple("VertexTuningSpec", list(values))(**values)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def best_vertex_trial(gcp_resources: str, training: dict, tuning: dict, vertex: dict,
                      trials: Output[Markdown]) -> NamedTuple(
                          "BestTrial", [("training", dict), ("record", dict)]):
    """Stage 4 (Vertex) with a study, part 3: the tuning job's trials read back, and the
    training options with the best trial's parameters, and what the study cost."""
    from collections import namedtuple

    from components.capacity.cost import book_of, region_of, tuning_line
    from components.stage_messages import say, stage_errors
    from components.tuning.trials import trials_table
    from components.tuning.tuning_options import TuningOptions
    from components.tuning.vertex_study import finished_study, job_name_of, read_tuning_job
    from trainer.common import files
    from trainer.common.schema import validate

    with stage_errors("tuning"):
        study = validate(TuningOptions, tuning, prefix="tuning", strict=False)
        name = job_name_of(gcp_resources)
        book = book_of(vertex, say)
        record = finished_study(read_tuning_job(name), study,
                                book.region(region_of(name, book.default_region)))
    files.write_text(trials.path, trials_table(record))
    say(f"tuning: best trial {record['best_trial']} of {len(record['trials'])} "
        f"({study.metric} {record['best_metric']:.4f}): " + ", ".join(
            f"{k}={v}" for k, v in record["best_parameters"].items()))
    say(tuning_line(record["cost"]))
    return namedtuple("BestTrial", ["training", "record"])(
        {**training, **record["best_parameters"]}, record)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def train_on_vertex_ai(project: str, alternatives: list, images: dict, dataset: Input[Dataset],
                       training: dict, vertex: dict, training_job: Output[Artifact],
                       gcp_resources: dsl.OutputPath(str), pipeline_job: str = ""
                       ) -> NamedTuple("VertexTraining", [
                           ("model_uri", str), ("worker_pool_specs", list), ("strategy", str),
                           ("training_plan", dict), ("capacity", dict)]):
    """Stage 4 (Vertex): the trainer as a Vertex AI CustomJob on the first of stage 1's
    `alternatives` with capacity (the primary, then `vertex.fallbacks`; a stock-out, a
    quota refusal or a queue past `vertex.queue_limit` moves on, any other failure fails
    the step); every replica applies its alternative's training plan. Every job is named
    in `gcp_resources` as soon as it exists, and a step that runs again follows the job an
    earlier run of it left. Under `vertex.budget_usd` the job is held to what the run
    leaves (`pipeline_job`, the run's resource name: its steps so far). Returns the
    model's URI, the pools, strategy and plan that trained, and the capacity record (which
    alternative trained and why not the others)."""
    from collections import namedtuple

    from components.capacity.budget import BudgetReachedError
    from components.capacity.launcher import summary
    from components.capacity.run_cost import before_training
    from components.capacity.vertex_launch import run_training_job
    from components.stage_messages import say, stage_errors
    from components.training.after_job import record_all
    from components.training.vertex_job import MODEL_SUBDIR
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("training"):
        before = before_training(project, validate(VertexOptions, vertex, prefix="vertex",
                                                    strict=False), pipeline_job, say)
        try:
            done = run_training_job(project, alternatives, images, dataset_path=dataset.path,
                                    output_uri=training_job.uri,
                                    output_path=training_job.path, training=training,
                                    vertex=vertex, gcp_resources_path=gcp_resources, log=say,
                                    before=before)
        except BudgetReachedError as stopped:  # what it cost is recorded, then it stops
            record_all(stopped.result.record(), stopped.result.job, vertex,
                       training_job.path, log=say)
            raise
    record = done.record()
    say(f"training: {summary(record)}")
    record_all(record, done.job, vertex, training_job.path, log=say)
    training_job.metadata.update({"capacity": summary(record), "custom_job": done.job.name})
    outputs = namedtuple("VertexTraining", ["model_uri", "worker_pool_specs", "strategy",
                                            "training_plan", "capacity"])
    plan = done.alternative.plan
    return outputs(f"{training_job.uri.rstrip('/')}/{MODEL_SUBDIR}",
                   done.alternative.worker_pool_specs, plan.strategy, plan.to_dict(), record)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def report_training(training_job: Input[Artifact], metrics: Output[Metrics],
                    curves: Output[HTML]):
    """Stage 4 (both targets), last part: the trainer's curves and final metrics."""
    from components.export.split_figures import trainer_figures
    from components.stage_messages import say, stage_errors
    from components.training import efficiency
    from components.training.training_report import publish_training_report

    with stage_errors("training report"):
        summary = publish_training_report(training_job.path, curves.path)
    for name, value in {**summary["metrics"],
                        **efficiency.metrics(summary["efficiency"])}.items():
        metrics.log_metric(name, value)
    say(f"training: {summary['epochs']} epochs, {summary['strategy']} on "
        f"{summary['num_workers']} training machine(s) and {summary['parameter_servers']} "
        f"parameter server(s), {summary['examples_per_second']:.0f} training images/s end to "
        "end (warm-up and validation included); "
        f"{summary['evaluations']} sidecar evaluation(s); final figures, "
        f"{trainer_figures(summary['metrics'])}")
    for line in efficiency.lines(summary["efficiency"]):
        say(line)
