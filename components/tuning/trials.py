"""What users see of a study: the trials table (Markdown, for the KFP artifact and the
run's summary) and the study's record (`study.json`, for `--json` and the lineage)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from components.tuning.local_study import Trial, best_trial
from components.tuning.tuning_options import TuningOptions

#: The study's record beside its trials.
STUDY_FILE = "study.json"


def study_record(tuning: TuningOptions, trials: Sequence[Trial]) -> dict[str, Any]:
    """The study as JSON: its settings, every trial, and the best one."""
    best = best_trial(tuning, trials)
    return {"metric": tuning.metric, "goal": tuning.goal, "algorithm": tuning.algorithm,
            "early_stopping": tuning.early_stopping,
            "trials": [t.as_dict() for t in trials],
            "best_trial": best.trial_id, "best_parameters": best.parameters,
            "best_metric": best.metric}


def shown(value: Any) -> str:
    """A parameter value for people: whole numbers without `.0`, others to 4 digits."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.4g}"
    return str(value)


def trials_table(record: dict[str, Any]) -> str:
    """The trials as a Markdown table, the best one marked."""
    names = list(record["best_parameters"])
    lines = [f"## Hyperparameter tuning: {len(record['trials'])} trial(s), "
             f"{record['metric']} ({record['goal'].lower()})", "",
             "| trial | " + " | ".join(names) + f" | {record['metric']} | state | seconds |",
             "|---|" + "---|" * len(names) + "---:|---|---:|"]
    for t in record["trials"]:
        mark = " **best**" if t["trial_id"] == record["best_trial"] else ""
        metric = f"{t['metric']:.4f}" if t["metric"] is not None else "-"
        state = t["state"] + (f": {t['error'][:80]}" if t["error"] else "") \
            + (" (stopped early)" if t.get("stopped") else "")
        lines.append(f"| {t['trial_id']}{mark} | "
                     + " | ".join(shown(t["parameters"][n]) for n in names)
                     + f" | {metric} | {state} | {t['seconds']:.0f} |")
    lines += ["", "Best parameters: " + ", ".join(
        f"{k}={shown(v)}" for k, v in record["best_parameters"].items())
        + f" ({record['metric']} {record['best_metric']:.4f}, trial {record['best_trial']}); "
        "the final model is trained with them."]
    return "\n".join(lines) + "\n"
