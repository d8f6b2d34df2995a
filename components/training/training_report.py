"""The training report: the trainer's curves and final metrics as KFP artifacts.

The trainer (chief) writes `metrics.json` and `training_report.json` (with the history)
into its job directory, locally or under the Vertex CustomJob's base output directory;
this stage publishes them, the same way for both targets: the figures per epoch on a page
with every replica's efficiency series merged (`components.training.efficiency`:
`efficiency.json` in the job directory and a section of the page), with the job's cost
and Cloud Monitoring's accelerator figures where the Vertex AI training step read them.
The charts are drawn once, in the run's report, with the metrics per class and the
decision: the export stage's (`components.export.run_report`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from components.capacity.cost import FILE as COST_FILE
from components.training import efficiency, job_utilization
from trainer.common.errors import StageError
from trainer.common.files import read_json
from trainer.run.history import METRICS_FILE, REPORT_FILE, load_evaluations


class TrainingReportError(StageError):
    """The training job directory holds no report (training did not complete)."""


def publish_training_report(job_dir: str, curves_path: str) -> dict[str, Any]:
    """Writes the curves page to `curves_path`; returns the metrics and a run summary.

    A sidecar evaluator may finish its last evaluation after the chief wrote its report,
    so its evaluations are read here, once training is over: the page shows their curve
    and the metrics gain `evaluator_loss` and `evaluator_accuracy` (its last ones).

    Raises:
        TrainingReportError: A report file is missing.
    """
    files = {name: os.path.join(job_dir, name)
             for name in (METRICS_FILE, REPORT_FILE)}
    missing = [n for n, p in files.items() if not os.path.isfile(p)]
    if missing:
        raise TrainingReportError(f"training job directory {job_dir!r} lacks "
                                  f"{', '.join(missing)}; did training complete?")
    with open(files[METRICS_FILE]) as f:
        metrics = json.load(f)
    with open(files[REPORT_FILE]) as f:
        report = json.load(f)
    evaluations = load_evaluations(job_dir)
    usage = efficiency.merge(job_dir, efficiency.expected_replicas(
        report.get("strategy", ""), report["num_workers"]), report.get("train_seconds", 0.0),
        model=report.get("model", ""), mixed_precision=report.get("mixed_precision", "off"),
        cache=bool(report.get("cache")))
    # Vertex AI's training step writes both.
    cost = read_json(os.path.join(job_dir, COST_FILE))
    if cost:
        usage["cost"] = cost
    monitored = job_utilization.load(job_dir)
    if monitored:
        usage["cloud_monitoring"] = monitored
    efficiency.write(job_dir, usage)
    os.makedirs(os.path.dirname(curves_path) or ".", exist_ok=True)
    with open(curves_path, "w") as f:
        f.write(curves_page(report["history"], evaluations, usage))
    if evaluations:
        last = evaluations[-1]
        metrics.update({f"evaluator_{k}": v for k, v in last.items() if k != "epoch"},
                       evaluator_epochs=float(len(evaluations)))
    return {"metrics": metrics, "epochs": report["epochs"],
            "num_workers": report["num_workers"], "strategy": report.get("strategy", ""),
            "parameter_servers": report.get("parameter_servers", 0),
            "evaluations": len(evaluations),
            "examples_per_second": report["examples_per_second"], "efficiency": usage}


def curves_page(history: list[dict[str, float]], evaluations: list[dict[str, float]],
                usage: dict[str, Any]) -> str:
    """The training report's page: the figures per epoch (the sidecar evaluator's last),
    then the efficiency section. Its charts are the run's report's
    (`components.export.run_report`), drawn once, by the export stage."""
    import html

    from components import charts

    keys = ("loss", "accuracy", "val_loss", "val_accuracy")
    rows = "".join(f"<tr><td>{int(h['epoch']) + 1}</td>" + "".join(
        f"<td>{h[k]:.4f}</td>" if k in h else "<td>-</td>" for k in keys) + "</tr>"
        for h in history)
    evaluator = ("<p>sidecar evaluator, last of {n} evaluation(s): " + ", ".join(
        f"{k} {v:.4f}" for k, v in evaluations[-1].items() if k != "epoch") + "</p>"
    ).format(n=len(evaluations)) if evaluations else ""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Training report</title>"
            f"<style>{charts.STYLE}</style></head><body><h1>Training report</h1>"
            "<p>The charts, with the metrics per class and the decision, are in the run's "
            "report (the export step's <code>report</code>).</p>"
            "<table><tr><th>epoch</th>" + "".join(f"<th>{html.escape(k)}</th>" for k in keys)
            + f"</tr>{rows}</table>{evaluator}" + efficiency.html(usage) + "</body></html>")
