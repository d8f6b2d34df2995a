"""How many runs in a row kept the champion, and since when: a schedule that keeps an old
model run after run says so, from `vertex.champion_kept_warning` runs on, with the rule
and the figures that kept it.

A run keeps the champion when there is one and the new model does not become the default
(not better by the gate's rule, below the threshold, or `vertex.promotion` version_only or
never); a promotion starts the count again. Locally the count is in the registry's index;
on Vertex AI in each run's Vertex AI Experiments metrics, registered or not
(`experiments.kept_streak`), and in the labels of the version a run registers
(`champion-kept-runs`, `champion-kept-since`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

#: The registry index's key, the decision's key, and the Model Registry labels.
KEY = "champion_kept"
LABEL_RUNS, LABEL_SINCE = "champion-kept-runs", "champion-kept-since"


@dataclasses.dataclass(frozen=True)
class Streak:
    """Runs in a row that kept the champion, and the day the first of them ran."""

    runs: int
    since: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def labels(self) -> dict[str, str]:
        return {LABEL_RUNS: str(self.runs), LABEL_SINCE: self.since}


def today() -> str:
    """Today's date (UTC), as the streak records it."""
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def read(found: Mapping[str, Any] | None) -> Streak | None:
    """A streak from its record (`to_dict`) or from Model Registry labels; None if none."""
    if not found:
        return None
    runs = found.get("runs", found.get(LABEL_RUNS))
    since = found.get("since", found.get(LABEL_SINCE))
    try:
        return Streak(int(runs), str(since)) if runs and since else None
    except (TypeError, ValueError):
        return None


def following(previous: Streak | None, decision: Any, day: str = "") -> Streak | None:
    """The streak after this run's `decision` (a `gate.Decision`): one more when a champion
    stayed the default, None (counted from zero again) when there is none or it was
    replaced."""
    if decision.champion is None or decision.default:
        return None
    return Streak((previous.runs if previous else 0) + 1,
                  previous.since if previous else (day or today()))


def warning(streak: Streak | None, decision: Any, promotion: str, threshold: int) -> str:
    """The warning line once `threshold` runs in a row kept the champion ("" before)."""
    if streak is None or streak.runs < threshold:
        return ""
    hint = ("; vertex.promotion unless_shown_worse keeps a scheduled model current on fresh data "
            "unless it is shown worse" if promotion == "default" else "")
    return (f"warning: the champion has been kept {streak.runs} runs in a row, since "
            f"{streak.since} (vertex.champion_kept_warning {threshold}); this run: "
            f"vertex.promotion {promotion}, {decision.reason}{hint}")
