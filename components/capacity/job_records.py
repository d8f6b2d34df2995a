"""What ties a training CustomJob to the pipeline step that created it: its labels, the
step's `gcp_resources` output, and the step's earlier jobs found again.

A step runs again after a KFP retry, a resumed run or an evicted pod. gcpc's CustomJob
launcher writes `gcp_resources` right after it creates the job and, when that file is
there as the step starts, follows the job it names instead of creating another
(`container/v1/gcp_launcher/job_remote_runner.py`, `check_if_job_exists`). It also puts
Vertex AI Pipelines' run labels, which Vertex AI Pipelines passes to every task as the
JSON object in `VERTEX_AI_PIPELINES_RUN_LABELS`, on the job, the user's labels winning a
clash (`container/v1/gcp_launcher/utils/gcp_labels_util.py`). The run's
`vertex-ai-pipelines-run-billing-id` label (reserved by Vertex AI Pipelines: PipelineJob
.labels) then finds the step's jobs through ListCustomJobs' `labels.KEY="VALUE"` filter
even when the file is gone; this project's own labels say which step and which
alternative made each.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from components.cloud_names import resource_region, vertex_resource_uri

#: gcpc's `gcp_labels_util.SYSTEM_LABEL_ENV_VAR`.
RUN_LABELS_ENV = "VERTEX_AI_PIPELINES_RUN_LABELS"
#: The label Vertex AI Pipelines gives every resource of a run (its billing ID).
BILLING_LABEL = "vertex-ai-pipelines-run-billing-id"
#: The project's labels on a training CustomJob: the step that created it, and which
#: alternative (0 the primary, 1 `vertex.fallbacks[0]`, ...) it runs.
STEP_LABEL = "gpu-pipeline-step"
STEP = "training"
ALTERNATIVE_LABEL = "gpu-pipeline-alternative"


def run_labels(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Vertex AI Pipelines' labels of the run this step belongs to ({} outside a run, or
    when the variable is not a JSON object of strings)."""
    text = (os.environ if environ is None else environ).get(RUN_LABELS_ENV, "")
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in found.items()}


def job_labels(user_labels: Mapping[str, str], alternative: int,
               environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A training CustomJob's labels: the run's, the user's (`vertex.labels`, winning a
    clash, as in gcpc), and the step's own."""
    return {**run_labels(environ), **user_labels, STEP_LABEL: STEP,
            ALTERNATIVE_LABEL: str(alternative)}


def earlier_jobs_filter(billing_id: str) -> str:
    """ListCustomJobs' filter for the training jobs of a run."""
    return f'labels.{BILLING_LABEL}="{billing_id}" AND labels.{STEP_LABEL}="{STEP}"'


def gcp_resources(jobs: Iterable[tuple[str, str]]) -> str:
    """`(region, job name)` pairs as gcpc's launchers write their `gcp_resources` output
    (Vertex AI Pipelines links each from the step)."""
    return json.dumps({"resources": [
        {"resourceType": "CustomJob", "resourceUri": vertex_resource_uri(region, name)}
        for region, name in jobs]})


def write_gcp_resources(path: str, jobs: Iterable[tuple[str, str]]) -> None:
    """Writes `gcp_resources` at once (a step cut off later still names its jobs)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(gcp_resources(jobs))


def jobs_in_gcp_resources(path: str) -> list[str]:
    """The CustomJob names an earlier run of the step wrote to `path` ([] when it wrote
    nothing there, or something that is not gcpc's form)."""
    file = Path(path) if path else None
    if file is None or not file.is_file() or not file.stat().st_size:
        return []
    try:
        resources = json.loads(file.read_text()).get("resources", [])
    except (ValueError, AttributeError):
        return []
    names = [str(r.get("resourceUri", "")).split("/v1/", 1)[-1] for r in resources
             if isinstance(r, dict) and r.get("resourceType") == "CustomJob"]
    return [name for name in names if "/customJobs/" in name and resource_region(name)]


def alternative_of(job: Any) -> int | None:
    """Which alternative a job of this step runs (its label), None if it does not say."""
    value = dict(job.labels).get(ALTERNATIVE_LABEL, "")
    return int(value) if value.isdigit() else None


def find_earlier(project: str, regions: Sequence[str], jobs_for: Callable[[str], Any],
                 gcp_resources_path: str, log: Callable[[str], None],
                 environ: Mapping[str, str] | None = None) -> list[Any]:
    """The training jobs this step created before it started again, oldest first: those
    its `gcp_resources` names, and those ListCustomJobs finds by the run's billing label
    in each alternative's region.

    A listing that fails is said and skipped (the file may still name the jobs).
    """
    from google.cloud import aiplatform_v1

    found: dict[str, Any] = {}
    for name in jobs_in_gcp_resources(gcp_resources_path):
        region = resource_region(name)
        try:
            found[name] = jobs_for(region).get_custom_job(name=name)
        except Exception as exc:  # noqa: BLE001 - a job that cannot be read is not resumed
            log(f"capacity: {name}, named by this step's gcp_resources, could not be read "
                f"({type(exc).__name__}: {exc}); not resumed")
    billing = run_labels(environ).get(BILLING_LABEL, "")
    if billing:
        for region in dict.fromkeys(regions):
            request = aiplatform_v1.ListCustomJobsRequest(
                parent=f"projects/{project}/locations/{region}",
                filter=earlier_jobs_filter(billing))
            try:
                for job in jobs_for(region).list_custom_jobs(request=request):
                    found.setdefault(job.name, job)
            except Exception as exc:  # noqa: BLE001 - the file may still name the jobs
                log(f"capacity: listing this run's training jobs in {region} failed "
                    f"({type(exc).__name__}: {exc})")
    return sorted(found.values(), key=lambda job: job.create_time.timestamp()
                  if job.create_time else 0.0)
