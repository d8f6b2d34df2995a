"""What the training step records once its CustomJob has ended: what the run cost
(`components.capacity.cost`) and what Cloud Monitoring saw of its accelerators
(`components.training.job_utilization`), in the job's directory for the training report.

The job's outcome is decided when it ends; a record is told, never a reason to fail the
step. A step that failed after a training that SUCCEEDED would be retried or fail the run
for nothing (a job that wrote nothing into its directory, whose container wrote elsewhere,
left no directory to write beside). A record that cannot be made is named in one line and
the step goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def record_after_job(what: str, job: str, make: Callable[[], Any],
                     log: Callable[[str], None]) -> Any:
    """`make()`'s value, or None when it failed: then one line names the record, the job
    and why."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - the job's outcome stands whatever happens here
        log(f"training: the {what} record of {job} was not written "
            f"({type(exc).__name__}: {exc}); the job's outcome stands")
        return None


def record_all(record: Mapping[str, Any], job: Any, vertex: Mapping[str, Any], job_dir: str,
               log: Callable[[str], None], *, cost_client: Any = None,
               monitoring_client: Any = None) -> dict[str, Any]:
    """Every record of a finished training job (`job`, the CustomJob that trained;
    `record`, the launcher's capacity record) written to `job_dir`; returns what was made
    (None for what was not)."""
    from components.capacity.cost import tell_cost
    from components.capacity.vertex_launch import jobs_client
    from components.training import job_utilization

    return {
        "cost": record_after_job("cost", job.name, lambda: tell_cost(
            record, vertex, job_dir, log=log, client_for=cost_client or jobs_client), log),
        "accelerator use": record_after_job(
            "accelerator use", job.name, lambda: job_utilization.tell(
                job, job_dir, log=log, client=monitoring_client), log),
    }
