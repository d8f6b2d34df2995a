"""Google Cloud names checked by their documented formats, as annotated option types.

Each type accepts "" where the option is optional (meaning "not set") and otherwise the
format its API takes, so a typo is refused when the configuration is loaded instead of
by the API after the earlier stages have run. The messages say what is valid.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator

# Project IDs: 6 to 30 lowercase letters, digits and hyphens, starting with a letter and
# not ending with a hyphen (Resource Manager docs), optionally domain-scoped.
_PROJECT = re.compile(r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
# Bucket names: 3 to 63 lowercase letters, digits, dashes, underscores and dots, starting
# and ending with a letter or digit (Cloud Storage docs: bucket naming).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_SERVICE_ACCOUNT = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}@[a-z0-9][a-z0-9.-]*"
                              r"\.gserviceaccount\.com")
_NETWORK = re.compile(r"projects/[0-9]+/global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_TENSORBOARD = re.compile(r"projects/[^/\s]+/locations/[a-z0-9-]+/tensorboards/[0-9]+")
_NETWORK_ATTACHMENT = re.compile(r"projects/[^/\s]+/regions/([a-z0-9-]+)/networkAttachments/"
                                 r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_KMS_KEY = re.compile(r"projects/[^/\s]+/locations/([a-z0-9-]+)/keyRings/[\w-]{1,63}/"
                      r"cryptoKeys/[\w-]{1,63}")
_MODEL = re.compile(r"projects/[^/]+/locations/([^/]+)/models/[^/]+")
#: Any regional Vertex AI resource: jobs, endpoints, models.
_LOCATED = re.compile(r"projects/[^/\s]+/locations/([a-z0-9-]+)/[^\s]+")
_WORKER_POOL = re.compile(r"projects/[^/\s]+/locations/([a-z0-9-]+)/workerPools/"
                          r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# An https URL with a host and no spaces or credentials (those come from the build's account).
_HTTPS_URL = re.compile(r"https://[A-Za-z0-9.-]+(:[0-9]+)?(/[^\s@]*)?")
# Image references: registry host, path, optional tag and digest (Docker's grammar).
_IMAGE = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                    r"(@sha256:[a-f0-9]{64})?")
#: A tag of an image or of a published pipeline version (Docker's and Artifact Registry's).
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REGION = re.compile(r"[a-z]+(-[a-z0-9]+)+")


def bucket_problem(name: str) -> str | None:
    """Why `name` is not a Cloud Storage bucket name, or None."""
    if not _BUCKET.fullmatch(name) or ".." in name or name.startswith("goog") \
            or "google" in name:
        return (f"bucket {name!r} is not a valid Cloud Storage bucket name: 3 to 63 lowercase "
                "letters, digits, '-', '_' and '.', starting and ending with a letter or "
                "digit, without 'goog'")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return None
    return f"bucket {name!r} looks like an IP address, which bucket names may not"


def gcs_uri_problem(uri: str) -> str | None:
    """Why `uri` is not `gs://BUCKET[/PATH]`, or None."""
    if not uri.startswith("gs://"):
        return "expected gs://BUCKET/PATH"
    bucket = uri[len("gs://"):].split("/", 1)[0]
    return bucket_problem(bucket)


def _checker(test: Callable[[str], str | None], optional: bool = True):
    def check(value: str) -> str:
        if optional and value == "":
            return value
        problem = test(value)
        if problem:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


def _pattern(regex: re.Pattern, valid: str) -> Callable[[str], str | None]:
    return lambda value: None if regex.fullmatch(value) else f"expected {valid}"


ProjectId = Annotated[str, _checker(_pattern(
    _PROJECT, "a project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a "
              "letter (e.g. my-project-123)"))]
Region = Annotated[str, _checker(_pattern(_REGION, "a region such as us-central1"), False)]
GcsUri = Annotated[str, _checker(gcs_uri_problem)]
ServiceAccount = Annotated[str, _checker(_pattern(
    _SERVICE_ACCOUNT, "a service account email such as "
                      "trainer@my-project.iam.gserviceaccount.com"))]
Network = Annotated[str, _checker(_pattern(
    _NETWORK, "projects/PROJECT_NUMBER/global/networks/NAME"))]
Tensorboard = Annotated[str, _checker(_pattern(
    _TENSORBOARD, "projects/PROJECT/locations/REGION/tensorboards/ID"))]
NetworkAttachment = Annotated[str, _checker(_pattern(
    _NETWORK_ATTACHMENT, "projects/PROJECT/regions/REGION/networkAttachments/NAME"))]
KmsKey = Annotated[str, _checker(_pattern(
    _KMS_KEY, "projects/PROJECT/locations/REGION/keyRings/RING/cryptoKeys/KEY"))]
WorkerPoolName = Annotated[str, _checker(_pattern(
    _WORKER_POOL, "projects/PROJECT/locations/REGION/workerPools/NAME (a Cloud Build private "
                  "pool)"))]
HttpsUrl = Annotated[str, _checker(_pattern(
    _HTTPS_URL, "an https:// URL without credentials (e.g. "
                "https://us-python.pkg.dev/my-project/pypi-mirror/simple/)"))]


def _region_of(regex: re.Pattern, name: str) -> str:
    """The region a regional resource's name holds (its pattern's first group), "" if the
    name is malformed."""
    found = regex.fullmatch(name)
    return found[1] if found else ""


def worker_pool_region(pool: str) -> str:
    """A Cloud Build private pool's region (`projects/P/locations/R/...` -> R)."""
    return _region_of(_WORKER_POOL, pool)


def attachment_region(attachment: str) -> str:
    """A network attachment's region (`projects/P/regions/R/...` -> R), "" if malformed."""
    return _region_of(_NETWORK_ATTACHMENT, attachment)


def model_region(model: str) -> str:
    """A Model Registry model's region (`projects/P/locations/R/models/ID` -> R), "" if
    malformed."""
    return _region_of(_MODEL, model)


def resource_region(name: str) -> str:
    """A regional Vertex AI resource's region (`projects/P/locations/R/customJobs/ID` -> R),
    "" if malformed."""
    return _region_of(_LOCATED, name)


def kms_key_location(key: str) -> str:
    """A Cloud KMS key's location (`projects/P/locations/R/...` -> R), "" if malformed."""
    return _region_of(_KMS_KEY, key)


def encryption_spec(key: str) -> Any:
    """The `aiplatform_v1.EncryptionSpec` of a customer-managed key, or None without one
    (the field left out: Google-managed keys)."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.EncryptionSpec(kms_key_name=key) if key else None


def image_reference_problem(value: str) -> str | None:
    """Why `value` is not an image reference Vertex AI accepts, or None."""
    if not _IMAGE.fullmatch(value):
        return ("expected an image reference such as "
                "us-docker.pkg.dev/my-project/repo/name@sha256:DIGEST or .../name:TAG")
    if "@" in value and ":" in value.split("@", 1)[0].rsplit("/", 1)[-1]:
        # kubeflow/pipelines#8490, googleapis/python-aiplatform#1861.
        return ("it names both a tag and a digest, which Vertex AI refuses (400 Invalid image "
                "URI); give the digest alone: REPOSITORY/NAME@sha256:DIGEST")
    return None


def display_name_problem(value: str) -> str | None:
    """Why `value` is not a Vertex AI display name, or None."""
    return None if 0 < len(value) <= 128 and value.isprintable() else \
        "expected 1 to 128 printable characters"


def model_display_name_problem(value: str) -> str | None:
    """Why `value` cannot name a registered model, or None."""
    if '"' in value or "\\" in value:
        # gcpc's ModelUploadOp builds its request JSON by putting the display name between
        # quotes unescaped (v1/model/upload_model/component.py), so these break the request.
        return ("contains '\"' or '\\', which google-cloud-pipeline-components' ModelUploadOp "
                "puts unescaped into its request's JSON; expected 1 to 128 printable "
                "characters without them")
    return display_name_problem(value)


def pinned_image_problem(value: str) -> str | None:
    """Why `value` is not an image reference by digest, or None."""
    return image_reference_problem(value) or (
        None if "@sha256:" in value else
        "expected an image by digest (REPOSITORY/NAME@sha256:DIGEST): a tag can move, and the "
        "images are built from pinned inputs only")


ImageReference = Annotated[str, _checker(image_reference_problem)]
PinnedImage = Annotated[str, _checker(pinned_image_problem)]
DisplayName = Annotated[str, _checker(display_name_problem, False)]
ModelDisplayName = Annotated[str, _checker(model_display_name_problem, False)]


def vertex_endpoint(region: str) -> str:
    """The Vertex AI API host of a region (Vertex AI docs: "REST endpoints")."""
    return f"{region}-aiplatform.googleapis.com"


def vertex_resource_uri(region: str, name: str) -> str:
    """A Vertex AI resource (`projects/.../models/ID`) as the URI google-cloud-pipeline-
    components' artifacts carry (`VertexModel`: https://ENDPOINT/v1/projects/...)."""
    return f"https://{vertex_endpoint(region)}/v1/{name}"
