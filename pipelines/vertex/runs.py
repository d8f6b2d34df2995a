"""A run on Vertex AI: sources uploaded, image found or built, the PipelineJob submitted."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from components import identity, images
from components.build import cloud_build
from components.build.context import USER_CODE_DIR, user_code_files, write_build_context
from components.identity import LOG_PREFIX
from components.ops import names
from components.stage_messages import say
from components.tuning.tuning_options import MEASUREMENT_SELECTION
from pipelines.config import Config
from pipelines.vertex.capacity import check_capacity
from pipelines.vertex.clients import Clients
from pipelines.vertex.cost_estimate import NewestSpeed, estimate_lines, hold_budget
from pipelines.vertex.dry_run import NOTHING_SENT, document, show, show_text
from pipelines.vertex.iam import check_permissions
from pipelines.vertex.preflight import (
    check_build_pool,
    check_persistent_resource,
    require_vertex_settings,
)
from pipelines.vertex.spec import compile_for_vertex
from trainer.common.cloud_calls import remote_call
from trainer.models.user_model import USER_CODE_IN_IMAGE


def pipeline_job(config: Config, template_path: Path, trainer_source_uri: str = "",
                 credentials: Any = None) -> Any:
    """The `aiplatform.PipelineJob` of a run (built offline; nothing is sent)."""
    from google.cloud import aiplatform

    from pipelines.pipeline_arguments import vertex_arguments

    job = aiplatform.PipelineJob(
        display_name=config.vertex.job_name,
        template_path=str(template_path),
        pipeline_root=config.vertex.pipeline_root,
        parameter_values=vertex_arguments(config, trainer_source_uri),
        # True would override every task's own setting and serve training from the cache;
        # None keeps the compiled spec's per-task settings, where only the dataset
        # preparation is cacheable (aiplatform PipelineJob._set_enable_caching_value).
        enable_caching=None if config.vertex.enable_caching else False,
        labels={"app": identity.NAME, **config.vertex.labels},
        # The PipelineJob's key does not reach what its steps create: each passes it on.
        encryption_spec_key_name=config.vertex.encryption_key or None,
        project=config.vertex.project, location=config.vertex.region,
        credentials=credentials)
    if config.vertex.psc_network_attachment:
        # PipelineJob.submit takes `network` but not a PSC interface; it sends the resource
        # it holds, so the field is set there (aiplatform pipeline_jobs.py, submit).
        job._gca_resource.psc_interface_config.network_attachment = \
            config.vertex.psc_network_attachment
    return job


def create_request(job: Any, config: Config) -> Any:
    """The CreatePipelineJobRequest that `job.submit()` sends, as the library's type."""
    from google.cloud import aiplatform_v1

    resource = aiplatform_v1.PipelineJob.from_json(json.dumps(job.to_dict()),
                                                   ignore_unknown_fields=True)
    if config.vertex.service_account:
        resource.service_account = config.vertex.service_account
    if config.vertex.network:
        resource.network = config.vertex.network
    return aiplatform_v1.CreatePipelineJobRequest(
        parent=f"projects/{config.vertex.project}/locations/{config.vertex.region}",
        pipeline_job=resource, pipeline_job_id=job.job_id)


@dataclasses.dataclass
class Prepared:
    """A run ready to send: its job, the request, and the images and sources it uses.

    `images` is what the build stage outputs: per image key (`gpu`, `cpu`) its `reference`
    by digest alone (a placeholder digest in a dry run, which builds and looks up
    nothing), its content `tag` and whether it was `built`. `dataflow` is the Dataflow job
    the dataset stage starts (`dataflow_preview`), if any.
    """

    job: Any
    request: Any
    images: dict[str, dict[str, Any]]
    source_uri: str
    build_request: Any
    template: Path
    user_code_files: tuple[str, ...] = ()
    dataflow: Any = None


@dataclasses.dataclass(frozen=True)
class Images:
    """The images a run uses (`found`, as the build stage outputs them), the sources'
    URI, the Cloud Build request that builds them and the build context."""

    found: dict[str, dict[str, Any]]
    source_uri: str
    build_request: Any
    context: Any


def ensure_images(config: Config, work_dir: Path, *, dry_run: bool, clients: Clients,
                  log: Callable[[str], None] = say) -> Images:
    """Packs and uploads the sources and makes sure the images exist (built by Cloud Build
    unless their content tag does), named by digest. With `dry_run`, nothing is uploaded
    or built: the references carry a placeholder digest."""
    require_vertex_settings(config)
    context = write_build_context(work_dir / "build-context",
                                  user_code=config.training.user_code or None)
    if config.vertex.images.given:  # built elsewhere: nothing to upload or build
        log("images: vertex.images, built elsewhere: nothing is uploaded or built")
        return Images(config.vertex.images.found(), "", None, context)
    repository = cloud_build.Repository.parse(config.vertex.image_repository)
    bucket, name = cloud_build.context_object(config.vertex.pipeline_root, context.digest)
    source_uri = f"gs://{bucket}/{name}"
    settings = config.vertex.build_settings()
    build_request = cloud_build.build_request(repository, context.tag, source_uri,
                                              settings=settings)
    found = {image.key: {"reference": images.reference(repository.uri, image,
                                                        images.UNBUILT_DIGEST),
                         "tag": context.tag, "built": False}
             for image in images.PROJECT_IMAGES}
    if not dry_run:
        with remote_call("uploading the sources"):
            cloud_build.upload_context(context.tarball.read_bytes(), context.digest,
                                       config.vertex.pipeline_root, clients.get_storage())
        log(f"sources uploaded: {source_uri}")
        with remote_call("building or finding the images"):
            builder, registry = clients.get_builders()
            found = cloud_build.ensure_images(repository.uri, context.tag, source_uri,
                                              build_client=builder, registry_client=registry,
                                              settings=settings, log=log)
    return Images(found, source_uri, build_request, context)


def prepare_run(config: Config, work_dir: Path, *, dry_run: bool, clients: Clients,
                credentials: Any = None, log: Callable[[str], None] = say) -> Prepared:
    """Packs and uploads the sources, makes sure the image exists, and builds the job.

    With `dry_run`, nothing is uploaded or built: the returned requests show what would be.
    """
    built = ensure_images(config, work_dir, dry_run=dry_run, clients=clients, log=log)
    found, source_uri = built.found, built.source_uri
    template = compile_for_vertex(config, work_dir / "pipeline.yaml",
                                  found[images.CPU.key]["reference"], source_uri)
    job = pipeline_job(config, template, source_uri, credentials)
    request = create_request(job, config)
    return Prepared(job, request, found, source_uri, built.build_request, template,
                    tuple(user_code_files(built.context)),
                    dataflow_preview(config, found, request.pipeline_job_id))


@contextlib.contextmanager
def prepared_run(config: Config, dry_run: bool, clients: Clients, credentials: Any,
                 log: Callable[[str], None]) -> Iterator[tuple[Prepared, Any]]:
    """A prepared run (in a temporary directory) and the credentials it was built with."""
    credentials = credentials or _dry_run_credentials(dry_run)
    check_build_pool(config, clients, dry_run=dry_run, log=log)  # before anything is uploaded
    check_persistent_resource(config, clients, dry_run=dry_run, log=log)
    with tempfile.TemporaryDirectory(prefix=f"{identity.NAME}-") as work:
        yield prepare_run(config, Path(work), dry_run=dry_run, clients=clients,
                          credentials=credentials, log=log), credentials


def _dry_run_credentials(dry_run: bool) -> Any:
    # A dry run sends nothing, so it needs no account: anonymous credentials build the job.
    if not dry_run:
        return None
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def summary(prepared: Prepared, config: Config) -> list[str]:
    """What a reader checks in the requests below: caching, images, serving, build account."""
    from trainer.cluster.measurements import load as load_measurements
    from trainer.serving.container import SERVER_MODULE

    spec = prepared.request.pipeline_job.pipeline_spec
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    cached = sorted(name for dag in dags for name, task in dag["tasks"].items()
                    if task.get("cachingOptions", {}).get("enableCache"))
    gpu, cpu = (prepared.images[i.key] for i in (images.GPU, images.CPU))
    placeholder = " (digest placeholder: a dry run builds nothing)" \
        if gpu["reference"].endswith(images.UNBUILT_DIGEST) else ""
    named = (f"images, named by digest alone{placeholder}, content tag {gpu['tag']}:"
             if prepared.build_request is not None else
             "images, given by vertex.images (built elsewhere; no sources uploaded, no build):")
    user_code, plan = config.training.user_code, config.vertex_plan()
    return [
        *([f"your model {config.training.model}: {len(prepared.user_code_files)} file(s) of "
           f"{user_code} in the build context as {USER_CODE_DIR}/ "
           f"({', '.join(prepared.user_code_files[:5])}"
           f"{', ...' if len(prepared.user_code_files) > 5 else ''}), read by the trainer "
           f"from {USER_CODE_IN_IMAGE}"] if user_code else []),
        *([f"tuning: a HyperparameterTuningJob of {config.tuning.max_trials} trial(s), "
           f"{config.tuning.parallel_trials} at a time, on the training pools, searching "
           f"{', '.join(p.name for p in config.tuning.parameters)} by "
           f"{config.tuning.metric}, each trial measured by its {config.tuning.measurement} "
           "report (study_spec_measurement_selection_type "
           f"{MEASUREMENT_SELECTION[config.tuning.measurement]}); the CustomJob then trains "
           "with the best trial's values"]
          if config.tuning.enabled else []),
        "training plan (every replica applies it, as --training-plan): "
        + plan.summary(),
        *(f"  {line}" for line in plan.describe()),
        *load_measurements(config.measurements_location()).lines(),
        *capacity_summary(config),
        "cache: " + (f"only {', '.join(cached)} may be reused (keyed on the source's "
                     "fingerprint); every other task runs every time" if cached
                     else "off for every task"),
        named,
        f"  GPU worker pools run {gpu['reference']}",
        f"  components and CPU-only pools run {cpu['reference']}",
        f"the registered model is served by {config.vertex.serving_image or cpu['reference']} "
        f"(python -m {SERVER_MODULE}, predictor trainer.serving.app)",
        *build_summary(prepared.build_request, config),
        *dataflow_summary(prepared.dataflow),
    ]


def build_summary(request: Any, config: Config) -> list[str]:
    """The dry run's lines on the Cloud Build that makes the images (none when
    `vertex.images` gives them)."""
    if request is None:
        return []
    build = request.build
    return [
        f"Cloud Build: {request_location(request)}, "
        + (f"in the private pool {build.options.pool.name} (its machines)" if
           build.options.pool.name else build.options.machine_type.name)
        + f", timeout {build.timeout.seconds} s, as "
        + (build.service_account or "its default account")
        + (", logs: Cloud Logging only" if build.options.logging.name == "CLOUD_LOGGING_ONLY"
           else ""),
        *(f"  step {step.id}: docker {' '.join(step.args[:3])} (only this image's stages, "
          "whichever builder runs)" for step in build.steps),
        "  the GPU image's Reduction Server plugin: "
        + images.reduction_server_plugin_source(),
        *(f"  {line}" for line in config.vertex.build_settings().sources.lines()),
    ]


def capacity_summary(config: Config) -> list[str]:
    """The dry run's lines on the fallbacks: each with its plan, and how the global batch
    and learning rate follow whichever trains."""
    from components.gpu.alternatives import batch_lines

    alternatives = config.alternatives()
    if len(alternatives) < 2:
        return [f"capacity: no vertex.fallbacks; a stock-out or a quota refusal is tried "
                f"again {config.vertex.capacity_rounds - 1} time(s), "
                f"{config.vertex.capacity_backoff} apart (doubling)"]
    return [f"capacity: after a stock-out or a quota refusal, the training step tries "
            f"{', '.join(a.label for a in alternatives[1:])} in order, up to "
            f"{config.vertex.capacity_rounds} round(s) {config.vertex.capacity_backoff} apart "
            "(doubling):",
            *(f"  {a.label}: {a.describe()}; {a.plan.summary()}" for a in alternatives[1:]),
            *(f"  {line}" for line in batch_lines(alternatives, config.training))]


def dataflow_preview(config: Config, found: dict[str, dict[str, Any]], job_id: str) -> Any:
    """The Dataflow job the dataset stage of run `job_id` starts with `dataset.engine:
    beam` (`components.dataset.dataflow.DataflowJob`), else None. Its output directory
    (and so its name, temp and staging) is known only once Vertex AI runs the task: it
    shows as Vertex AI lays it out, with placeholders."""
    if config.dataset.engine != "beam":
        return None
    from components.dataset.dataflow import dataflow_job, launch_settings

    launch = launch_settings(config.vertex.project, config.vertex.region,
                             config.vertex.service_account, found, config.vertex.encryption_key)
    output = (f"{config.vertex.pipeline_root.rstrip('/')}/PROJECT_NUMBER/{job_id}/"
              f"{names.PREPARE_DATASET}_TASK_ID/{names.DATASET}")
    job = dataflow_job(config.dataset, output_uri=output, **launch)
    return dataclasses.replace(job, job_name=f"{identity.NAME}-dataset-HASH_OF_THE_OUTPUT_URI")


def dataflow_summary(job: Any) -> list[str]:
    """The dry run's lines on the Dataflow job (`dataflow_preview`), or none."""
    if job is None:
        return []
    return [f"dataset: a Dataflow job in {job.region}, up to {job.max_workers} "
            f"{job.machine_type} workers{' (FlexRS)' if job.flexrs else ''}, running "
            f"{job.sdk_image} as {job.service_account or 'the Compute Engine default account'}"
            f"; temp files in {job.temp_location}"]


def request_location(request: Any) -> str:
    """The location of a Cloud Build request (`projects/P/locations/L`)."""
    return request.parent.rsplit("/", 1)[-1]


def submit(config: Config, *, dry_run: bool, clients: Clients | None = None,
           credentials: Any = None, log: Callable[[str], None] = say,
           verbose: bool = False, as_json: bool = False) -> Any:
    """Submits a run (`aiplatform.PipelineJob.submit`), or shows it with `dry_run`: a line
    per request it would send, their bodies too with `verbose`; with `as_json`, every
    request in one JSON document on stdout and the lines on stderr.

    Returns:
        The CreatePipelineJobRequest (dry run) or the submitted PipelineJob.
    """
    clients = clients or Clients()
    sent: list[Any] | None = [] if dry_run and as_json else None
    if sent is not None:
        log = functools.partial(print, LOG_PREFIX, file=sys.stderr, flush=True)
        verbose = False
    require_vertex_settings(config)
    speed = NewestSpeed(config, clients, log)
    config = hold_budget(config, speed, log)  # before anything is created
    planned = check_permissions(config, clients, dry_run=dry_run, log=log)
    check_capacity(config, clients, dry_run=dry_run, log=log, verbose=verbose, sent=sent)
    with prepared_run(config, dry_run, clients, credentials, log) as (prepared, _):
        if dry_run:
            if prepared.build_request is not None:
                log(f"sources would go to {prepared.source_uri}; for the images whose tag "
                    f"{prepared.images[images.GPU.key]['tag']} is missing, Cloud Build would "
                    "receive:")
                show(prepared.build_request, log, verbose=verbose, sent=sent)
            log("Vertex AI would receive this CreatePipelineJobRequest:")
            show(prepared.request, log, verbose=verbose, sent=sent)
            if prepared.dataflow is not None:
                log("its dataset stage would start a Dataflow job with these Beam pipeline "
                    "options:")
                show_text("the Beam pipeline options",
                          json.dumps(prepared.dataflow.pipeline_args(), indent=2), log,
                          verbose=verbose)
            cost = estimate_lines(config, speed)
            for line in summary(prepared, config) + cost:
                log(line)
            log(NOTHING_SENT + ("" if verbose or sent is not None
                                else " (--verbose prints the request bodies)"))
            if sent is not None:
                print(document(
                    sent, dataflow_pipeline_options=prepared.dataflow.pipeline_args()
                    if prepared.dataflow is not None else None,
                    iam_checks=[{"resource": c.resource, "permissions": list(c.permissions)}
                                for c in planned],
                    training_plan=config.vertex_plan().to_dict(), cost_estimate=cost))
            return prepared.request
        if clients.pipeline_api is not None:
            prepared.job.api_client = clients.pipeline_api
        with remote_call("submitting the run"):
            prepared.job.submit(service_account=config.vertex.service_account or None,
                                network=config.vertex.network or None)
        log(f"submitted {prepared.job.resource_name}")
        return prepared.job
