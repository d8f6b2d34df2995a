"""A study on one machine: Open Source Vizier suggests, local clusters of the trainer try.

Open Source Vizier (`google-vizier`) is the open-source form of the service behind
Vertex AI Vizier. Its in-process service holds the study; each trial it suggests runs as
a local cluster of the trainer with the layout of the training run, its options given as
Vertex AI gives them (`--<option> <value>` after the others), and reports its metric as
on Vertex AI (cloudml-hypertune's metrics file, here one per trial). The last report is
the trial's final measurement. Trials run side by side on disjoint cores, as many as the
machine has cores for; a failed trial is recorded as infeasible and counts against
`max_failed_trials`. With `early_stopping`, a running trial that Vertex AI's median rule
finds worse than the completed ones is stopped (`median_rule`), and ends with its last
report.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from components.tuning.tuning_options import TuningOptions
from trainer.common.errors import StageError, first_line

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
        stopped: Why it was stopped early (`early_stopping`), or "".
    """

    trial_id: str
    parameters: dict[str, Any]
    state: str = "ACTIVE"
    metric: float | None = None
    seconds: float = 0.0
    job_dir: str = ""
    error: str = ""
    stopped: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Runs one trial: (trial id, parameters, extra trainer args, environment, cores, job dir,
#: stop) -> None, raising on failure; once `stop` is set, it ends the trial soon.
TrialRunner = Callable[[str, dict[str, Any], list[str], dict[str, str], list[int], str,
                        threading.Event], None]
#: Seconds between looks at running trials' reports when stopping early.
POLL_SECONDS = 1.0


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
    from trainer.run.training_options import TrainingOptions

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


def measurements(metric_file: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of each report of `tag` in a cloudml-hypertune metrics file, which
    its writer rewrites whole at every report: a line cut short by a read during a write
    is left out (it is read whole next time)."""
    try:
        lines = Path(metric_file).read_text().splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        try:
            report = json.loads(line)
            found.append((int(report.get("global_step", 0)), float(report[tag])))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def last_measurement(metric_file: str, tag: str) -> float | None:
    """The last value of `tag` in a cloudml-hypertune metrics file (None: none reported)."""
    found = measurements(metric_file, tag)
    return found[-1][1] if found else None


def final_measurement(metric_file: str, tuning: TuningOptions) -> float | None:
    """A trial's measurement as the study selects it (`tuning.measurement`): its last
    report, or its best by the study's goal, as Vertex AI's LAST_MEASUREMENT and
    BEST_MEASUREMENT do (None: none reported)."""
    values = [value for _, value in measurements(metric_file, tuning.metric)]
    if not values:
        return None
    if tuning.measurement == "last":
        return values[-1]
    return max(values) if tuning.goal == "MAXIMIZE" else min(values)


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
    slots = parallel_slots(tuning.parallel_trials, processes_per_trial,
                           cores if cores is not None else sorted(os.sched_getaffinity(0)))
    scheduler = _Scheduler(tuning, run_trial, work_dir, slots, log)
    trials = scheduler.run()
    failed = sum(t.state == "FAILED" for t in trials)
    if failed >= scheduler.failure_limit or not any(t.state == "SUCCEEDED" for t in trials):
        raise StudyError(f"the study stopped: {failed} of {len(trials)} trial(s) failed "
                         f"(max_failed_trials {tuning.max_failed_trials or 'all'}); the first "
                         f"error: {next((t.error for t in trials if t.error), 'none')}")
    return trials


@dataclasses.dataclass
class _Running:
    """A trial under way: Vizier's suggestion, its slot of cores, its stop request."""

    suggestion: Any
    trial: Trial
    slot: int
    started: float
    stop: threading.Event


class _Scheduler:
    """Asks Open Source Vizier for trials while slots are free and the study allows, runs
    them side by side, reports each outcome, and (`early_stopping`) stops running trials
    the median rule finds worse."""

    def __init__(self, tuning: TuningOptions, run_trial: TrialRunner, work_dir: str,
                 slots: list[list[int]], log: Callable[[str], None]):
        from vizier.service import clients
        from vizier.service import pyvizier as vz

        config = vz.StudyConfig.from_problem(problem_statement(tuning))
        config.algorithm = LOCAL_ALGORITHMS[tuning.algorithm]
        self.study = clients.Study.from_study_config(
            config, owner="gpu-pipeline", study_id=f"study-{uuid.uuid4().hex[:12]}")
        self.tuning, self.run_trial, self.work_dir, self.slots, self.log = \
            tuning, run_trial, work_dir, slots, log
        self.failure_limit = tuning.max_failed_trials or tuning.max_trials
        self.trials: list[Trial] = []
        self.curves: dict[str, list[tuple[int, float]]] = {}  # completed trials' reports
        self.running: dict[concurrent.futures.Future, _Running] = {}
        self.free = list(range(len(slots)))
        self.exhausted = False
        log(f"tuning: {tuning.max_trials} trial(s) of "
            f"{', '.join(p.name for p in tuning.parameters)} by {tuning.metric} "
            f"({tuning.goal}), {len(slots)} at a time, Open Source Vizier {config.algorithm}"
            + (", median early stopping" if tuning.early_stopping else ""))

    def run(self) -> list[Trial]:
        poll = POLL_SECONDS if self.tuning.early_stopping else None
        with concurrent.futures.ThreadPoolExecutor(len(self.slots)) as pool:
            while True:
                self._start(pool)
                if not self.running:
                    return self.trials
                done, _ = concurrent.futures.wait(self.running, timeout=poll,
                                                  return_when="FIRST_COMPLETED")
                for future in done:
                    self._finish(future)
                if self.tuning.early_stopping:
                    self._stop_worse()

    def _start(self, pool: concurrent.futures.Executor) -> None:
        """Starts suggested trials in the free slots, as far as the study allows."""
        failed = sum(t.state == "FAILED" for t in self.trials)
        while self.free and len(self.trials) < self.tuning.max_trials and \
                failed < self.failure_limit and not self.exhausted:
            suggested = self.study.suggest(count=1, client_id=f"slot-{self.free[0]}")
            if not suggested:  # a grid search that has tried every point
                self.log("tuning: every point of the search space has been tried")
                self.exhausted = True
                return
            (suggestion,) = suggested
            slot = self.free.pop(0)
            trial = Trial(str(suggestion.id), typed(self.tuning, dict(suggestion.parameters)))
            trial.job_dir = os.path.join(self.work_dir, f"trial-{trial.trial_id}")
            self.trials.append(trial)
            self.log(f"tuning: trial {trial.trial_id} starts with " + ", ".join(
                f"{k}={flag_value(v)}" for k, v in trial.parameters.items()))
            stop = threading.Event()
            future = pool.submit(_run_one, self.run_trial, trial, self.tuning,
                                 self.slots[slot], stop)
            self.running[future] = _Running(suggestion, trial, slot, time.monotonic(), stop)

    def _finish(self, future: concurrent.futures.Future) -> None:
        """Records a trial's outcome, with Vizier and in the trial."""
        from vizier.service import pyvizier as vz

        run = self.running.pop(future)
        self.free.append(run.slot)
        trial = run.trial
        trial.seconds = round(time.monotonic() - run.started, 1)
        trial.metric, trial.error = future.result()
        if trial.metric is None:
            trial.state = "FAILED"
            run.suggestion.complete(infeasible_reason=trial.error[:500] or "failed")
            self.log(f"tuning: trial {trial.trial_id} failed: {trial.error}")
            return
        trial.state = "SUCCEEDED"
        self.curves[trial.trial_id] = measurements(_metric_file(trial), self.tuning.metric)
        run.suggestion.complete(vz.Measurement({self.tuning.metric: trial.metric}))
        self.log(f"tuning: trial {trial.trial_id} {self.tuning.metric} {trial.metric:.4f} "
                 f"in {trial.seconds:.0f} s" + (", stopped early" if trial.stopped else ""))

    def _stop_worse(self) -> None:
        """Asks the running trials the median rule finds worse to stop."""
        for run in self.running.values():
            if run.stop.is_set():
                continue
            reason = median_rule(measurements(_metric_file(run.trial), self.tuning.metric),
                                 list(self.curves.values()), self.tuning.goal)
            if reason:
                run.trial.stopped = reason
                self.log(f"tuning: trial {run.trial.trial_id} stopped early: {reason}")
                run.stop.set()


def median_rule(curve: Sequence[tuple[int, float]],
                completed: Sequence[Sequence[tuple[int, float]]], goal: str) -> str:
    """Why a running trial should stop under Vertex AI's median automated stopping rule,
    or "" (it goes on).

    The rule (Vertex AI API reference, "StudySpec.MedianAutomatedStoppingSpec"): stop a
    pending trial if its best objective value is strictly worse than the median
    "performance" of all completed trials up to the trial's last measurement, where
    performance is the running average of a trial's reported values. Steps are epochs.

    Args:
        curve: The running trial's reports so far, (epoch, value).
        completed: Each completed trial's reports.
        goal: MAXIMIZE or MINIMIZE.
    """
    if not curve:
        return ""
    step = curve[-1][0]
    sign = 1.0 if goal == "MAXIMIZE" else -1.0
    performances = []
    for reports in completed:
        values = [value for at, value in reports if at <= step]
        if values:
            performances.append(sign * sum(values) / len(values))
    if not performances:
        return ""
    best, median = max(sign * value for _, value in curve), statistics.median(performances)
    if best >= median:
        return ""
    return (f"at epoch {step} its best {'' if sign > 0 else 'lowest '}value "
            f"{sign * best:.4f} is worse than the median {sign * median:.4f} of "
            f"{len(performances)} completed trial(s) up to that epoch")


def _metric_file(trial: Trial) -> str:
    return os.path.join(trial.job_dir, "hypertune", "output.metrics")


def _run_one(run_trial: TrialRunner, trial: Trial, tuning: TuningOptions, cores: list[int],
             stop: threading.Event) -> tuple[float | None, str]:
    """(final measurement, error) of one trial; its errors never escape. A trial stopped
    early ends with its reports so far."""
    metric, metric_file = tuning.metric, _metric_file(trial)
    args = ["--hypertune-metric", metric, *trial_flags(trial.parameters)]
    env = {METRIC_FILE_ENV: metric_file, TRIAL_ID_ENV: trial.trial_id}
    try:
        run_trial(trial.trial_id, trial.parameters, args, env, cores, trial.job_dir, stop)
    except Exception as exc:  # noqa: BLE001 - a failed trial is a result, not a crash
        if not stop.is_set():
            return None, first_line(exc)
    value = final_measurement(metric_file, tuning)
    return (value, "") if value is not None else (None, f"reported no {metric}")


def best_trial(tuning: TuningOptions, trials: Sequence[Trial]) -> Trial:
    """The succeeded trial with the best final measurement (the first of equals)."""
    succeeded = [t for t in trials if t.state == "SUCCEEDED"]
    sign = 1 if tuning.goal == "MAXIMIZE" else -1
    return max(succeeded, key=lambda t: (sign * t.metric, -int(t.trial_id)))
