"""Stages 5 to 7 after the export, and the run's end, as the pipeline calls them
(`pipelines.pipeline`): the registration on Vertex AI as the gate decided, the deploy stage
(a canary on the endpoint, or model servers locally), the batch step after a promotion,
and the exit handler's tasks (the email, and the summary that protects the champion).
"""

# No `from __future__ import annotations`: KFP reads the real annotation objects.
from kfp import dsl

from components.ops import batch_predict as batch_ops
from components.ops import deploy as deploy_ops
from components.ops import export as export_ops
from components.serving.batch import KEY as BATCH_KEY


def register_if_better(project_id, vertex: dict, export, image):
    """Stage 5 on Vertex AI: register the model as the gate decided (a new default version,
    a non-default version, or not at all), with its lineage as labels and description,
    served by the run's own CPU image (`trainer.serving.app`)."""
    from google_cloud_pipeline_components.types import artifact_types
    from google_cloud_pipeline_components.v1.model import ModelUploadOp

    from trainer.serving.container import container_spec

    decided = export_ops.decide_registration(vertex=vertex, register=export.outputs["register"],
                                             default=export.outputs["default"],
                                             images=image.outputs["Output"])
    decided.set_display_name("5a registration decision").set_caching_options(False)
    decision = decided.outputs
    with dsl.If(decision["register"] == True, name="gate-registers"):  # noqa: E712 - KFP DSL
        serving = dsl.importer(
            artifact_uri=export.outputs["model_uri"],
            artifact_class=artifact_types.UnmanagedContainerModel,
            metadata={"containerSpec": container_spec(decision["serving_image"])})
        serving.set_display_name("5b serving container").set_caching_options(False)
        with dsl.If(decision["parent_model"] == "", name="new-model"):
            upload = ModelUploadOp(project=project_id, location=decision["region"],
                                   display_name=decision["display_name"],
                                   description=export.outputs["description"],
                                   labels=export.outputs["labels"],
                                   unmanaged_container_model=serving.output,
                                   encryption_spec_key_name=decision["encryption_key"])
            upload.set_display_name("5c register model").set_caching_options(False)
            deploy_on_vertex(project_id, vertex, export, upload, decision)
        with dsl.Else(name="new-version"):
            # gcpc's VertexModel convention: the URI is the resource's API URL, the
            # metadata its resource name (google_cloud_pipeline_components.types.
            # artifact_types.VertexModel.create).
            parent = dsl.importer(
                artifact_uri=decision["parent_model_uri"],
                artifact_class=artifact_types.VertexModel,
                metadata={"resourceName": decision["parent_model"]})
            parent.set_display_name("5c parent model").set_caching_options(False)
            version = ModelUploadOp(
                project=project_id, location=decision["region"],
                display_name=decision["display_name"],
                description=export.outputs["description"], labels=export.outputs["labels"],
                version_aliases=decision["version_aliases"],
                unmanaged_container_model=serving.output, parent_model=parent.output,
                encryption_spec_key_name=decision["encryption_key"])
            version.set_display_name("5d register model version").set_caching_options(False)
            deploy_on_vertex(project_id, vertex, export, version, decision)


def deploy_on_vertex(project_id, vertex: dict, export, upload, decision):
    """Stage 6 on Vertex AI, when the gate made the new model the default and
    `vertex.deploy.endpoint` is set: the registered version as a canary, then promoted or
    rolled back. The batch step follows a promotion (the deploy stage's, or the gate's
    when there is no endpoint) when `vertex.batch_predict.source` is set (`decision`: the
    registration's)."""
    with dsl.If(export.outputs["deploy"] == True, name="gate-deploys"):  # noqa: E712
        # The run's resource name, as gcpc's model evaluation components take it
        # (`import_evaluated_annotation`: `--pipeline_job_resource_name`): what the run's
        # steps have cost so far is part of the canary's budget.
        task = deploy_ops.deploy_on_vertex_ai(
            project=project_id, vertex=vertex, model=upload.outputs["model"],
            model_uri=export.outputs["model_uri"], job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
            pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER)
        task.set_display_name("6 deploy").set_caching_options(False)
        batch_on_vertex(project_id, vertex, upload, decision, task.outputs["promoted"])
    # Two conditions, not an Elif: KFP would take an Elif here for the Else that follows
    # the caller's own condition.
    with dsl.If(export.outputs["deploy"] == False, name="no-endpoint"):  # noqa: E712
        with dsl.If(export.outputs["default"] == True, name="gate-promotes"):  # noqa: E712
            batch_on_vertex(project_id, vertex, upload, decision, True)


def batch_on_vertex(project_id, vertex: dict, upload, decision, promoted):
    """The batch step, only with a batch source (no pod starts otherwise):
    `vertex.batch_predict.source` scored by the promoted version as a BatchPredictionJob
    (gcpc's ModelBatchPredictOp; JSONL instances keyed by their image,
    `components.serving.batch`)."""
    from google_cloud_pipeline_components.v1.batch_predict_job import ModelBatchPredictOp

    with dsl.If(decision["batch"] == True, name="batch-source-set"):  # noqa: E712
        inputs = batch_ops.batch_instances(vertex=vertex, promoted=promoted)
        inputs.set_display_name("7a batch instances").set_caching_options(False)
        job = inputs.outputs
        with dsl.If(job["run"] == True, name="batch-configured"):  # noqa: E712
            scored = ModelBatchPredictOp(
                project=project_id, location=decision["region"],
                job_display_name="batch of the champion",
                model=upload.outputs["model"], instances_format="jsonl",
                predictions_format="jsonl", gcs_source_uris=job["uris"],
                instance_type="object", key_field=BATCH_KEY,
                gcs_destination_output_uri_prefix=job["destination"],
                machine_type=job["machine_type"],
                starting_replica_count=job["starting_replica_count"],
                max_replica_count=job["max_replica_count"],
                manual_batch_tuning_parameters_batch_size=job["batch_size"],
                service_account=job["service_account"],
                encryption_spec_key_name=decision["encryption_key"])
            # Never cached: a cached batch step would return last run's predictions
            # (kubeflow/pipelines#8252).
            scored.set_display_name("7b batch predict").set_caching_options(False)


def deploy_locally(vertex: dict, registry_root, export, data):
    """Stage 6 locally: both models in model servers behind a weighted router, the test
    split as traffic; then the batch step, as on Vertex AI. Both steps run every time and
    read from the run's record whether there is anything to do: KFP's local runner cannot
    evaluate a condition on a task's named output (it reads `pipelinechannel--TASK-OUTPUT`
    as a pipeline input and skips the branch)."""
    task = deploy_ops.deploy_locally(vertex=vertex, registry_root=registry_root,
                                     job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                                     dataset=data.outputs["dataset"])
    task.set_display_name("6 deploy").set_caching_options(False).after(export)
    batch = batch_ops.batch_predict_locally(vertex=vertex, registry_root=registry_root,
                                            job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
    batch.set_display_name("7 batch predict").set_caching_options(False).after(task)


def summarize(registry_root: str, project_id="", vertex: dict = None):
    """The run's last task: how it ended, and on Vertex AI the champion given back the
    traffic of a canary a failed or cancelled run left."""
    task = export_ops.summarize_run(registry_root=registry_root,
                                    job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
                                    project=project_id, vertex=vertex or {})
    return task.set_display_name("notify").set_caching_options(False)


def exit_task(emails: tuple[str, ...], registry_root: str, project_id="", vertex: dict = None):
    """The exit handler's task: it runs whatever the outcome. Vertex AI's email
    notification (status and links) when addresses are configured, which works only as an
    exit handler's exit task (gcpc's `vertex_pipelines_notification_email`); otherwise the
    summary."""
    if not emails:
        return summarize(registry_root, project_id, vertex)
    from google_cloud_pipeline_components.v1.vertex_notification_email import (
        VertexNotificationEmailOp,
    )

    return VertexNotificationEmailOp(recipients=list(emails)).set_display_name(
        "email").set_caching_options(False)


def summarize_beside_emails(run, emails: tuple[str, ...], registry_root: str, project_id="",
                            vertex: dict = None) -> None:
    """With emails, the summary (and the champion's protection) after the exit handler's
    group `run` as well, whatever its outcome.

    kfp 2.17 refuses nested exit handlers and takes one exit task per handler; a task after
    the group that ignores its failure compiles as an exit task does: `triggerPolicy:
    ALL_UPSTREAM_TASKS_COMPLETED` on the group, with the group's `taskFinalStatus`.
    """
    if emails:
        summarize(registry_root, project_id, vertex).after(run).ignore_upstream_failure()
