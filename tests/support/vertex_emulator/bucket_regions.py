"""Vertex AI's rule on the Cloud Storage a request names: the bucket must be in the
request's region, a multi-region refused too ("FailedPrecondition: 400 The Cloud Storage
bucket of `gs://model_metadata_prod/aiplatform-custom-job-...` is in location `us`. It must
be in the same regional location as the service location": googleapis/python-aiplatform#885
for a CustomJob's base output directory; GoogleCloudPlatform/vertex-ai-samples#19 for a
model upload's artifacts; "Vertex AI is a regionalized service and requires that you use
buckets within the same region", the maintainers there)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: The creates whose Cloud Storage location Vertex AI checks, and where their REST body (or
#: gcpc's snake_case one) names it.
CHECKED = ((r"/customJobs$", (("jobSpec", "baseOutputDirectory", "outputUriPrefix"),
                               ("job_spec", "base_output_directory", "output_uri_prefix"))),
           (r"/hyperparameterTuningJobs$", (
               ("trialJobSpec", "baseOutputDirectory", "outputUriPrefix"),
               ("trial_job_spec", "base_output_directory", "output_uri_prefix"))),
           (r"/models:upload$", (("model", "artifactUri"), ("model", "artifact_uri"))),
           # neo4j-partners/hands-on-lab-neo4j-and-google#2: a batch prediction into a
           # multi-region bucket fails; "worked around by making the bucket regional".
           (r"/batchPredictionJobs$", (
               ("outputConfig", "gcsDestination", "outputUriPrefix"),
               ("output_config", "gcs_destination", "output_uri_prefix"))))


def bucket_refusal(path: str, body: Any, location_of: Callable[[str], str | None]) -> str:
    """Why Vertex AI refuses this create for its bucket's location ("" when it does not;
    `location_of`: a bucket's location as Cloud Storage reports it, None when unknown)."""
    region = re.match(r"^/v1/projects/[^/]+/locations/([^/]+)/", path)
    for pattern, fields in CHECKED:
        if region is None or not re.search(pattern, path):
            continue
        for keys in fields:
            found: Any = body if isinstance(body, dict) else {}
            for key in keys:
                found = found.get(key) if isinstance(found, dict) else None
            if isinstance(found, str) and found.startswith("gs://"):
                where = location_of(found[len("gs://"):].split("/", 1)[0])
                if where and where.lower() != region.group(1):
                    return (f"The Cloud Storage bucket of `{found}` is in location "
                            f"`{where.lower()}`. It must be in the same regional location as "
                            f"the service location `{region.group(1)}`.")
    return ""
