"""Cloud Storage helpers: `gs://` URIs, Vertex AI's `/gcs/` mount, a client and reads.

On Vertex AI, Cloud Storage is mounted at `/gcs/BUCKET/PATH` (Cloud Storage FUSE), so the
trainer reads and writes `gs://` locations with plain file APIs. Everything else that
touches Cloud Storage (dataset sources, build contexts, the Vertex path) uses the client
and helpers here. The client library is imported only when a client is needed.
"""

from __future__ import annotations

import os
from typing import Any

from trainer.common.cloud_calls import CredentialsError
from trainer.common.errors import InputError

#: Where Vertex AI mounts Cloud Storage (gs://BUCKET/PATH is /gcs/BUCKET/PATH there).
GCS_MOUNT = "/gcs/"


class GcsUriError(InputError):
    """A `gs://` URI without a bucket."""


class GcsCredentialsError(CredentialsError):
    """No credentials to read Cloud Storage with."""


def to_mount_path(uri: str) -> str:
    """`gs://bucket/path` -> `/gcs/bucket/path`; other paths are returned unchanged."""
    if uri.startswith("gs://"):
        return GCS_MOUNT + uri[len("gs://"):]
    return uri


def mounted_gcs_uri(path: str) -> str | None:
    """The `gs://` URI of a path on Vertex AI's Cloud Storage mount, else None."""
    return "gs://" + path[len(GCS_MOUNT):] if path.startswith(GCS_MOUNT) else None


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """`gs://bucket/path` -> (bucket, path).

    Raises:
        GcsUriError: The URI names no bucket.
    """
    bucket, _, path = uri[len("gs://"):].partition("/")
    if not uri.startswith("gs://") or not bucket:
        raise GcsUriError(f"{uri!r} names no bucket; expected gs://BUCKET/PATH")
    return bucket, path


_CLIENT = None


def storage_client() -> Any:
    """A Cloud Storage client; with STORAGE_EMULATOR_HOST set, an anonymous one for it."""
    global _CLIENT
    if _CLIENT is None:
        from google.cloud import storage

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            _CLIENT = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "local"),
                                     credentials=AnonymousCredentials())
        else:
            from google.auth.exceptions import DefaultCredentialsError

            from trainer.common.cloud_calls import default_credentials

            try:
                credentials, project = default_credentials()
                _CLIENT = storage.Client(project=project, credentials=credentials)
            except DefaultCredentialsError:
                raise GcsCredentialsError(
                    "reading gs:// needs Google Cloud credentials: run `gcloud auth "
                    "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS (on "
                    "Vertex AI the job's service account is used)") from None
    return _CLIENT


def reset_client() -> None:
    """Forgets the cached client and credentials (the environment pointing at Cloud
    Storage changed)."""
    from trainer.common.cloud_calls import forget_credentials

    global _CLIENT
    _CLIENT = None
    forget_credentials()


def read_bytes(ref: str) -> bytes:
    """The bytes of a local path or a `gs://` object."""
    if ref.startswith("gs://"):
        bucket, path = split_gcs_uri(ref)
        return storage_client().bucket(bucket).blob(path).download_as_bytes()
    with open(ref, "rb") as f:
        return f.read()
