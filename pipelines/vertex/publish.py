"""Sharing the compiled spec: an Artifact Registry Kubeflow Pipelines repository, or gs://."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from components import project
from trainer.errors import InputError
from trainer.gcs import split_gcs_uri, storage_client


class PublishError(InputError):
    """A spec, destination or tag `publish` cannot use."""


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
        raise PublishError(f"{spec} does not exist; run `gpu-pipeline compile` first")
    bad = [t for t in tags if not t or t.startswith("sha256:") or "/" in t]
    if bad:
        raise PublishError(f"tags {bad!r} are invalid; tags are non-empty, contain no '/' and "
                           "do not start with 'sha256:'")
    if destination.startswith("gs://"):
        storage = storage or storage_client()
        bucket, prefix = split_gcs_uri(destination.rstrip("/") + "/")
        data = spec.read_bytes()
        written = []
        for tag in tags:
            name = f"{prefix}{project.PIPELINE_NAME}/{tag}.yaml"
            storage.bucket(bucket).blob(name).upload_from_string(data,
                                                                 content_type="application/yaml")
            written.append(f"gs://{bucket}/{name}")
        return written
    if destination.startswith(("https://", "http://")):
        from kfp.registry import RegistryClient

        client = RegistryClient(host=destination, auth=auth)
        package, version = client.upload_pipeline(file_name=str(spec), tags=list(tags))
        return [f"{destination.rstrip('/')}/{package}/{version}"]
    raise PublishError(f"publish destination {destination!r} is neither an Artifact Registry "
                       "Kubeflow Pipelines repository (https://REGION-kfp.pkg.dev/PROJECT/REPO) "
                       "nor a gs:// prefix")
