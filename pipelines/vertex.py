"""The Vertex AI path: submit a run, schedule retraining, publish the compiled spec.

Every request is built with the client libraries' own types. `--dry-run` paths print the
request without sending anything; the real paths send the same request. Clients are
created on demand and can be passed in (tests use a Cloud Storage emulator on loopback
and recording clients for the APIs no test can reach).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import yaml

from components import images
from components.dataset import mounted_gcs_uri, split_gcs_uri, storage_client
from pipelines.config import Config

PIPELINE_PACKAGE = "gpu-training-pipeline"


class VertexError(RuntimeError):
    """A Vertex AI operation that cannot go ahead; the message says why."""


@dataclasses.dataclass
class Clients:
    """The API clients the Vertex path uses; None ones are created when needed."""

    storage: Any = None
    build: Any = None
    registry: Any = None
    pipeline_api: Any = None  # replaces PipelineJob.api_client
    schedule_api: Any = None  # replaces PipelineJobSchedule.api_client / ScheduleService

    def get_storage(self):
        if self.storage is None:
            self.storage = storage_client()
        return self.storage


def require_vertex_settings(config: Config) -> None:
    """Raises VertexError unless project, pipeline root and image repository are set and
    the dataset source is one the pipeline can read on Vertex AI."""
    missing = [name for name, value in (("vertex.project", config.vertex.project),
                                        ("vertex.pipeline_root", config.vertex.pipeline_root))
               if not value]
    if config.vertex.image_repository == images.DEFAULT_IMAGE_REPOSITORY:
        missing.append("vertex.image_repository")
    problems = [f"{', '.join(missing)} must be set for Vertex AI (in the config file or with "
                "--project/--pipeline-root/--image-repository)"] if missing else []
    source = config.dataset.source
    if "://" not in source and not mounted_gcs_uri(source):
        problems.append(f"dataset.source is {source!r}, a path on this machine, which the "
                        "pipeline on Vertex AI cannot read; copy it to Cloud Storage (gcloud "
                        f"storage cp -r {source} gs://BUCKET/PATH) and give gs://BUCKET/PATH")
    if problems:
        raise VertexError("; ".join(problems))


def bucket_location_warnings(config: Config, storage: Any) -> list[str]:
    """Pre-flight: the pipeline root's bucket and the dataset's bucket should be in the
    job's region.

    Data in another region makes jobs slower (and costs egress), as the training concepts
    document warns.
    """
    places = [("vertex.pipeline_root", config.vertex.pipeline_root)]
    source = mounted_gcs_uri(config.dataset.source) or config.dataset.source
    if source.startswith("gs://"):
        places.append(("dataset.source", source))
    warnings = []
    for field, uri in places:
        bucket_name, _ = split_gcs_uri(uri)
        bucket = storage.lookup_bucket(bucket_name)
        if bucket is None:
            warnings.append(f"{field} bucket {bucket_name!r} does not exist (or is not visible "
                            "to these credentials)")
            continue
        location = (bucket.location or "").lower()
        if location != config.vertex.region:
            warnings.append(f"{field} bucket {bucket_name!r} is in {location.upper() or '?'}, "
                            f"not in the job's region {config.vertex.region}: reading and "
                            "writing data across regions makes jobs slower; use a bucket in "
                            f"{config.vertex.region}")
    return warnings


def compile_for_vertex(config: Config, output: Path, component_image: str) -> Path:
    """Compiles the Vertex spec with the components running in `component_image`."""
    from pipelines.compile import compile_pipeline

    path = compile_pipeline(output)
    spec = yaml.safe_load(path.read_text())
    default = images.pipeline_image()
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container and container.get("image") == default:
            container["image"] = component_image
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def pipeline_job(config: Config, template_path: Path, trainer_source_uri: str = "",
                 credentials: Any = None):
    """The `aiplatform.PipelineJob` of a run (built offline; nothing is sent)."""
    from google.cloud import aiplatform

    from pipelines.pipeline import vertex_arguments

    return aiplatform.PipelineJob(
        display_name=f"{config.vertex.job_name}",
        template_path=str(template_path),
        pipeline_root=config.vertex.pipeline_root,
        parameter_values=vertex_arguments(config, trainer_source_uri),
        enable_caching=config.vertex.enable_caching,
        labels={"app": "gpu-pipeline", **config.vertex.labels},
        project=config.vertex.project, location=config.vertex.region,
        credentials=credentials)


def create_request(job, config: Config):
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
    """A run ready to send: its job, the request, and the image and sources it uses."""

    job: Any
    request: Any
    image: str
    source_uri: str
    build_request: Any
    template: Path


def prepare_run(config: Config, work_dir: Path, *, dry_run: bool, clients: Clients,
                credentials: Any = None, log: Callable[[str], None] = print) -> Prepared:
    """Packs and uploads the sources, makes sure the image exists, and builds the job.

    With `dry_run`, nothing is uploaded or built: the returned requests show what would be.
    """
    from components import cloud_build
    from components.build_image import write_build_context

    require_vertex_settings(config)
    context = write_build_context(work_dir / "build-context")
    tarball = context.tarball.read_bytes()
    repository = cloud_build.Repository.parse(config.vertex.image_repository)
    bucket, name = cloud_build.context_object(config.vertex.pipeline_root, context.digest)
    source_uri = f"gs://{bucket}/{name}"
    image = images.image_uri(repository.uri, context.tag)
    build_request = cloud_build.build_request(repository, context.tag, source_uri)
    if not dry_run:
        cloud_build.upload_context(tarball, context.digest, config.vertex.pipeline_root,
                                   clients.get_storage())
        log(f"[gpu-pipeline] sources uploaded: {source_uri}")
        if clients.build is None or clients.registry is None:
            from components.build_image import _cloud_clients

            _, clients.build, clients.registry = _cloud_clients()
        image, _ = cloud_build.ensure_image(repository.uri, context.tag, source_uri,
                                            build_client=clients.build,
                                            registry_client=clients.registry, log=log)
    template = compile_for_vertex(config, work_dir / "pipeline.yaml", image)
    job = pipeline_job(config, template, source_uri, credentials)
    return Prepared(job, create_request(job, config), image, source_uri, build_request,
                    template)


@contextlib.contextmanager
def _prepared_run(config: Config, dry_run: bool, clients: Clients, credentials: Any,
                  log: Callable[[str], None]) -> Iterator[tuple[Prepared, Any]]:
    """A prepared run (in a temporary directory) and the credentials it was built with."""
    credentials = credentials or _dry_run_credentials(dry_run)
    with tempfile.TemporaryDirectory(prefix="gpu-pipeline-") as work:
        yield prepare_run(config, Path(work), dry_run=dry_run, clients=clients,
                          credentials=credentials, log=log), credentials


def _dry_run_credentials(dry_run: bool) -> Any:
    # A dry run sends nothing, so it needs no account: anonymous credentials build the job.
    if not dry_run:
        return None
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def to_json(message: Any) -> str:
    """A proto-plus request as the JSON body the API receives."""
    return type(message).to_json(message, indent=2, use_integers_for_enums=False,
                                 always_print_fields_with_no_presence=False)


def submit(config: Config, *, dry_run: bool, clients: Clients | None = None,
           credentials: Any = None, log: Callable[[str], None] = print) -> Any:
    """Submits a run (`aiplatform.PipelineJob.submit`), or prints it with `dry_run`.

    Returns:
        The CreatePipelineJobRequest (dry run) or the submitted PipelineJob.
    """
    clients = clients or Clients()
    with _prepared_run(config, dry_run, clients, credentials, log) as (prepared, _):
        if dry_run:
            log("[gpu-pipeline] dry run: nothing was uploaded, built or submitted")
            log(f"[gpu-pipeline] sources would go to {prepared.source_uri}; if "
                f"{prepared.image} is missing, Cloud Build would receive:")
            log(to_json(prepared.build_request))
            log("[gpu-pipeline] Vertex AI would receive this CreatePipelineJobRequest:")
            log(to_json(prepared.request))
            return prepared.request
        if clients.pipeline_api is not None:
            prepared.job.api_client = clients.pipeline_api
        prepared.job.submit(service_account=config.vertex.service_account or None,
                            network=config.vertex.network or None)
        log(f"[gpu-pipeline] submitted {prepared.job.resource_name}")
        return prepared.job


def schedule_request(config: Config, create: Any):
    """The CreateScheduleRequest of a recurring run around a CreatePipelineJobRequest."""
    from google.cloud import aiplatform_v1

    s = config.schedule
    schedule = aiplatform_v1.Schedule(
        display_name=s.display_name, cron=s.cron,
        max_concurrent_run_count=s.max_concurrent_run_count,
        max_run_count=s.max_run_count or None,
        create_pipeline_job_request=create)
    return aiplatform_v1.CreateScheduleRequest(parent=create.parent, schedule=schedule)


def create_schedule(config: Config, *, dry_run: bool, clients: Clients | None = None,
                    credentials: Any = None, log: Callable[[str], None] = print) -> Any:
    """Creates a PipelineJobSchedule for scheduled retraining (or prints it)."""
    from google.cloud import aiplatform

    clients = clients or Clients()
    with _prepared_run(config, dry_run, clients, credentials, log) as (prepared, credentials):
        request = schedule_request(config, prepared.request)
        if dry_run:
            log("[gpu-pipeline] dry run: Vertex AI would receive this CreateScheduleRequest:")
            log(to_json(request))
            return request
        schedule = aiplatform.PipelineJobSchedule(
            pipeline_job=prepared.job, display_name=config.schedule.display_name,
            project=config.vertex.project, location=config.vertex.region,
            credentials=credentials)
        if clients.schedule_api is not None:
            schedule.api_client = clients.schedule_api
        s = config.schedule
        schedule.create(cron=s.cron, max_concurrent_run_count=s.max_concurrent_run_count,
                        max_run_count=s.max_run_count or None,
                        service_account=config.vertex.service_account or None,
                        network=config.vertex.network or None)
        log(f"[gpu-pipeline] schedule created: {schedule.resource_name} ({s.cron})")
        return schedule


def _schedule_client(config: Config, clients: Clients | None):
    if clients is not None and clients.schedule_api is not None:
        return clients.schedule_api
    from google.cloud import aiplatform_v1

    return aiplatform_v1.ScheduleServiceClient(client_options={
        "api_endpoint": f"{config.vertex.region}-aiplatform.googleapis.com"})


def list_schedules(config: Config, clients: Clients | None = None) -> list[Any]:
    """The project's schedules in the region (display name, state, cron, next run)."""
    from google.cloud import aiplatform_v1

    client = _schedule_client(config, clients)
    request = aiplatform_v1.ListSchedulesRequest(
        parent=f"projects/{config.vertex.project}/locations/{config.vertex.region}",
        order_by="create_time desc")
    return list(client.list_schedules(request=request))


def pause_schedule(config: Config, schedule: str, clients: Clients | None = None) -> str:
    """Pauses a schedule given by resource name or ID; returns its resource name."""
    from google.cloud import aiplatform_v1

    name = schedule if schedule.startswith("projects/") else (
        f"projects/{config.vertex.project}/locations/{config.vertex.region}/schedules/{schedule}")
    _schedule_client(config, clients).pause_schedule(
        request=aiplatform_v1.PauseScheduleRequest(name=name))
    return name


def publish(spec: Path, destination: str, tags: Sequence[str], *, storage: Any = None,
            auth: Any = None) -> list[str]:
    """Publishes a compiled spec for other teams.

    Args:
        spec: The compiled pipeline YAML.
        destination: An Artifact Registry Kubeflow Pipelines repository
            (`https://REGION-kfp.pkg.dev/PROJECT/REPO`) or a `gs://` prefix.
        tags: Version tags (e.g. `v0.1.0`, `latest`).
        storage: Cloud Storage client for `gs://` destinations.
        auth: Registry credentials (default: Application Default Credentials).

    Returns:
        Where the spec now is (registry `package/version`, or gs:// objects).
    """
    if not spec.is_file():
        raise VertexError(f"{spec} does not exist; run `gpu-pipeline compile` first")
    bad = [t for t in tags if not t or t.startswith("sha256:") or "/" in t]
    if bad:
        raise VertexError(f"tags {bad!r} are invalid; tags are non-empty, contain no '/' and "
                          "do not start with 'sha256:'")
    if destination.startswith("gs://"):
        storage = storage or storage_client()
        bucket, prefix = split_gcs_uri(destination.rstrip("/") + "/")
        data = spec.read_bytes()
        written = []
        for tag in tags:
            name = f"{prefix}{PIPELINE_PACKAGE}/{tag}.yaml"
            storage.bucket(bucket).blob(name).upload_from_string(data,
                                                                 content_type="application/yaml")
            written.append(f"gs://{bucket}/{name}")
        return written
    if destination.startswith(("https://", "http://")):
        from kfp.registry import RegistryClient

        client = RegistryClient(host=destination, auth=auth)
        package, version = client.upload_pipeline(file_name=str(spec), tags=list(tags))
        return [f"{destination.rstrip('/')}/{package}/{version}"]
    raise VertexError(f"publish destination {destination!r} is neither an Artifact Registry "
                      "Kubeflow Pipelines repository (https://REGION-kfp.pkg.dev/PROJECT/REPO) "
                      "nor a gs:// prefix")
