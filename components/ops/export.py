"""Stage 5 and the run's end as KFP components: the model exported behind the
champion/challenger gate, how it is registered, and the run's summary."""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def export_model(dataset: Input[Dataset], trained_model: Input[Model], training: dict,
                 vertex: dict, strategy: str, worker_pool_specs: list, training_plan: dict,
                 images: dict,
                 registry_root: str, job_name: str, tuning: dict, capacity: dict,
                 training_job: Input[Artifact], exported_model: Output[Model],
                 metrics: Output[Metrics], comparison: Output[Markdown],
                 report: Output[HTML], pipeline_job: str = "") -> NamedTuple(
                     "ExportOutputs", [("accuracy", float), ("model_uri", str),
                                       ("register", bool), ("default", bool),
                                       ("deploy", bool), ("decision", str), ("labels", dict),
                                       ("description", str)]):
    """Stage 5: the new model's and the champion's metrics on the same splits (the
    trainer's own when measured on this dataset), the champion/challenger gate's decision,
    and the new model exported with its lineage (and the training's efficiency figures);
    `report` is the run's report (`components.export.run_report`).

    `registry_root` is the local registry (`run --local`: the model is registered there);
    "" on Vertex AI, where the champion is `vertex.parent_model`'s default version and the
    model upload that follows acts on the decision. `capacity` (Vertex AI) says which of
    the alternatives trained and why not the ones before it. `pipeline_job` (Vertex AI),
    the run's resource name: the run is recorded in Vertex AI Experiments.
    """
    from collections import namedtuple

    from components.export.export_model import run_export_stage
    from components.stage_messages import stage_errors

    with stage_errors("export"):
        done = run_export_stage(
            trained_model.path, dataset.path, exported_model.path, vertex=vertex,
            training=training, images=images, registry_root=registry_root, job_name=job_name,
            cluster={"strategy": strategy, "worker_pool_specs": worker_pool_specs,
                     "training_plan": training_plan, "capacity": capacity},
            exported_uri=exported_model.uri, comparison_path=comparison.path, tuning=tuning,
            training_job_dir=training_job.path, report_path=report.path,
            pipeline_job=pipeline_job)
    for name, value in done.metrics.items():
        metrics.log_metric(name, value)
    exported_model.metadata.update({**done.metadata, "trained_model": trained_model.uri,
                                    "dataset": dataset.uri})
    return namedtuple("ExportOutputs", list(done.outputs))(**done.outputs)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def decide_registration(vertex: dict, register: bool, default: bool, images: dict) -> NamedTuple(
        "RegistrationPlan", [("register", bool), ("region", str), ("display_name", str),
                             ("parent_model", str), ("parent_model_uri", str),
                             ("serving_image", str), ("version_aliases", list),
                             ("batch", bool), ("encryption_key", str)]):
    """Stage 5 (Vertex), part 2: how the gate's decision is registered
    (`components.export.registration`)."""
    import dataclasses
    from collections import namedtuple

    from components.export.registration import Registration, registration
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("registration"):
        planned = registration(validate(VertexOptions, vertex, prefix="vertex", strict=False),
                               register, default, images)
    for line in planned.lines(default):
        say(line)
    fields = [f.name for f in dataclasses.fields(Registration)]
    return namedtuple("RegistrationPlan", fields)(*dataclasses.astuple(planned))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def summarize_run(status: dsl.PipelineTaskFinalStatus, registry_root: str, job_name: str,
                  project: str, vertex: dict, summary: Output[Markdown],
                  cost: Output[Artifact]):
    """The exit handler: runs whatever the outcome and says how the run ended, with the
    champion/challenger decision and the rollout when there were; on Vertex AI, a run that
    did not succeed leaves no canary serving (the champion gets all the traffic back):
    `components.export.run_summary`. On Vertex AI, `cost` is the run's itemised
    `cost.json` (`components.capacity.run_cost`)."""
    from pathlib import Path

    from components.export.run_summary import run_title, summarize
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("the run's end"):
        ended = summarize(status.state, status.error_message, registry_root=registry_root,
                          job_name=job_name, project=project,
                          vertex=validate(VertexOptions, vertex, prefix="vertex", strict=False),
                          pipeline_job=status.pipeline_job_resource_name)
    Path(summary.path).parent.mkdir(parents=True, exist_ok=True)
    Path(summary.path).write_text(ended.markdown(
        run_title(status.pipeline_job_resource_name, job_name)))
    if ended.cost is not None:
        import json

        Path(cost.path).parent.mkdir(parents=True, exist_ok=True)
        Path(cost.path).write_text(json.dumps(ended.cost, indent=2, sort_keys=True))
    for line in ended.lines():
        say(line)
