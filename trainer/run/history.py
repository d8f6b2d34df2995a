"""Training reports: the per-epoch history (kept across restarts) and metrics (the
pipeline draws the curves: `components.training.training_report`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.common import files

HISTORY_FILE = "history.json"
METRICS_FILE = "metrics.json"
REPORT_FILE = "training_report.json"
#: Written by the sidecar evaluator: one entry per evaluated checkpoint.
EVALUATIONS_FILE = "evaluations.json"


def _read(job_dir: str, name: str) -> list[dict[str, float]]:
    path = os.path.join(job_dir, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def load_history(job_dir: str) -> list[dict[str, float]]:
    """The per-epoch logs written so far (empty for a new job)."""
    return _read(job_dir, HISTORY_FILE)


def _write(job_dir: str, name: str, entries: list[dict[str, float]]) -> None:
    # Written beside and replaced (a file, which Cloud Storage FUSE can replace), so a
    # crash never leaves a torn file.
    os.makedirs(job_dir, exist_ok=True)
    files.write_json(os.path.join(job_dir, name), entries, indent=1)


def record_epoch(job_dir: str, epoch: int, logs: Mapping[str, float]) -> list[dict[str, float]]:
    """Stores one epoch's logs; a repeated epoch (after a restart) replaces the old one."""
    history = [h for h in load_history(job_dir) if h["epoch"] < epoch]
    history.append({"epoch": epoch, **{k: float(v) for k, v in logs.items()}})
    _write(job_dir, HISTORY_FILE, history)
    return history


def load_evaluations(job_dir: str) -> list[dict[str, float]]:
    """The sidecar evaluator's evaluations so far (empty without an evaluator)."""
    return _read(job_dir, EVALUATIONS_FILE)


def record_evaluation(job_dir: str, epoch: int,
                      logs: Mapping[str, float]) -> list[dict[str, float]]:
    """Stores the sidecar evaluator's metrics of one epoch's checkpoint."""
    entries = [e for e in load_evaluations(job_dir) if e["epoch"] != epoch]
    entries.append({"epoch": epoch, **{k: float(v) for k, v in logs.items()}})
    entries.sort(key=lambda e: e["epoch"])
    _write(job_dir, EVALUATIONS_FILE, entries)
    return entries


def final_metrics(history: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The last epoch's metrics, for KFP's Metrics artifact."""
    if not history:
        return {}
    last = dict(history[-1])
    last["epochs_completed"] = float(last.pop("epoch") + 1)
    return last


def write_reports(job_dir: str, report: Mapping[str, Any]) -> None:
    """Writes metrics.json and, last, training_report.json into job_dir (its existence
    tells the other replicas that training is done)."""
    history = load_history(job_dir)
    files.write_json(os.path.join(job_dir, METRICS_FILE), final_metrics(history))
    files.write_json(os.path.join(job_dir, REPORT_FILE), {**report, "history": history})
