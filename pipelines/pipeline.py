"""The pipeline: five stages, one definition, two targets.

prepare dataset -> validate GPU config -> build image -> train -> export model.

Everything but the training step is shared (`_stages`). On Vertex, training is a
CustomJob (google-cloud-pipeline-components) whose worker pools are the validation
stage's output at run time, so machine and GPU settings stay pipeline parameters, and
an exported model that passes the accuracy threshold is registered in the Vertex AI
Model Registry. Locally, a component starts the workers as processes on localhost.
"""

# No `from __future__ import annotations`: KFP reads the real annotation objects.
from typing import Callable, NamedTuple

from kfp import dsl
from kfp.dsl import Metrics, Model

from components import ops
from pipelines.config import Config

PIPELINE_NAME = "gpu-training-pipeline"
LOCAL_PIPELINE_NAME = "gpu-training-pipeline-local"
_DEFAULTS = Config()
_DESCRIPTION = ("Prepares a sharded TFRecord dataset, validates the GPU worker pools, "
                "builds the trainer image, trains with MultiWorkerMirroredStrategy "
                "on several workers and exports the evaluated SavedModel.")


class PipelineOutputs(NamedTuple):
    model: Model
    metrics: Metrics


def _stages(train: Callable, *, dataset_source: str, image_size: int,
            validation_fraction: float, test_fraction: float, num_shards: int,
            min_shards: int, max_bad_fraction: float, worker_pool_specs: list, region: str,
            image_repository: str, push_image: bool, trainer_source_uri: str,
            service_account: str):
    """Wires the five stages; returns (export task, outputs).

    `train(dataset_task, gpu_task, build_task)` returns (trained Model, training job
    directory artifact, the task that finishes training); it is the only part that
    differs between the targets.
    """
    fingerprint = ops.fingerprint_dataset_source(source=dataset_source, image_size=image_size)
    fingerprint.set_display_name("1 dataset source fingerprint")
    # Only the dataset is reused from the cache (keyed on the source's fingerprint): the
    # fingerprint must look at the source every time, and a retraining must retrain.
    fingerprint.set_caching_options(False)
    data = ops.prepare_dataset(
        source=dataset_source, source_fingerprint=fingerprint.output, image_size=image_size,
        validation_fraction=validation_fraction, test_fraction=test_fraction,
        num_shards=num_shards, min_shards=min_shards, max_bad_fraction=max_bad_fraction)
    data.set_display_name("1 prepare dataset")
    gpu = ops.validate_gpu_config(worker_pool_specs=worker_pool_specs, region=region)
    gpu.set_display_name("2 validate GPU config").after(data)
    build = ops.build_trainer_image(image_repository=image_repository, push=push_image,
                                    trainer_source_uri=trainer_source_uri,
                                    service_account=service_account)
    build.set_display_name("3 build trainer image").after(gpu)
    trained_model, training_job, trained = train(data, gpu, build)
    report = ops.report_training(training_job=training_job)
    report.set_display_name("4 training report").after(trained)
    export = ops.export_model(dataset=data.outputs["dataset"], trained_model=trained_model)
    export.set_display_name("5 export model")
    for task in (gpu, build, report, export):
        task.set_caching_options(False)
    return export, PipelineOutputs(export.outputs["exported_model"], export.outputs["metrics"])


@dsl.pipeline(name=PIPELINE_NAME, description=_DESCRIPTION)
def vertex_pipeline(
    project: str = "{{$.pipeline_google_cloud_project_id}}",
    region: str = _DEFAULTS.vertex.region,
    worker_pool_specs: list = list(_DEFAULTS.vertex.worker_pool_specs),
    job_name: str = _DEFAULTS.vertex.job_name,
    service_account: str = _DEFAULTS.vertex.service_account,
    network: str = _DEFAULTS.vertex.network,
    restart_job_on_worker_restart: bool = _DEFAULTS.vertex.restart_job_on_worker_restart,
    scheduling_strategy: str = _DEFAULTS.vertex.scheduling_strategy,
    timeout: str = _DEFAULTS.vertex.timeout,
    tensorboard: str = _DEFAULTS.vertex.tensorboard,
    image_repository: str = _DEFAULTS.vertex.image_repository,
    trainer_source_uri: str = "",
    dataset_source: str = _DEFAULTS.dataset.source,
    image_size: int = _DEFAULTS.dataset.image_size,
    validation_fraction: float = _DEFAULTS.dataset.validation_fraction,
    test_fraction: float = _DEFAULTS.dataset.test_fraction,
    num_shards: int = _DEFAULTS.dataset.num_shards,
    min_shards: int = _DEFAULTS.vertex_training_workers(),
    max_bad_fraction: float = _DEFAULTS.dataset.max_bad_fraction,
    epochs: int = _DEFAULTS.training.epochs,
    batch_size: int = _DEFAULTS.training.batch_size,
    learning_rate: float = _DEFAULTS.training.learning_rate,
    model_name: str = _DEFAULTS.training.model,
    mixed_precision: str = _DEFAULTS.training.mixed_precision,
    xla: str = _DEFAULTS.training.xla,
    accuracy_threshold: float = _DEFAULTS.vertex.accuracy_threshold,
    model_display_name: str = _DEFAULTS.vertex.model_display_name,
    parent_model: str = _DEFAULTS.vertex.parent_model,
    serving_image: str = _DEFAULTS.vertex.serving_image,
) -> PipelineOutputs:
    """The pipeline for Vertex AI Pipelines (training as a Vertex AI CustomJob)."""
    from google_cloud_pipeline_components.types import artifact_types
    from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp
    from google_cloud_pipeline_components.v1.model import ModelUploadOp

    def train(data, gpu, build):
        spec = ops.vertex_training_spec(
            worker_pool_specs=gpu.output, image_uri=build.outputs["Output"],
            dataset=data.outputs["dataset"], epochs=epochs, batch_size=batch_size,
            learning_rate=learning_rate, model_name=model_name, mixed_precision=mixed_precision,
            xla=xla, job_name=job_name)
        spec.set_display_name("4a training job spec").set_caching_options(False)
        job = CustomTrainingJobOp(
            project=project, location=region, display_name=spec.outputs["display_name"],
            worker_pool_specs=spec.outputs["worker_pool_specs"],
            base_output_directory=spec.outputs["base_output_directory"],
            service_account=service_account, network=network, timeout=timeout,
            restart_job_on_worker_restart=restart_job_on_worker_restart,
            strategy=scheduling_strategy, tensorboard=tensorboard)
        job.set_display_name("4b train on Vertex AI").set_caching_options(False)
        trained = dsl.importer(artifact_uri=spec.outputs["model_uri"], artifact_class=Model,
                               reimport=False).after(job)
        trained.set_display_name("4c trained model")
        return trained.output, spec.outputs["training_job"], job

    export, outputs = _stages(
        train, dataset_source=dataset_source, image_size=image_size,
        validation_fraction=validation_fraction, test_fraction=test_fraction,
        num_shards=num_shards, min_shards=min_shards, max_bad_fraction=max_bad_fraction,
        worker_pool_specs=worker_pool_specs, region=region, image_repository=image_repository,
        push_image=True, trainer_source_uri=trainer_source_uri,
        service_account=service_account)

    # Stage 5, Vertex only: register a model that passes the threshold.
    with dsl.If(export.outputs["accuracy"] >= accuracy_threshold, name="accuracy-passes"):
        serving = dsl.importer(
            artifact_uri=export.outputs["model_uri"],
            artifact_class=artifact_types.UnmanagedContainerModel,
            metadata={"containerSpec": {"imageUri": serving_image}})
        serving.set_display_name("5a serving container")
        with dsl.If(parent_model == "", name="new-model"):
            ModelUploadOp(project=project, location=region, display_name=model_display_name,
                          unmanaged_container_model=serving.output
                          ).set_display_name("5b register model")
        with dsl.Else(name="new-version"):
            parent = dsl.importer(
                artifact_uri=parent_model, artifact_class=artifact_types.VertexModel,
                metadata={"resourceName": parent_model})
            parent.set_display_name("5b parent model")
            ModelUploadOp(project=project, location=region, display_name=model_display_name,
                          unmanaged_container_model=serving.output, parent_model=parent.output
                          ).set_display_name("5c register model version")
    return outputs


@dsl.pipeline(name=LOCAL_PIPELINE_NAME, description=_DESCRIPTION + " (local workers)")
def local_pipeline(
    region: str = _DEFAULTS.vertex.region,
    worker_pool_specs: list = list(_DEFAULTS.vertex.worker_pool_specs),
    image_repository: str = _DEFAULTS.vertex.image_repository,
    dataset_source: str = _DEFAULTS.dataset.source,
    image_size: int = _DEFAULTS.dataset.image_size,
    validation_fraction: float = _DEFAULTS.dataset.validation_fraction,
    test_fraction: float = _DEFAULTS.dataset.test_fraction,
    num_shards: int = _DEFAULTS.dataset.num_shards,
    min_shards: int = _DEFAULTS.training.local_workers,
    max_bad_fraction: float = _DEFAULTS.dataset.max_bad_fraction,
    epochs: int = _DEFAULTS.training.epochs,
    batch_size: int = _DEFAULTS.training.batch_size,
    learning_rate: float = _DEFAULTS.training.learning_rate,
    model_name: str = _DEFAULTS.training.model,
    mixed_precision: str = _DEFAULTS.training.mixed_precision,
    xla: str = _DEFAULTS.training.xla,
    num_workers: int = _DEFAULTS.training.local_workers,
) -> PipelineOutputs:
    """The same pipeline with training as worker processes on localhost (kfp.local)."""

    def train(data, gpu, build):
        task = ops.train_on_local_workers(
            dataset=data.outputs["dataset"], num_workers=num_workers, epochs=epochs,
            batch_size=batch_size, learning_rate=learning_rate, model_name=model_name,
            mixed_precision=mixed_precision, xla=xla)
        task.set_display_name("4 train on local workers").after(build)
        task.set_caching_options(False)
        return task.outputs["model"], task.outputs["training_job"], task

    _, outputs = _stages(
        train, dataset_source=dataset_source, image_size=image_size,
        validation_fraction=validation_fraction, test_fraction=test_fraction,
        num_shards=num_shards, min_shards=min_shards, max_bad_fraction=max_bad_fraction,
        worker_pool_specs=worker_pool_specs, region=region, image_repository=image_repository,
        push_image=False, trainer_source_uri="", service_account="")
    return outputs


def _common_arguments(config: Config) -> dict:
    return {
        "region": config.vertex.region,
        "worker_pool_specs": list(config.vertex.worker_pool_specs),
        "image_repository": config.vertex.image_repository,
        "dataset_source": config.dataset.source,
        "image_size": config.dataset.image_size,
        "validation_fraction": config.dataset.validation_fraction,
        "test_fraction": config.dataset.test_fraction,
        "num_shards": config.dataset.num_shards,
        "max_bad_fraction": config.dataset.max_bad_fraction,
        "epochs": config.training.epochs,
        "batch_size": config.training.batch_size,
        "learning_rate": config.training.learning_rate,
        "model_name": config.training.model,
        "mixed_precision": config.training.mixed_precision,
        "xla": config.training.xla,
    }


def local_arguments(config: Config) -> dict:
    """Arguments of `local_pipeline` for a configuration."""
    return {**_common_arguments(config), "min_shards": config.training.local_workers,
            "num_workers": config.training.local_workers}


def vertex_arguments(config: Config, trainer_source_uri: str = "") -> dict:
    """Parameter values of `vertex_pipeline` for a configuration."""
    v = config.vertex
    return {**_common_arguments(config), "project": v.project,
            "min_shards": config.vertex_training_workers(), "job_name": v.job_name,
            "service_account": v.service_account, "network": v.network,
            "restart_job_on_worker_restart": v.restart_job_on_worker_restart,
            "scheduling_strategy": v.scheduling_strategy, "timeout": v.timeout,
            "tensorboard": v.tensorboard, "trainer_source_uri": trainer_source_uri,
            "accuracy_threshold": v.accuracy_threshold,
            "model_display_name": v.model_display_name, "parent_model": v.parent_model,
            "serving_image": v.serving_image}
