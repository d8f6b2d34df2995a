"""Training reports: the per-epoch history (kept across restarts), metrics and curves."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.common import files

HISTORY_FILE = "history.json"
METRICS_FILE = "metrics.json"
CURVES_FILE = "training_curves.html"
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


def _polyline(points: Sequence[tuple[float, float]], width: int, height: int, pad: int,
              x_max: float, y_max: float) -> str:
    coords = []
    for x, y in points:
        px = pad + (width - 2 * pad) * (x / x_max if x_max else 0)
        py = height - pad - (height - 2 * pad) * (y / y_max if y_max else 0)
        coords.append(f"{px:.1f},{py:.1f}")
    return " ".join(coords)


def _chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]],
           y_max: float | None = None) -> str:
    width, height, pad = 480, 260, 36
    colours = ["#1a73e8", "#e8710a", "#188038", "#d93025"]
    x_max = max((x for pts in series.values() for x, _ in pts), default=1) or 1
    y_top = y_max or max((y for pts in series.values() for _, y in pts), default=1) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">',
             f'<text x="{pad}" y="20" font-size="14">{html.escape(title)}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
             'stroke="#999"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>',
             f'<text x="{width - pad}" y="{height - 10}" font-size="11" text-anchor="end">'
             f'epoch {x_max:g}</text>',
             f'<text x="4" y="{pad + 4}" font-size="11">{y_top:.3g}</text>']
    for i, (name, points) in enumerate(series.items()):
        colour = colours[i % len(colours)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                     f'{_polyline(points, width, height, pad, x_max, y_top)}"/>')
        parts.append(f'<text x="{width - pad}" y="{pad + 14 * i}" font-size="11" '
                     f'text-anchor="end" fill="{colour}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def curves_html(history: Sequence[Mapping[str, float]], title: str = "Training curves",
                evaluations: Sequence[Mapping[str, float]] = ()) -> str:
    """A self-contained HTML page (inline SVG) of loss and accuracy per epoch, with the
    sidecar evaluator's curve when there was one.

    KFP and Vertex AI Pipelines show HTML artifacts in their UI; no plotting library or
    network access is needed to render it.
    """
    def series(*keys: str) -> dict[str, list[tuple[float, float]]]:
        found = {k: [(h["epoch"] + 1, h[k]) for h in history if k in h] for k in keys
                 if any(k in h for h in history)}
        for key in keys:  # the evaluator's loss and accuracy on the validation split
            if not key.startswith("val_") and any(key in e for e in evaluations):
                found[f"evaluator {key}"] = [(e["epoch"] + 1, e[key]) for e in evaluations
                                             if key in e]
        return found

    def cell(value: float) -> str:
        return f"<td>{value:.4f}</td>"

    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    rows = "".join("<tr>" + "".join(cell(h.get(k, float("nan"))) for k in keys)
                   + f"<td>{int(h['epoch']) + 1}</td></tr>" for h in history)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title></head><body style='font-family:sans-serif'>"
            f"<h2>{html.escape(title)}</h2>"
            + _chart("loss", series("loss", "val_loss"))
            + _chart("accuracy", series("accuracy", "val_accuracy"), y_max=1.0)
            + "<table border='1' cellpadding='4' style='border-collapse:collapse'>"
            "<tr><th>loss</th><th>accuracy</th><th>val_loss</th><th>val_accuracy</th>"
            f"<th>epoch</th></tr>{rows}</table></body></html>")


def write_reports(job_dir: str, report: Mapping[str, Any]) -> None:
    """Writes metrics.json, training_curves.html and, last, training_report.json into
    job_dir (its existence tells the other replicas that training is done)."""
    history = load_history(job_dir)
    files.write_json(os.path.join(job_dir, METRICS_FILE), final_metrics(history))
    files.write_text(os.path.join(job_dir, CURVES_FILE),
                     curves_html(history, evaluations=load_evaluations(job_dir)))
    files.write_json(os.path.join(job_dir, REPORT_FILE), {**report, "history": history})
