"""Durations and timestamps as Google's APIs write them, read one way everywhere: a
`google.protobuf.Duration` in its JSON form (`3600s`, also how the options take a
duration) and an RFC 3339 timestamp (`2026-11-26T10:00:00Z`, a job's `startTime`)."""

from __future__ import annotations

import math
import re
from datetime import datetime

#: A duration option's form: a number of seconds and `s`.
DURATION = re.compile(r"\d+(\.\d+)?s")


def duration_seconds(value: str) -> float | None:
    """`3600s` as 3600.0; None when it is not a number of seconds."""
    if not DURATION.fullmatch(value):
        return None
    found = float(value[:-1])
    return found if math.isfinite(found) else None


def timestamp_seconds(stamp: str) -> float:
    """An RFC 3339 timestamp as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
