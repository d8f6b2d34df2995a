"""Cloud Monitoring's time series, read one way for every stage that reads them (the
deploy stage's endpoint figures, the training step's accelerator use).

`projects.timeSeries.list` (Cloud Monitoring API v3) needs a filter naming exactly one
metric type and an interval with an end; an aligner needs an alignment period of at least
60 s. google-cloud-monitoring's Python client speaks gRPC only.
"""

from __future__ import annotations

from typing import Any

from trainer.common.cloud_calls import remote_call


def metrics_client() -> Any:
    """Cloud Monitoring's MetricServiceClient (the emulated runs point it at the fake)."""
    from google.cloud import monitoring_v3

    return monitoring_v3.MetricServiceClient()


def list_series(client: Any, project: str, query: str, start: float, end: float, what: str,
                *, period: int = 0, aligner: str = "") -> list[Any]:
    """The series of `project` that `query` selects between `start` and `end` (epoch
    seconds, the end included), raw points or aligned with `aligner` over `period` seconds.

    Raises:
        CloudCallError: Cloud Monitoring refused or could not be reached (`what` names it).
    """
    from google.cloud import monitoring_v3

    request = monitoring_v3.ListTimeSeriesRequest(
        name=f"projects/{project}", filter=query,
        interval=monitoring_v3.TimeInterval(start_time={"seconds": int(start)},
                                            end_time={"seconds": int(end) + 1}))
    if aligner:
        request.aggregation = monitoring_v3.Aggregation(
            alignment_period={"seconds": period},
            per_series_aligner=getattr(monitoring_v3.Aggregation.Aligner, aligner))
    with remote_call(f"reading {what}"):
        return list(client.list_time_series(request=request))


def number(value: Any) -> float:
    """A point's TypedValue as a number (0 for kinds that are not one)."""
    kind = type(value).pb(value).WhichOneof("value")
    return float(getattr(value, kind)) if kind in ("int64_value", "double_value") else 0.0
