"""A study on one machine: Open Source Vizier suggests, local clusters of the trainer try.

Open Source Vizier (`google-vizier`) is the open-source form of the service behind
Vertex AI Vizier. Its in-process service holds the study; each trial it suggests runs as
a local cluster of the trainer with the layout of the training run, its options given as
Vertex AI gives them (`--<option> <value>` after the others), and reports its metric as
on Vertex AI (cloudml-hypertune's metrics file, here one per trial). The last report is
the trial's final measurement. Trials run side by side on disjoint cores, as many as the
machine has cores for; a failed trial is recorded as infeasible and counts against
`max_failed_trials`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from components.tuning.options import TuningOptions
from trainer.errors import StageError, first_line

#: cloudml-hypertune's variables: where a trial's metrics go, and its id.
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
#: Locally, Vertex AI's default algorithm (Bayesian optimization) is Open Source Vizier's
#: default, its GP bandit.
LOCAL_ALGORITHMS = {"ALGORITHM_UNSPECIFIED": "DEFAULT", "GRID_SEARCH": "GRID_SEARCH",
                    "RANDOM_SEARCH": "RANDOM_SEARCH"}
_SCALES = {"UNIT_LINEAR_SCALE": "LINEAR", "UNIT_LOG_SCALE": "LOG",
           "UNIT_REVERSE_LOG_SCALE": "REVERSE_LOG"}


class StudyError(StageError):
    """The study could not finish: too many trials failed."""


@dataclasses.dataclass
class Trial:
    """A trial of the study and how it ended.

    Attributes:
        trial_id: Vizier's id (1, 2, ...), as a string.
        parameters: Option name -> value tried.
        state: SUCCEEDED or FAILED.
        metric: The final measurement (the last reported value); None when failed.
        seconds: How long it ran.
        job_dir: Its job directory (reports, metrics file).
        error: Why it failed.
    """

    trial_id: str
    parameters: dict[str, Any]
    state: str = "ACTIVE"
    metric: float | None = None
    seconds: float = 0.0
    job_dir: str = ""
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Runs one trial: (trial id, parameters, extra trainer args, environment, cores, job dir)
#: -> None, raising on failure.
TrialRunner = Callable[[str, dict[str, Any], list[str], dict[str, str], list[int], str], None]


def problem_statement(tuning: TuningOptions) -> Any:
    """The study's search space and metric, as Open Source Vizier's ProblemStatement."""
    from vizier.service import pyvizier as vz

    problem = vz.ProblemStatement()
    root = problem.search_space.root
    for p in tuning.parameters:
        scale = getattr(vz.ScaleType, _SCALES[p.scale])
        if p.type == "DOUBLE":
            root.add_float_param(p.name, p.min_value, p.max_value, scale_type=scale)
        elif p.type == "INTEGER":
            root.add_int_param(p.name, int(p.min_value), int(p.max_value), scale_type=scale)
        elif p.type == "DISCRETE":
            root.add_discrete_param(p.name, [float(v) for v in p.values], scale_type=scale)
        else:
            root.add_categorical_param(p.name, [str(v) for v in p.values])
    goal = vz.ObjectiveMetricGoal.MAXIMIZE if tuning.goal == "MAXIMIZE" \
        else vz.ObjectiveMetricGoal.MINIMIZE
    problem.metric_information.append(vz.MetricInformation(name=tuning.metric, goal=goal))
    return problem


def typed(tuning: TuningOptions, values: dict[str, Any]) -> dict[str, Any]:
    """A suggestion's values as the training options' types (Vizier hands integers and
    discrete values back as floats)."""
    from trainer.options import TrainingOptions

    out = {}
    for p in tuning.parameters:
        value = values[p.name]
        kind = TrainingOptions.model_fields[p.name].annotation
        out[p.name] = int(round(float(value))) if kind is int else \
            float(value) if kind is float else str(value)
    return out


def flag_value(value: Any) -> str:
    """A parameter's value as a command-line argument."""
    return repr(value) if isinstance(value, float) else str(value)


def trial_flags(parameters: dict[str, Any]) -> list[str]:
    """A trial's parameters as Vertex AI passes them, after the job's own arguments:
    `--learning_rate 0.003` (docs: "Create a hyperparameter tuning job", which shows a
    trial started as `python3 -m my_trainer --learning_rate learning-rate-in-this-trial`)."""
    return [item for name, value in parameters.items()
            for item in (f"--{name}", flag_value(value))]


def last_measurement(metric_file: str, tag: str) -> float | None:
    """The last value of `tag` in a cloudml-hypertune metrics file (None: none reported)."""
    try:
        lines = Path(metric_file).read_text().splitlines()
    except FileNotFoundError:
        return None
    values = [json.loads(line)[tag] for line in lines if tag in json.loads(line)]
    return float(values[-1]) if values else None


def parallel_slots(parallel_trials: int, processes_per_trial: int,
                   cores: Sequence[int]) -> list[list[int]]:
    """Disjoint core sets for the trials that run at once: as many as asked for and the
    cores allow (each trial's processes get at least a core each), at least one."""
    per_trial = max(1, processes_per_trial)
    slots = max(1, min(parallel_trials, len(cores) // per_trial))
    share = max(1, len(cores) // slots)
    ordered = sorted(cores)
    return [ordered[i * share:(i + 1) * share] or ordered for i in range(slots)]


def run_study(tuning: TuningOptions, run_trial: TrialRunner, work_dir: str, *,
              processes_per_trial: int, cores: Sequence[int] | None = None,
              log: Callable[[str], None] = print) -> list[Trial]:
    """Runs the study to its end.

    Args:
        tuning: The study.
        run_trial: Trains one trial (see `TrialRunner`).
        work_dir: Where each trial's job directory goes (`trial-<id>/`).
        processes_per_trial: Training processes of one trial (its chief and workers).
        cores: The cores the study may use (default: all this process may).
        log: Where progress lines go.

    Returns:
        Every trial, in the order they were suggested.

    Raises:
        StudyError: `max_failed_trials` trials failed, or none succeeded.
    """
    from vizier.service import clients
    from vizier.service import pyvizier as vz

    config = vz.StudyConfig.from_problem(problem_statement(tuning))
    config.algorithm = LOCAL_ALGORITHMS[tuning.algorithm]
    study = clients.Study.from_study_config(config, owner="gpu-pipeline",
                                            study_id=f"study-{uuid.uuid4().hex[:12]}")
    slots = parallel_slots(tuning.parallel_trials, processes_per_trial,
                           cores if cores is not None else sorted(os.sched_getaffinity(0)))
    log(f"tuning: {tuning.max_trials} trial(s) of {', '.join(p.name for p in tuning.parameters)}"
        f" by {tuning.metric} ({tuning.goal}), {len(slots)} at a time, Open Source Vizier "
        f"{config.algorithm}")
    trials: list[Trial] = []
    limit = tuning.max_failed_trials or tuning.max_trials
    free = list(range(len(slots)))
    exhausted = False
    with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
        running: dict[concurrent.futures.Future, tuple[Any, Trial, int, float]] = {}
        while True:
            failed = sum(t.state == "FAILED" for t in trials)
            while free and len(trials) < tuning.max_trials and failed < limit \
                    and not exhausted:
                suggested = study.suggest(count=1, client_id=f"slot-{free[0]}")
                if not suggested:  # a grid search that has tried every point
                    log("tuning: every point of the search space has been tried")
                    exhausted = True
                    break
                (suggestion,) = suggested
                slot = free.pop(0)
                trial = Trial(str(suggestion.id), typed(tuning, dict(suggestion.parameters)))
                trial.job_dir = os.path.join(work_dir, f"trial-{trial.trial_id}")
                trials.append(trial)
                log(f"tuning: trial {trial.trial_id} starts with "
                    + ", ".join(f"{k}={flag_value(v)}" for k, v in trial.parameters.items()))
                future = pool.submit(_run_one, run_trial, trial, tuning.metric, slots[slot])
                running[future] = (suggestion, trial, slot, time.monotonic())
            if not running:
                break
            done, _ = concurrent.futures.wait(running, return_when="FIRST_COMPLETED")
            for future in done:
                suggestion, trial, slot, started = running.pop(future)
                free.append(slot)
                trial.seconds = round(time.monotonic() - started, 1)
                trial.metric, trial.error = future.result()
                if trial.metric is None:
                    trial.state = "FAILED"
                    suggestion.complete(infeasible_reason=trial.error[:500] or "failed")
                    log(f"tuning: trial {trial.trial_id} failed: {trial.error}")
                else:
                    trial.state = "SUCCEEDED"
                    suggestion.complete(vz.Measurement({tuning.metric: trial.metric}))
                    log(f"tuning: trial {trial.trial_id} {tuning.metric} {trial.metric:.4f} "
                        f"in {trial.seconds:.0f} s")
    failed = sum(t.state == "FAILED" for t in trials)
    if failed >= limit or not any(t.state == "SUCCEEDED" for t in trials):
        raise StudyError(f"the study stopped: {failed} of {len(trials)} trial(s) failed "
                         f"(max_failed_trials {tuning.max_failed_trials or 'all'}); the first "
                         f"error: {next((t.error for t in trials if t.error), 'none')}")
    return trials


def _run_one(run_trial: TrialRunner, trial: Trial, metric: str,
             cores: list[int]) -> tuple[float | None, str]:
    """(final measurement, error) of one trial; its errors never escape."""
    metric_file = os.path.join(trial.job_dir, "hypertune", "output.metrics")
    args = ["--hypertune-metric", metric, *trial_flags(trial.parameters)]
    env = {METRIC_FILE_ENV: metric_file, TRIAL_ID_ENV: trial.trial_id}
    try:
        run_trial(trial.trial_id, trial.parameters, args, env, cores, trial.job_dir)
    except Exception as exc:  # noqa: BLE001 - a failed trial is a result, not a crash
        return None, first_line(exc)
    value = last_measurement(metric_file, metric)
    return (value, "") if value is not None else (None, f"reported no {metric}")


def best_trial(tuning: TuningOptions, trials: Sequence[Trial]) -> Trial:
    """The succeeded trial with the best final measurement (the first of equals)."""
    succeeded = [t for t in trials if t.state == "SUCCEEDED"]
    sign = 1 if tuning.goal == "MAXIMIZE" else -1
    return max(succeeded, key=lambda t: (sign * t.metric, -int(t.trial_id)))
