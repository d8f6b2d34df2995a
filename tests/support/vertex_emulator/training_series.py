"""Cloud Monitoring's series of Vertex AI training jobs, served by the one emulated
Cloud Monitoring (`endpoints.EndpointService`, which serves the endpoints' series too).

As Vertex AI writes them (Google Cloud metrics list, "ml"): `ml.googleapis.com/training/
accelerator/utilization` and `.../accelerator/memory/utilization` on the resource
`cloudml_job` (label `job_id`), one series per replica that has accelerators (metric label
`task_name`, `workerpool<P>-<I>`), a fraction from 0 to 1 sampled every 60 s from the
job's start to its end, newest point first. What each replica does is what a test says
(`use[task_name]`: utilisation, memory), else DEFAULT_USE; every other sample is 0.1 lower,
so that a mean and a highest differ.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from components.durations import timestamp_seconds

PREFIX = "ml.googleapis.com/training/accelerator/"
METRICS = {f"{PREFIX}utilization": 0, f"{PREFIX}memory/utilization": 1}
DEFAULT_USE = (0.87, 0.45)


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def training_series(jobs: dict[str, Any], terms: dict[str, str], query: dict[str, Any],
                    use: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """The series `terms` (the filter's `key="value"` terms) select among `jobs`
    (name -> the emulator's CustomJob) within the query's interval."""
    metric = terms.get("metric.type", "")
    if metric not in METRICS or terms.get("resource.type") != "cloudml_job":
        return []
    wanted = terms.get("resource.labels.job_id")
    first = query.get("interval.startTime", [""])[0]
    last = timestamp_seconds(query["interval.endTime"][0])
    series = []
    for name, job in jobs.items():
        job_id = name.rsplit("/", 1)[-1]
        resource = job.resource
        if wanted not in (None, job_id) or not resource.get("startTime"):
            continue
        start = timestamp_seconds(resource["startTime"])
        end = timestamp_seconds(resource["endTime"]) if resource.get("endTime") else last
        times = [t for t in range(int(start), int(end) + 1, 60)
                 if (not first or t >= timestamp_seconds(first)) and t <= last]
        for pool, spec in enumerate(resource["jobSpec"]["workerPoolSpecs"]):
            if not spec or not (spec.get("machineSpec") or {}).get("acceleratorType"):
                continue
            for index in range(int(spec.get("replicaCount", 0) or 0)):
                task = f"workerpool{pool}-{index}"
                value = use.get(task, DEFAULT_USE)[METRICS[metric]]
                points = [{"interval": {"endTime": _stamp(t)},
                           "value": {"doubleValue": round(value - 0.1 * (number % 2), 4)}}
                          for number, t in enumerate(times)]
                if points:
                    series.append({
                        "metric": {"type": metric, "labels": {"task_name": task}},
                        "resource": {"type": "cloudml_job",
                                     "labels": {"job_id": job_id, "project_id":
                                                name.split("/")[1]}},
                        "metricKind": "GAUGE", "valueType": "DOUBLE",
                        "points": points[::-1]})
    return series
