"""Build and push the project image with Cloud Build, tagged by its content digest.

The build context is the deterministic tarball of `components.build_image` (same
sources -> same bytes -> same digest -> same tag), uploaded to Cloud Storage. Before
building, Artifact Registry is asked whether the tag exists: an unchanged trainer is not
rebuilt. Requests are built as the client libraries' own types, and the clients are
passed in, so every request can be checked offline.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from components import images, project
from components.stage import say
from trainer.errors import InputError, StageError
from trainer.gcs import split_gcs_uri

#: The builder image Cloud Build runs `docker build` with.
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
BUILD_TIMEOUT_SECONDS = 3600

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
    def parse(cls, uri: str) -> "Repository":
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

    def tag_name(self, package: str, tag: str) -> str:
        """The Artifact Registry resource name of an image tag."""
        return (f"projects/{self.project}/locations/{self.location}/repositories/"
                f"{self.repository}/packages/{package}/tags/{tag}")


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


def build_request(repository: Repository, tag: str, source_uri: str, *,
                  service_account: str = "") -> Any:
    """The Cloud Build request that builds the image from `source_uri` and pushes it.

    Returns:
        A `cloudbuild_v1.CreateBuildRequest`.
    """
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import duration_pb2

    image = images.image_uri(repository.uri, tag)
    bucket, name = split_gcs_uri(source_uri)
    build = cloudbuild_v1.Build(
        source=cloudbuild_v1.Source(storage_source=cloudbuild_v1.StorageSource(
            bucket=bucket, object_=name)),
        steps=[cloudbuild_v1.BuildStep(name=DOCKER_BUILDER,
                                       args=["build", "--tag", image, "."])],
        images=[image],
        timeout=duration_pb2.Duration(seconds=BUILD_TIMEOUT_SECONDS),
        tags=[project.NAME, tag],
    )
    if service_account:
        # Build.service_account is a resource name, and a build run as a user-specified
        # account must log to Cloud Logging or a user bucket, not the default logs bucket
        # (Cloud Build docs: "Configure user-specified service accounts").
        build.service_account = service_account_resource(service_account, repository.project)
        build.options = cloudbuild_v1.BuildOptions(
            logging=cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY)
    return cloudbuild_v1.CreateBuildRequest(
        parent=f"projects/{repository.project}/locations/{repository.location}",
        project_id=repository.project, build=build)


def existing_digest(repository: Repository, tag: str, registry_client: Any) -> str | None:
    """The image digest behind `tag`, or None when the tag does not exist."""
    from google.api_core import exceptions
    from google.cloud import artifactregistry_v1

    request = artifactregistry_v1.GetTagRequest(name=repository.tag_name(images.IMAGE_NAME, tag))
    try:
        found = registry_client.get_tag(request=request)
    except exceptions.NotFound:
        return None
    return found.version.rsplit("/", 1)[-1] or None  # .../versions/sha256:...


def ensure_image(repository_uri: str, tag: str, source_uri: str, *, build_client: Any,
                 registry_client: Any, service_account: str = "",
                 log=say) -> tuple[str, bool]:
    """Returns the image `REPO/gpu-pipeline:TAG@sha256:...`, building it only if missing.

    Args:
        repository_uri: `LOCATION-docker.pkg.dev/PROJECT/REPO`.
        tag: The content tag of the build context.
        source_uri: `gs://` URI of the build context tarball.
        build_client: A `cloudbuild_v1.CloudBuildClient`.
        registry_client: An `artifactregistry_v1.ArtifactRegistryClient`.
        service_account: Service account Cloud Build runs as (default: Cloud Build's).
        log: Where progress lines go.

    Returns:
        (image URI with digest, whether a build ran).

    Raises:
        CloudBuildError: The repository is malformed or the build failed.
    """
    repository = Repository.parse(repository_uri)
    image = images.image_uri(repository.uri, tag)
    digest = existing_digest(repository, tag, registry_client)
    if digest:
        log(f"image {image} exists ({digest}): not rebuilt")
        return f"{image}@{digest}", False
    log(f"building {image} with Cloud Build from {source_uri}")
    operation = build_client.create_build(request=build_request(
        repository, tag, source_uri, service_account=service_account))
    build = operation.result()
    built = [i for i in build.results.images if i.name == image]
    if not built or not built[0].digest:
        raise CloudBuildError(f"Cloud Build {build.id} finished ({build.status.name}) without "
                              f"pushing {image}; see {build.log_url}")
    log(f"pushed {image}@{built[0].digest}")
    return f"{image}@{built[0].digest}", True
