"""One item of a run's itemised cost (`run_cost`, `pipeline_job_cost`): a billed resource
or group of them, with its time, its USD and the price types it lacked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass
class Item:
    """One billed resource (or group) of the run."""

    kind: str  # training, tuning, batch prediction, canary, grace period, pipeline steps,
    #            dataflow, cloud build, pipeline
    name: str
    usd: float
    hours: float
    basis: str
    unpriced: list[str] = dataclasses.field(default_factory=list)


def seconds_of(resource: Mapping[str, Any]) -> float:
    """A resource's `startTime` to its `endTime` in seconds (REST field names; 0 without
    both)."""
    from components.durations import timestamp_seconds

    if not resource.get("startTime") or not resource.get("endTime"):
        return 0.0
    return max(0.0, timestamp_seconds(resource["endTime"])
               - timestamp_seconds(resource["startTime"]))
