"""Sharing the compiled spec: an Artifact Registry Kubeflow Pipelines repository, or gs://.

What is shared must run as published: `publish_run` prepares the spec the way `submit`
does (sources uploaded, the project's images built or found, every component pinned to the
CPU image by digest, the configuration's values as the parameters' defaults), and
`publish` refuses a spec whose components still name the placeholder image of `compiled/`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from components import identity
from components.cloud_names import TAG, gcs_uri_problem
from components.stage_messages import say
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from pipelines.vertex.runs import prepared_run
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError
from trainer.common.gcs import split_gcs_uri, storage_client
from trainer.common.schema import short
from trainer.common.shell_name import command

#: Artifact Registry Kubeflow Pipelines repositories, or a registry on loopback (tests, a
#: port-forwarded registry).
_REGISTRY = re.compile(r"(https://[a-z0-9-]+-kfp\.pkg\.dev|http://127\.0\.0\.1:[0-9]+)"
                       r"/[a-z0-9-]+(/[a-z0-9._-]+)+")


class PublishError(InputError):
    """A spec, destination or tag `publish` cannot use."""


def unpinned_images(spec: Path) -> list[str]:
    """The project images a compiled spec runs that are not pinned by a real digest."""
    from components import images
    from pipelines.compiler import load_spec

    executors = load_spec(spec.read_text())["deploymentSpec"]["executors"]
    found = {e["container"]["image"] for e in executors.values() if "container" in e}
    ours = {i for i in found
            if any(f"/{image.name}:" in i or f"/{image.name}@" in i
                   for image in images.PROJECT_IMAGES)}
    return sorted(i for i in ours if "@sha256:" not in i or i.endswith(images.UNBUILT_DIGEST))


def publish_run(config: Config, destination: str, tags: Sequence[str], *, dry_run: bool,
                clients: Clients | None = None, credentials: Any = None, auth: Any = None,
                log: Callable[[str], None] = say) -> list[str]:
    """Prepares the run's spec as `submit` does, and publishes it (or says what it would).

    Returns:
        Where the spec now is; empty for a dry run.
    """
    clients = clients or Clients()
    check_target(destination, tags)  # before anything is uploaded or built
    with prepared_run(config, dry_run, clients, credentials, log) as (prepared, _):
        if dry_run:
            log(f"dry run: nothing was uploaded, built or published; {destination} would "
                "receive the spec with its components in "
                f"{prepared.images['cpu']['reference']} (the digest once built), tagged "
                f"{', '.join(tags)}")
            return []
        return publish(prepared.template, destination, tags, storage=clients.storage,
                       auth=auth)


def check_target(destination: str, tags: Sequence[str]) -> None:
    """Raises PublishError unless `destination` is a place `publish` can write to and every
    tag is one the registry takes."""
    bad = [t for t in tags if not TAG.fullmatch(t) or t.startswith("sha256")]
    if bad:
        raise PublishError(f"tags {short(bad)} are invalid; a tag is 1 to 128 letters, digits, "
                           "'_', '.' and '-', starting with a letter, digit or '_', and does "
                           "not start with 'sha256'")
    if destination.startswith("gs://"):
        problem = gcs_uri_problem(destination)
        if problem:
            raise PublishError(f"publish destination {short(destination)}: {problem}")
        return
    if not _REGISTRY.fullmatch(destination.rstrip("/")):
        raise PublishError(f"publish destination {short(destination)} is neither an Artifact "
                           "Registry Kubeflow Pipelines repository "
                           "(https://REGION-kfp.pkg.dev/PROJECT/REPO) nor gs://BUCKET/PATH")


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
        raise PublishError(f"{spec} does not exist; run `{command()} compile` first")
    unpinned = unpinned_images(spec)
    if unpinned:
        raise PublishError(f"{spec} runs its components in {', '.join(unpinned)}, which is not "
                           "pinned by digest (the placeholder of compiled/ names no image that "
                           f"exists); publish with `{command()} publish --config FILE "
                           "DESTINATION`, which builds or finds the image first")
    check_target(destination, tags)
    if destination.startswith("gs://"):
        storage = storage or storage_client()
        bucket, prefix = split_gcs_uri(destination.rstrip("/") + "/")
        data = spec.read_bytes()
        written = []
        for tag in tags:
            name = f"{prefix}{identity.PIPELINE_NAME}/{tag}.yaml"
            with remote_call(f"uploading the spec to gs://{bucket}"):
                storage.bucket(bucket).blob(name).upload_from_string(
                    data, content_type="application/yaml")
            written.append(f"gs://{bucket}/{name}")
        return written
    from kfp.registry import RegistryClient  # an https:// (or loopback) registry

    with remote_call(f"uploading the spec to {destination}"):
        client = RegistryClient(host=destination, auth=auth)
        package, version = client.upload_pipeline(file_name=str(spec), tags=list(tags))
    return [f"{destination.rstrip('/')}/{package}/{version}"]
