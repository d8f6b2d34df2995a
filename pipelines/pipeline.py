"""The pipeline: seven stages, one definition, two targets; read top to bottom as it runs.

1 validate GPU config -> 2 prepare dataset and check it (leakage, drift from the
champion's data), 3 build images -> 4 (tune, locally) train
-> 5 report and export (-> register, on Vertex) -> 6 deploy (a new default, when an
endpoint is configured: a canary, promoted or rolled back) -> 7 batch predict (when
`vertex.batch_predict.source` is set and the run promoted its model). On Vertex AI with
`dataset.engine: beam`, stage 2 follows stage 3: its Dataflow workers run the image just
built.

Each stage is a small function below, called in order by the two pipelines. Only the
dataset preparation may be served from KFP's cache (keyed on its source's fingerprint);
every other task runs every time, so a scheduled retraining retrains. Only training
differs between the targets: on Vertex AI it is a CustomJob (google-cloud-pipeline-
components) whose worker pools are the validation stage's output at run time; locally a
component starts the workers as processes on localhost. Options travel as dict parameters
(`dataset`, `training`, `vertex`), declared once in their models.
"""

# No `from __future__ import annotations`: KFP reads the real annotation objects.
import functools
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Model

from components import identity
from components.ops import export as export_ops
from components.ops import setup as setup_ops
from components.ops import training as training_ops
from pipelines.config import Config
from pipelines.serving_stages import (
    deploy_locally,
    exit_task,
    register_if_better,
    summarize,
    summarize_beside_emails,
)

PIPELINE_NAME = identity.PIPELINE_NAME
LOCAL_PIPELINE_NAME = f"{PIPELINE_NAME}-local"
_DESCRIPTION = ("Validates the GPU worker pools, prepares a sharded TFRecord dataset, "
                "builds the trainer image, trains on several workers and exports the "
                "evaluated SavedModel.")
_DEFAULTS = Config()


def validate(vertex: dict, training: dict, local_cluster: dict):
    """Stage 1, run first: nothing is spent on a configuration Vertex AI would refuse."""
    gpu = setup_ops.validate_gpu_config(vertex=vertex, training=training,
                                        local_cluster=local_cluster)
    gpu.set_display_name("1 validate GPU config").set_caching_options(False)
    return gpu


def prepare(dataset: dict, input_pipelines, gpu, resources: "Resources | None" = None,
            dataflow=None):
    """Stage 2, after stage 1: the prepared dataset, reused from the cache while the source
    is unchanged.

    Shards come in multiples of `input_pipelines`, so that each reads its own files.
    With `dataflow` (the `dataflow_launch` task), the Beam engine runs as a Dataflow job.
    """
    fingerprint = setup_ops.fingerprint_dataset_source(options=dataset).after(gpu)
    fingerprint.set_display_name("2 dataset source fingerprint")
    # Only the dataset is reused from the cache (keyed on the source's fingerprint): the
    # fingerprint must look at the source every time, and a retraining must retrain.
    fingerprint.set_caching_options(False)
    data = setup_ops.prepare_dataset(options=dataset, source_fingerprint=fingerprint.output,
                                     input_pipelines=input_pipelines,
                                     **({} if dataflow is None else {"dataflow": dataflow.output}))
    data.set_display_name("2 prepare dataset").after(gpu)
    # Decoding uses every core it is given, unless Dataflow's workers decode.
    if resources is not None and dataflow is None:
        data.set_cpu_limit(resources.cpu).set_memory_limit(resources.memory)
    return data


def check(data, dataset: dict, vertex: dict, registry_root):
    """Stage 2's data checks, never cached (the champion changes): leakage and drift from
    the champion's data; nothing trains before them (`dataset.drift: fail` stops here)."""
    checks = setup_ops.check_data(dataset=data.outputs["dataset"], options=dataset,
                                  vertex=vertex, registry_root=registry_root)
    checks.set_display_name("2 data checks").set_caching_options(False)
    return checks


def launch_dataflow(project_id, vertex: dict, image):
    """Stage 2 on Vertex AI with `dataset.engine: beam`, after stage 3: the run's settings
    of the Dataflow job (its workers run the CPU image just built, by digest)."""
    launch = setup_ops.dataflow_launch(project=project_id, vertex=vertex,
                                       images=image.outputs["Output"])
    launch.set_display_name("2 Dataflow launch settings").set_caching_options(False)
    return launch


def build(vertex: dict, training: dict, *, push: bool, trainer_source_uri):
    """Stage 3: the build context (with the user's model code, as `submit` packs it); on
    Vertex the GPU and CPU images, each built only when it is missing."""
    images = setup_ops.build_images(vertex=vertex, training=training, push=push,
                                    trainer_source_uri=trainer_source_uri)
    images.set_display_name("3 build images").set_caching_options(False)
    return images


def train_on_vertex(project_id, training: dict, vertex: dict, gpu, data, image):
    """Stage 4 on Vertex AI: a CustomJob on the first validated alternative with capacity
    (the primary pools, then `vertex.fallbacks`), by the project's own launcher.

    Returns:
        The training task (its outputs: the pools, strategy and plan that trained, the
        capacity record, the training job directory) and the trained model.
    """
    job = training_ops.train_on_vertex_ai(
        project=project_id, alternatives=gpu.outputs["alternatives"],
        images=image.outputs["Output"], dataset=data.outputs["dataset"], training=training,
        vertex=vertex, pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER)
    job.set_display_name("4b train on Vertex AI").set_caching_options(False)
    trained = dsl.importer(artifact_uri=job.outputs["model_uri"], artifact_class=Model,
                           reimport=False)
    trained.set_display_name("4c trained model").set_caching_options(False)
    return job, trained.output


def train_locally(training: dict, local_cluster: dict, gpu, data, image):
    """Stage 4 locally: one process per replica on localhost; returns the task and the
    trained model."""
    task = training_ops.train_on_local_workers(dataset=data.outputs["dataset"], training=training,
                                               local_cluster=local_cluster,
                                               training_plan=gpu.outputs["training_plan"])
    task.set_display_name("4 train on local workers").after(image).set_caching_options(False)
    return task, task.outputs["model"]


def tune_locally(training: dict, tuning: dict, local_cluster: dict, gpu, data, image):
    """Stage 4 locally, first: the `tuning` study (trials as local clusters); its outputs
    are the training options to train with and the study."""
    task = training_ops.tune_on_local_workers(dataset=data.outputs["dataset"], training=training,
                                              tuning=tuning, local_cluster=local_cluster,
                                              training_plan=gpu.outputs["training_plan"])
    task.set_display_name("4 tune hyperparameters").after(image).set_caching_options(False)
    return task


def report_and_export(data, trained_model, trained, cluster, *, training: dict, vertex: dict,
                      images, registry_root, tuning=None, capacity=None, pipeline_job="",
                      resources: "Resources | None" = None):
    """Stage 4's report and stage 5: the curves, then the new model and the champion
    evaluated on the same splits, the champion/challenger decision and the export.

    `trained` is the training task (its `training_job` directory); `cluster` the task
    whose `strategy`, `worker_pool_specs` and `training_plan` say what trained (on Vertex
    AI the training task; locally stage 1); `capacity` which alternative trained and why
    not the others (Vertex AI); `pipeline_job` the run's resource name (Vertex AI: the
    export records the run in Vertex AI Experiments).
    """
    report = training_ops.report_training(training_job=trained.outputs["training_job"])
    report.set_display_name("4 training report").set_caching_options(False)
    export = export_ops.export_model(
        dataset=data.outputs["dataset"], trained_model=trained_model, training=training,
        vertex=vertex, strategy=cluster.outputs["strategy"],
        worker_pool_specs=cluster.outputs["worker_pool_specs"],
        training_plan=cluster.outputs["training_plan"], images=images,
        registry_root=registry_root, job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        tuning={} if tuning is None else tuning, capacity={} if capacity is None else capacity,
        training_job=trained.outputs["training_job"],
        pipeline_job=pipeline_job)
    export.set_display_name("5 export model").after(report).set_caching_options(False)
    if resources is not None:  # loads the model and evaluates two splits
        export.set_cpu_limit(resources.cpu).set_memory_limit(resources.memory)
    return export


class Resources(NamedTuple):
    """Compile-time settings of the Vertex AI pipeline: CPU and memory of the heavy
    lightweight components (Vertex AI Pipelines runs a component on an e2-standard-4
    unless told otherwise; docs: "Specify the machine configuration for a pipeline step"),
    who is told of every run's outcome, whether training starts with a study, and whether
    the dataset is prepared by a Dataflow job (`dataset.engine: beam`). The last two are
    part of the pipeline's shape; their values are the `tuning` and `dataset` parameters."""

    cpu: str
    memory: str
    emails: tuple[str, ...] = ()
    tuning: bool = False
    dataflow: bool = False


def tune_on_vertex(project_id, training: dict, tuning: dict, vertex: dict, gpu, data, image):
    """Stage 4 on Vertex AI, first: the study as a HyperparameterTuningJob whose trials
    run on the validated pools, then its best trial.

    Returns:
        The best-trial task (`training`: the options with the best parameters; `record`).
    """
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import (
        HyperparameterTuningJobRunOp,
    )

    spec = training_ops.vertex_tuning_spec(
        worker_pool_specs=gpu.outputs["worker_pool_specs"], images=image.outputs["Output"],
        dataset=data.outputs["dataset"], training=training, tuning=tuning, vertex=vertex,
        training_plan=gpu.outputs["training_plan"])
    spec.set_display_name("4a tuning job spec").set_caching_options(False)
    settings = spec.outputs
    # No Spot or DWS here: gcpc's op has no scheduling argument for the trials.
    job = HyperparameterTuningJobRunOp(
        project=project_id, location=settings["region"],
        display_name=settings["display_name"],
        base_output_directory=settings["base_output_directory"],
        worker_pool_specs=settings["worker_pool_specs"],
        study_spec_metrics=settings["study_spec_metrics"],
        study_spec_parameters=settings["study_spec_parameters"],
        max_trial_count=settings["max_trial_count"],
        parallel_trial_count=settings["parallel_trial_count"],
        max_failed_trial_count=settings["max_failed_trial_count"],
        study_spec_algorithm=settings["study_spec_algorithm"],
        study_spec_measurement_selection_type=settings["study_spec_measurement_selection_type"],
        service_account=settings["service_account"], network=settings["network"],
        encryption_spec_key_name=settings["encryption_key"])
    job.set_display_name("4a tune on Vertex AI").set_caching_options(False)
    best = training_ops.best_vertex_trial(gcp_resources=job.outputs["gcp_resources"],
                                          training=training, tuning=tuning, vertex=vertex)
    best.set_display_name("4a best trial").set_caching_options(False)
    return best


def _vertex_run(resources: Resources, project, dataset: dict, training: dict, vertex: dict,
                trainer_source_uri, tuning=None):
    """The Vertex AI pipeline's tasks, with or without a study."""
    with dsl.ExitHandler(exit_task(resources.emails, "", project, vertex), name="run") as run:
        gpu = validate(vertex, training, {})
        # The image is built (Cloud Build) while the dataset is prepared; both need only
        # stage 1, unless Dataflow's workers run the image.
        image = build(vertex, training, push=True, trainer_source_uri=trainer_source_uri).after(gpu)
        launch = launch_dataflow(project, vertex, image) if resources.dataflow else None
        data = prepare(dataset, gpu.outputs["input_pipelines"], gpu, resources, launch)
        checks = check(data, dataset, vertex, "")
        record = None
        if tuning is not None:
            best = tune_on_vertex(project, training, tuning, vertex, gpu, data, image)
            best.after(checks)
            training, record = best.outputs["training"], best.outputs["record"]
        trained, model = train_on_vertex(project, training, vertex, gpu, data, image)
        trained.after(checks)
        export = report_and_export(data, model, trained, trained, training=training,
                                   vertex=vertex, images=image.outputs["Output"],
                                   registry_root="", tuning=record,
                                   pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER,
                                   capacity=trained.outputs["capacity"], resources=resources)
        register_if_better(project, vertex, export, image)
    summarize_beside_emails(run, resources.emails, "", project, vertex)


@functools.cache
def make_vertex_pipeline(resources: Resources):
    """The Vertex AI pipeline, with `resources` for dataset preparation and export, with a
    study first when `resources.tuning`, and the dataset prepared on Dataflow when
    `resources.dataflow`; built once per process for each `resources` (the compiler
    copies the spec it is given, and KFP reads the caller's stack for every task's
    resource setting: 2 s a build under a test runner's deep stack)."""
    description = _DESCRIPTION + (" Prepares the dataset on Dataflow."
                                  if resources.dataflow else "")
    if resources.tuning:
        @dsl.pipeline(name=PIPELINE_NAME, description=description + " Tunes first.")
        def tuned_vertex_pipeline(
            project: str = "{{$.pipeline_google_cloud_project_id}}",
            dataset: dict = _DEFAULTS.dataset.model_dump(),
            training: dict = _DEFAULTS.training_options().model_dump(),
            tuning: dict = _DEFAULTS.tuning.model_dump(exclude_none=True),
            vertex: dict = _DEFAULTS.vertex_options().model_dump(),
            trainer_source_uri: str = "",
        ):
            """The pipeline for Vertex AI Pipelines, a HyperparameterTuningJob first."""
            _vertex_run(resources, project, dataset, training, vertex, trainer_source_uri,
                        tuning)

        return tuned_vertex_pipeline

    @dsl.pipeline(name=PIPELINE_NAME, description=description)
    def vertex_pipeline(
        project: str = "{{$.pipeline_google_cloud_project_id}}",
        dataset: dict = _DEFAULTS.dataset.model_dump(),
        training: dict = _DEFAULTS.training_options().model_dump(),
        vertex: dict = _DEFAULTS.vertex_options().model_dump(),
        trainer_source_uri: str = "",
    ):
        """The pipeline for Vertex AI Pipelines (training as a Vertex AI CustomJob)."""
        _vertex_run(resources, project, dataset, training, vertex, trainer_source_uri)

    return vertex_pipeline


def resources_of(config: Config) -> Resources:
    """The compile-time settings a configuration asks for."""
    return Resources(config.vertex.component_cpu, config.vertex.component_memory,
                     tuple(config.vertex.notification_emails), config.tuning.enabled,
                     config.dataset.engine == "beam")


vertex_pipeline = make_vertex_pipeline(resources_of(_DEFAULTS))


def _local_run(dataset: dict, training: dict, vertex: dict, local_cluster: dict,
               registry_root, tuning=None):
    """The local pipeline's tasks, with the study first when there is one."""
    with dsl.ExitHandler(summarize(registry_root, "", vertex), name="run"):
        gpu = validate(vertex, training, local_cluster)
        data = prepare(dataset, gpu.outputs["input_pipelines"], gpu)
        checks = check(data, dataset, vertex, registry_root)
        image = build(vertex, training, push=False, trainer_source_uri="").after(checks)
        before, record = image, None
        if tuning is not None:
            before = tune_locally(training, tuning, local_cluster, gpu, data, image)
            training, record = before.outputs["training"], before.outputs["record"]
        trained, model = train_locally(training, local_cluster, gpu, data, before)
        export = report_and_export(data, model, trained, gpu, training=training, vertex=vertex,
                                   images=image.outputs["Output"], registry_root=registry_root,
                                   tuning=record)
        deploy_locally(vertex, registry_root, export, data)


@dsl.pipeline(name=LOCAL_PIPELINE_NAME, description=_DESCRIPTION + " (local workers)")
def local_pipeline(
    dataset: dict = _DEFAULTS.dataset.model_dump(),
    training: dict = _DEFAULTS.training_options().model_dump(),
    vertex: dict = _DEFAULTS.vertex_options().model_dump(),
    local_cluster: dict = _DEFAULTS.local_layout().to_dict(),
    registry_root: str = "",
):
    """The same pipeline with training as worker processes on localhost (kfp.local).

    The Vertex worker pools are validated all the same, so a bad cloud configuration is
    caught on a laptop; the dataset is sharded for the local layout (`local_cluster`:
    workers, parameter servers and evaluators besides the chief).
    """
    _local_run(dataset, training, vertex, local_cluster, registry_root)


@dsl.pipeline(name=LOCAL_PIPELINE_NAME,
              description=_DESCRIPTION + " (local workers; tunes first)")
def tuned_local_pipeline(
    dataset: dict = _DEFAULTS.dataset.model_dump(),
    training: dict = _DEFAULTS.training_options().model_dump(),
    vertex: dict = _DEFAULTS.vertex_options().model_dump(),
    local_cluster: dict = _DEFAULTS.local_layout().to_dict(),
    registry_root: str = "",
    tuning: dict = _DEFAULTS.tuning.model_dump(exclude_none=True),
):
    """`local_pipeline` with the `tuning` study first (Open Source Vizier, trials as local
    clusters); the final training uses the best trial's options."""
    _local_run(dataset, training, vertex, local_cluster, registry_root, tuning)


def local_pipeline_for(config: Config):
    """The local pipeline a configuration runs: with its study, if it has one."""
    return tuned_local_pipeline if config.tuning.enabled else local_pipeline
