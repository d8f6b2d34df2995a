"""A Vertex AI training job's accelerator use as Cloud Monitoring recorded it, read after
the job and put beside the replicas' own NVML figures (`components.training.efficiency`).

Vertex AI writes, for every custom training job, `ml.googleapis.com/training/accelerator/
utilization` and `.../accelerator/memory/utilization` on the monitored resource
`cloudml_job` (resource label `job_id`, metric label `task_name`: one series per replica),
a fraction from 0 to 1 sampled every 60 s (Google Cloud metrics list, "ml"; the filter
`metric.type=... AND resource.type="cloudml_job" AND resource.labels.job_id=...` as users
query it). A job shorter than a minute has one point per replica, or none.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Mapping
from typing import Any

from components import cloud_monitoring
from components.durations import timestamp_seconds
from components.gpu.worker_pool import parse_pools
from trainer.common import files

FILE = "cloud_monitoring.json"
METRICS = {"utilization": "ml.googleapis.com/training/accelerator/utilization",
           "memory": "ml.googleapis.com/training/accelerator/memory/utilization"}
#: Vertex AI's worker pools by position, as the replicas' TF_CONFIG names them.
POOL_ROLES = ("chief", "worker", "ps", "evaluator")


def replica_of(task_name: str, replicas: int) -> str:
    """The replica a series' `task_name` names, in the efficiency series' words:
    `workerpool0-0` (Vertex AI) or `master-replica-0` (AI Platform's form) -> `chief-0`;
    a job of one replica has no TF_CONFIG, so its replica is `single-0`."""
    found = re.fullmatch(r"workerpool(\d)-(\d+)", task_name)
    legacy = re.fullmatch(r"(master|worker|ps|evaluator)-replica-(\d+)", task_name)
    if replicas == 1 and (found or legacy):
        return "single-0"
    if found and int(found[1]) < len(POOL_ROLES):
        return f"{POOL_ROLES[int(found[1])]}-{found[2]}"
    if legacy:
        return f"{'chief' if legacy[1] == 'master' else legacy[1]}-{legacy[2]}"
    return task_name or "unnamed"


def read_job(client: Any, job: Mapping[str, Any]) -> dict[str, Any]:
    """Every replica's accelerator figures of `job` (a CustomJob as JSON, ended): the
    mean and the highest sample in percent and the number of samples; a job whose pools
    hold no accelerator is not read."""
    pools = [p for p in parse_pools(job.get("jobSpec", {}).get("workerPoolSpecs", [])) if p]
    with_gpus = [p for p in pools if p.accelerator]
    found: dict[str, Any] = {"job": job["name"], "source": "Cloud Monitoring, "
                             + ", ".join(METRICS.values()), "replicas": {}}
    if not with_gpus:
        return {**found, "unavailable": "the job's machines have no accelerator"}
    if not job.get("startTime"):
        return {**found, "unavailable": "the job never started"}
    project, job_id = job["name"].split("/")[1], job["name"].rsplit("/", 1)[-1]
    start = timestamp_seconds(job["startTime"])
    end = timestamp_seconds(job["endTime"]) if job.get("endTime") else start
    replicas = sum(p.replicas for p in pools)
    for key, metric in METRICS.items():
        query = (f'metric.type="{metric}" AND resource.type="cloudml_job" AND '
                 f'resource.labels.job_id="{job_id}"')
        for series in cloud_monitoring.list_series(
                client, project, query, start, end,
                f"{metric.rsplit('training/', 1)[-1]} of the job {job_id}"):
            values = [100 * cloud_monitoring.number(p.value) for p in series.points]
            if values:
                name = replica_of(series.metric.labels.get("task_name", ""), replicas)
                found["replicas"].setdefault(name, {})[key] = {
                    "mean_percent": round(statistics.fmean(values), 1),
                    "max_percent": round(max(values), 1), "samples": len(values)}
    if not found["replicas"]:
        found["unavailable"] = "Cloud Monitoring holds no sample of the job (it samples " \
                               "every 60 s: a shorter job may have none)"
    return found


def tell(job: Any, job_dir: str, log: Any, client: Any = None) -> dict[str, Any] | None:
    """The training step's reading of its job's accelerator use (`job`: the CustomJob that
    trained), written to `job_dir` for the training report; told, never a reason to fail
    the step: a reading that cannot be made says why."""
    from google.protobuf import json_format

    from trainer.common.errors import ProjectError

    resource = json_format.MessageToDict(type(job).pb(job))
    try:
        found = read_job(client or cloud_monitoring.metrics_client(), resource)
    except ProjectError as exc:
        log(f"Cloud Monitoring: the job's accelerator use not read ({exc})")
        return None
    files.write_json(os.path.join(job_dir, FILE), found)
    for line in lines(found):
        log(line)
    return found


def load(job_dir: str) -> dict[str, Any] | None:
    """What the training step read (None locally, or when it could not read it)."""
    return files.read_json(os.path.join(job_dir, FILE))


def lines(found: Mapping[str, Any]) -> list[str]:
    """One line per replica (or why there is none)."""
    if found.get("unavailable"):
        return [f"Cloud Monitoring: no accelerator figures ({found['unavailable']})"]
    out = []
    for name, figures in sorted(found["replicas"].items()):
        parts = [f"{label} {figures[key]['mean_percent']:.0f}% (highest "
                 f"{figures[key]['max_percent']:.0f}%, {figures[key]['samples']} sample(s))"
                 for key, label in (("utilization", "GPU busy"), ("memory", "GPU memory"))
                 if key in figures]
        out.append(f"Cloud Monitoring: {name}: " + ", ".join(parts))
    return out
