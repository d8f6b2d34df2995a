"""Stage 4's study on one machine: the trials as local clusters, then the best parameters
for the final training (which trains once more with them: its model is the one the
gate judges, trained and exported like any other)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from components.training.local_cluster import run_local_cluster
from components.tuning.local_study import Trial, run_study
from components.tuning.trials import STUDY_FILE, study_record, trials_table
from components.tuning.tuning_options import TuningOptions
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import TrainingPlan
from trainer.common.files import write_json, write_text
from trainer.common.schema import to_flags
from trainer.run.training_options import TrainingOptions


class _Prefixed:
    """Output lines of a trial's processes, each marked with the trial."""

    def __init__(self, prefix: str):
        self.prefix, self.partial = prefix, ""

    def write(self, text: str) -> None:
        self.partial += text
        while "\n" in self.partial:
            line, self.partial = self.partial.split("\n", 1)
            sys.stdout.write(f"{self.prefix}{line}\n")

    def flush(self) -> None:
        sys.stdout.flush()


def tune_on_local_workers(dataset_dir: str, training: TrainingOptions, tuning: TuningOptions,
                          layout: Layout, study_dir: str,
                          log: Callable[[str], None] = print,
                          plan: TrainingPlan | None = None) -> tuple[dict[str, Any], dict]:
    """Runs the study; returns (the training options with the best parameters, the study
    record), and writes `study.json` and `trials.md` under `study_dir`. Every trial's
    cluster applies `plan`, the run's training plan (when given).

    Without parameters there is no study: the options come back unchanged, with an
    empty record.
    """
    options = training.model_dump()
    if not tuning.enabled:
        log("tuning: no parameters to search (config section tuning); training as given")
        return options, {}
    base = ["--data-dir", dataset_dir, *to_flags(training)]

    def run_trial(trial_id: str, parameters: dict, args: list[str], env: dict[str, str],
                  cores: list[int], job_dir: str, stop: threading.Event) -> None:
        os.makedirs(job_dir, exist_ok=True)
        run_local_cluster(layout, ["--job-dir", job_dir, *base, *args], strategy=training.strategy,
                          out=_Prefixed(f"[trial {trial_id}] "), cores=cores, environ=env,
                          stop=stop, plan=plan)

    trials: list[Trial] = run_study(tuning, run_trial, study_dir,
                                    processes_per_trial=layout.training_machines, log=log)
    record = study_record(tuning, trials)
    write_json(os.path.join(study_dir, STUDY_FILE), record)
    write_text(os.path.join(study_dir, "trials.md"), trials_table(record))
    log(f"tuning: best trial {record['best_trial']} ({tuning.metric} "
        f"{record['best_metric']:.4f}): " + ", ".join(
            f"{k}={v}" for k, v in record["best_parameters"].items()))
    return {**options, **record["best_parameters"]}, record
