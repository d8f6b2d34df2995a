"""The task and output names that code outside the components reads: the local run reads
its task directories by them, its end names the artifacts a user opens, and the tests read
the runs' tasks by them (TFX keeps such keys in one module likewise).

A task is named after its component's function, dashed (`export_model` -> `export-model`);
an output after its parameter. `tests/components/test_ops_names.py` holds every task name
here to its component's own, so the two cannot drift apart.
"""

from __future__ import annotations

# Tasks.
PREPARE_DATASET = "prepare-dataset"
BUILD_IMAGES = "build-images"
TUNE_LOCALLY = "tune-on-local-workers"
TRAIN_LOCALLY = "train-on-local-workers"
TRAIN_ON_VERTEX = "train-on-vertex-ai"
REPORT_TRAINING = "report-training"
EXPORT_MODEL = "export-model"
DECIDE_REGISTRATION = "decide-registration"
SUMMARIZE_RUN = "summarize-run"

# Outputs.
DATASET = "dataset"
TRAINING_JOB = "training_job"
CURVES = "curves"
#: The export stage's report of the run (`components.export.run_report`).
RUN_REPORT = "report"
EXPORTED_MODEL = "exported_model"
SUMMARY = "summary"


def artifact(task: str, output: str) -> str:
    """An artifact's name in a local run's result (`task/output`, its directory there)."""
    return f"{task}/{output}"
