"""Job names: the documents' rules, and a unique name per run."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from trainer.common.schema import short

#: AI Platform Training's job name rules ("Training overview",
#: https://cloud.google.com/ai-platform/training/docs/overview): unique in the project,
#: letters, digits and underscores, starting with a letter, at most 128 characters.
JOB_NAME_MAX = 128
_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def validate_job_name(name: Any, field: str = "job_name", reserve: int = 0) -> list[str]:
    """Checks a job name against the documents' rules; returns the problems.

    Args:
        name: The name.
        field: Field name for the messages.
        reserve: Characters kept free for a suffix (see `unique_job_name`).
    """
    if not isinstance(name, str) or not name:
        return [f"{field} is {short(name)}; expected letters, digits and underscores, starting "
                "with a letter"]
    problems = []
    if not _JOB_NAME.match(name):
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))})
        what = (f"contains {', '.join(repr(c) for c in bad)}" if bad
                else "does not start with a letter")
        problems.append(f"{field} is {short(name)}, which {what}; job names hold only letters, "
                        "digits and underscores and start with a letter")
    limit = JOB_NAME_MAX - reserve
    if len(name) > limit:
        problems.append(f"{field} is {len(name)} characters long; at most {limit} fit"
                        + (f" (a {reserve}-character date/time suffix makes each run's name "
                           "unique)" if reserve else ""))
    return problems


#: Length of the `_YYYYMMDD_HHMMSS` suffix added by `unique_job_name`.
JOB_NAME_SUFFIX = 16


def unique_job_name(base: str, now: _dt.datetime | None = None) -> str:
    """`<base>_<YYYYMMDD_HHMMSS>` in UTC: the documents' way to keep job names unique and
    sorted, grouping a model's jobs together."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{base}_{now.strftime('%Y%m%d_%H%M%S')}"
