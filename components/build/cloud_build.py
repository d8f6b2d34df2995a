"""Build and push the project's images with Cloud Build, tagged by their content digest.

The build context is the deterministic tarball of `components.build.context` (same
sources -> same bytes -> same digest -> same tag), uploaded to Cloud Storage. Before
building, Artifact Registry is asked whether each image's tag exists: an unchanged image
is never rebuilt, and one build makes the missing ones. Requests are built as the client
libraries' own types, and the clients are passed in, so every request can be checked
offline. What comes back names each image by digest alone (`images.reference`), the form
Vertex AI accepts.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from components import identity, images
from components.build.sources import BuildSources
from components.stage_messages import say
from trainer.common.errors import InputError, StageError
from trainer.common.gcs import split_gcs_uri

#: The builder image Cloud Build runs `docker build` with.
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
#: How long a build may wait in Cloud Build's queue before it starts (its documented
#: default, set explicitly so that the wait below has a known bound).
QUEUE_TTL_SECONDS = 3600
#: Waited beyond a build's queue time and timeout before the client gives up on it.
WAIT_MARGIN_SECONDS = 300
#: Artifact Registry's multi-region locations (`us-docker.pkg.dev`): not Cloud Build
#: locations, which are regions and `global` (Cloud Build docs: "Cloud Build locations").
MULTI_REGIONS = ("us", "europe", "asia")

_REPOSITORY = re.compile(r"^(?P<location>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[a-z0-9-]+)/"
                         r"(?P<repository>[a-z0-9-_.]+)$")


class CloudBuildError(StageError):
    """The image could not be built or pushed."""


class ImageRepositoryError(InputError):
    """An image repository that is not an Artifact Registry Docker repository."""


@dataclasses.dataclass(frozen=True)
class Repository:
    """An Artifact Registry Docker repository, `LOCATION-docker.pkg.dev/PROJECT/REPO`."""

    location: str
    project: str
    repository: str

    @classmethod
    def parse(cls, uri: str) -> Repository:
        """Parses a repository URI.

        Raises:
            ImageRepositoryError: Not an Artifact Registry Docker repository.
        """
        match = _REPOSITORY.match(uri.rstrip("/"))
        if not match:
            raise ImageRepositoryError(
                f"image repository {uri!r} is not an Artifact Registry Docker repository; "
                "expected LOCATION-docker.pkg.dev/PROJECT/REPOSITORY")
        return cls(**match.groupdict())

    @property
    def uri(self) -> str:
        return f"{self.location}-docker.pkg.dev/{self.project}/{self.repository}"

    @property
    def name(self) -> str:
        """Its Artifact Registry resource name (where its IAM grants are made)."""
        return f"projects/{self.project}/locations/{self.location}/repositories/{self.repository}"

    def tag_name(self, package: str, tag: str) -> str:
        """The Artifact Registry resource name of an image tag."""
        return f"{self.name}/packages/{package}/tags/{tag}"


def context_object(bucket_uri: str, digest: str) -> tuple[str, str]:
    """(bucket, object) where a build context with `digest` is stored under `bucket_uri`."""
    bucket, prefix = split_gcs_uri(bucket_uri.rstrip("/") + "/")
    return bucket, f"{prefix}build-contexts/context-{digest.split(':', 1)[1]}.tar.gz"


def upload_context(tarball: bytes, digest: str, bucket_uri: str, storage_client: Any) -> str:
    """Uploads a build context tarball unless the same one is already there.

    Returns:
        The `gs://` URI of the tarball.
    """
    bucket_name, name = context_object(bucket_uri, digest)
    blob = storage_client.bucket(bucket_name).blob(name)
    if not blob.exists():
        blob.upload_from_string(tarball, content_type="application/gzip")
    return f"gs://{bucket_name}/{name}"


def service_account_resource(email: str, default_project: str) -> str:
    """`projects/PROJECT/serviceAccounts/EMAIL` for a service account email.

    The project is the account's own (`NAME@PROJECT.iam.gserviceaccount.com`), else
    `default_project`; a resource name is returned unchanged.
    """
    if email.startswith("projects/"):
        return email
    domain = email.rpartition("@")[2]
    owner = domain.split(".", 1)[0] if domain.endswith(".iam.gserviceaccount.com") \
        else default_project
    return f"projects/{owner}/serviceAccounts/{email}"


def build_location(repository: Repository) -> str:
    """The Cloud Build location of a repository's builds: its region, or `global` for a
    multi-region repository (`us`, `europe`, `asia` are not Cloud Build locations)."""
    return "global" if repository.location in MULTI_REGIONS else repository.location


@dataclasses.dataclass(frozen=True)
class BuildSettings:
    """How a build runs.

    Attributes:
        machine_type: A `cloudbuild_v1.BuildOptions.MachineType` name; the default build
            machine has 2 vCPUs, too few to install the GPU image's packages quickly.
        timeout_seconds: The build's own timeout.
        service_account: Service account the build runs as (default: Cloud Build's).
        worker_pool: A Cloud Build private pool to build in (its machines are the pool's).
        sources: The mirrors the build reads instead of the public sources.
    """

    machine_type: str = "E2_HIGHCPU_8"
    timeout_seconds: int = 3600
    service_account: str = ""
    worker_pool: str = ""
    sources: BuildSources = BuildSources()

    def location(self, repository: Repository) -> str:
        """Where the build runs: a private pool's region (a build sent elsewhere is refused,
        "workerpool not found": googleapis/nodejs-cloudbuild#300), else the repository's
        (`build_location`). The build stays in the repository's project; the pool may be
        another project's (skaffold#9730)."""
        from components.cloud_names import worker_pool_region

        return worker_pool_region(self.worker_pool) or build_location(repository)

    @property
    def wait_seconds(self) -> int:
        """How long a client waits for the build: queued, running, then a margin."""
        return QUEUE_TTL_SECONDS + self.timeout_seconds + WAIT_MARGIN_SECONDS


def build_request(repository: Repository, tag: str, source_uri: str,
                  wanted: Sequence[images.ProjectImage] = images.PROJECT_IMAGES,
                  settings: BuildSettings = BuildSettings()) -> Any:
    """The Cloud Build request that builds `wanted` images from `source_uri` and pushes
    them, tagged `tag`; one step per image, run side by side, each with its own Dockerfile
    (`--file`), so that each runs only its own image's stages whichever builder
    `gcr.io/cloud-builders/docker` uses (its legacy builder builds every stage of a file
    before `--target`; `DOCKER_BUILDKIT=1` needs the buildx plugin).

    Returns:
        A `cloudbuild_v1.CreateBuildRequest`.
    """
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import duration_pb2

    bucket, name = split_gcs_uri(source_uri)
    pushed = [images.tagged(repository.uri, image, tag) for image in wanted]
    steps = [cloudbuild_v1.BuildStep(
        name=DOCKER_BUILDER, id=f"build-{image.key}", wait_for=["-"],
        args=["build", "--file", image.dockerfile,
              *(["--network=cloudbuild"] if settings.sources.needs_build_network else []),
              *(f for k, v in settings.sources.build_args(image)
                for f in ("--build-arg", f"{k}={v}")),
              "--tag", uri, "."])
        for image, uri in zip(wanted, pushed, strict=True)]
    options = cloudbuild_v1.BuildOptions()
    if settings.worker_pool:
        # The pool's own machines build (its workerConfig): no machineType beside a pool
        # (googleapis/mcp-toolbox#1900); inside a perimeter the default logs bucket cannot
        # be written (Cloud Build docs: "Using VPC Service Controls"): Cloud Logging only.
        options.pool = cloudbuild_v1.BuildOptions.PoolOption(name=settings.worker_pool)
        options.logging = cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
    else:
        options.machine_type = cloudbuild_v1.BuildOptions.MachineType[settings.machine_type]
    build = cloudbuild_v1.Build(
        source=cloudbuild_v1.Source(storage_source=cloudbuild_v1.StorageSource(
            bucket=bucket, object_=name)),
        steps=steps, images=pushed,
        timeout=duration_pb2.Duration(seconds=settings.timeout_seconds),
        queue_ttl=duration_pb2.Duration(seconds=QUEUE_TTL_SECONDS),
        options=options,
        tags=[identity.NAME, tag, *(image.key for image in wanted)],
    )
    if settings.service_account:
        # Build.service_account is a resource name, and a build run as a user-specified
        # account must log to Cloud Logging or a user bucket, not the default logs bucket
        # (Cloud Build docs: "Configure user-specified service accounts").
        build.service_account = service_account_resource(settings.service_account,
                                                         repository.project)
        build.options.logging = cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
    return cloudbuild_v1.CreateBuildRequest(
        parent=f"projects/{repository.project}/locations/{settings.location(repository)}",
        project_id=repository.project, build=build)


def existing_digest(repository: Repository, image: images.ProjectImage, tag: str,
                    registry_client: Any) -> str | None:
    """The digest behind `image`'s `tag`, or None when the tag does not exist."""
    from google.api_core import exceptions
    from google.cloud import artifactregistry_v1

    request = artifactregistry_v1.GetTagRequest(name=repository.tag_name(image.name, tag))
    try:
        found = registry_client.get_tag(request=request)
    except exceptions.NotFound:
        return None
    return found.version.rsplit("/", 1)[-1] or None  # .../versions/sha256:...


def wait_for_build(operation: Any, settings: BuildSettings, *, log: Callable[[str], None] = say,
                   poll_seconds: float = 15, report_every: float = 60,
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> Any:
    """Waits for a Cloud Build operation as long as the build itself may take.

    `operation.result()` alone would give up after google-api-core's default 900 s while
    the build may queue and run for longer; here the wait is bounded by the build's queue
    time, its own timeout and a margin, and its state and log URL are printed meanwhile.

    Returns:
        The finished `cloudbuild_v1.Build`.

    Raises:
        CloudBuildError: The build did not finish within that time (it may still run).
    """
    started = clock()
    deadline = started + settings.wait_seconds
    reported = None
    pause = min(1.0, poll_seconds)  # short builds finish soon; long ones are polled less
    while not operation.done():
        build = getattr(operation.metadata, "build", None)
        now = clock()
        where = f"; logs: {build.log_url}" if build is not None and build.log_url else ""
        if now >= deadline:
            raise CloudBuildError(
                f"Cloud Build {getattr(build, 'id', '')} has not finished after "
                f"{settings.wait_seconds // 60} min (queue {QUEUE_TTL_SECONDS // 60} min + "
                f"timeout {settings.timeout_seconds // 60} min + margin); it may still be "
                f"running{where}")
        if reported is None or now - reported >= report_every:
            state = build.status.name if build is not None else "QUEUED"
            log(f"Cloud Build {getattr(build, 'id', '') or ''}: {state} after "
                f"{now - started:.0f} s (waiting up to {settings.wait_seconds // 60} min){where}")
            reported = now
        sleep(min(pause, max(0.0, deadline - now)))
        pause = min(pause * 2, poll_seconds)
    return operation.result(timeout=max(1.0, deadline - clock()))


def ensure_images(repository_uri: str, tag: str, source_uri: str, *, build_client: Any,
                  registry_client: Any, settings: BuildSettings = BuildSettings(),
                  log: Callable[[str], None] = say, builds: list[dict[str, str]] | None = None,
                  **wait: Any) -> dict[str, dict[str, Any]]:
    """The project's images for `tag`, building (in one build) only those that are missing.

    Args:
        repository_uri: `LOCATION-docker.pkg.dev/PROJECT/REPO`.
        tag: The content tag of the build context.
        source_uri: `gs://` URI of the build context tarball.
        build_client: A `cloudbuild_v1.CloudBuildClient`.
        registry_client: An `artifactregistry_v1.ArtifactRegistryClient`.
        settings: Machine, timeout and service account of a build.
        log: Where progress lines go.
        builds: Where the build made, if any, is recorded (its ID, machine or pool, start
            and finish times: what the run's cost counts, `pipeline_job_cost.build_items`).
        **wait: Passed to `wait_for_build` (polling, for tests).

    Returns:
        Per image key (`gpu`, `cpu`): `reference` (by digest alone), `tag`, `built`.

    Raises:
        CloudBuildError: The build failed or pushed without a digest.
    """
    repository = Repository.parse(repository_uri)
    found: dict[str, dict[str, Any]] = {}
    missing = []
    for image in images.PROJECT_IMAGES:
        digest = existing_digest(repository, image, tag, registry_client)
        if digest:
            log(f"image {images.tagged(repository.uri, image, tag)} exists ({digest}): "
                "not rebuilt")
            found[image.key] = {"reference": images.reference(repository.uri, image, digest),
                                "tag": tag, "built": False}
        else:
            missing.append(image)
    if not missing:
        return found
    request = build_request(repository, tag, source_uri, missing, settings)
    log(f"building {', '.join(images.tagged(repository.uri, i, tag) for i in missing)} with "
        f"Cloud Build in {request.parent} ({settings.worker_pool or settings.machine_type}) from "
        f"{source_uri}")
    build = wait_for_build(build_client.create_build(request=request), settings, log=log, **wait)
    pushed = {i.name: i.digest for i in build.results.images}
    record = {"id": build.id, "machine": settings.worker_pool or settings.machine_type,
              "start_time": build.start_time.rfc3339() if build.start_time else "",
              "finish_time": build.finish_time.rfc3339() if build.finish_time else ""}
    for image in missing:
        digest = pushed.get(images.tagged(repository.uri, image, tag))
        if not digest:
            raise CloudBuildError(f"Cloud Build {build.id} finished ({build.status.name}) "
                                  f"without pushing {images.tagged(repository.uri, image, tag)}"
                                  f"; see {build.log_url}")
        reference = images.reference(repository.uri, image, digest)
        log(f"pushed {images.tagged(repository.uri, image, tag)}: {reference}")
        found[image.key] = {"reference": reference, "tag": tag, "built": True}
    if builds is not None:
        builds.append(record)
    return found
