"""The run's report: the one page a person opens first after a run.

Written by the export stage, which is the first to know everything it holds: the run,
the data (the dataset's manifest), the model and how it was trained (the trainer's
report), its metrics per class and the held-out split's confusion matrix (measured
through its serving signature, `trainer.serving.measure`), the champion/challenger
decision and the serving check, the cost, and every replica's efficiency. A local run
copies it to `training-report.html` in the run's directory; on Vertex AI it is the export
step's `report` HTML artifact, which the console shows.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Mapping, Sequence
from typing import Any


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _facts(pairs: Sequence[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>"
                            for k, v in pairs) + "</dl>"


def per_class(classes: Sequence[str], matrix: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """Each class's images, precision, recall and F1 from a confusion matrix (rows: the
    true class); a ratio with nothing to divide is None."""
    rows = []
    for i, name in enumerate(classes):
        true_positive = matrix[i][i]
        actual, predicted = sum(matrix[i]), sum(row[i] for row in matrix)
        precision = true_positive / predicted if predicted else None
        recall = true_positive / actual if actual else None
        f1 = (2 * precision * recall / (precision + recall)
              if precision and recall else (0.0 if actual else None))
        rows.append({"class": name, "images": actual, "precision": precision,
                     "recall": recall, "f1": f1})
    return rows


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _metrics_section(metrics: Mapping[str, Any], confusion: Mapping[str, Any] | None,
                     manifest: Mapping[str, Any], drawn: str) -> str:
    rows = [("validation", f"{metrics['accuracy']:.4f}", metrics["examples"])]
    if "test_accuracy" in metrics:
        rows.append(("test", f"{metrics['test_accuracy']:.4f}", metrics["test_examples"]))
    out = ["<h2>Metrics</h2>", _table(("split", "accuracy", "images"), rows)]
    if confusion is None:
        out.append("<p>No confusion matrix: the model was measured before this report "
                   "kept one.</p>")
        return "".join(out)
    split = confusion["split"]
    splits = manifest.get("splits", {})
    out.append(f"<h3>Per class, on the {html.escape(split)} split</h3>")
    out.append(_table(
        ("class", "training images", f"{split} images", "precision", "recall", "F1"),
        [(r["class"], splits.get("train", {}).get("per_class", {}).get(r["class"], "-"),
          r["images"], _ratio(r["precision"]), _ratio(r["recall"]), _ratio(r["f1"]))
         for r in per_class(confusion["classes"], confusion["matrix"])]))
    out.append(drawn)
    return "".join(out)


def _decision_section(decision: Mapping[str, Any], champion: Mapping[str, Any] | None,
                      registered: str | None) -> str:
    facts = [("decision", decision["reason"]),
             ("compared on", decision.get("metric", "-")),
             ("champion", "none compared" if champion is None or decision.get("champion")
              is None else f"{decision.get('metric', 'accuracy')} {decision['champion']:.4f}"),
             ("registered", f"version {registered}" if registered else
              ("yes" if decision.get("register") else "no"))]
    check = decision.get("serving_check")
    if check:
        from components.serving.serving_check import ServingCheck

        facts.append(("serving check", ServingCheck(**check).describe()))
    return "<h2>Champion/challenger</h2>" + _facts(facts)


def _data_section(manifest: Mapping[str, Any]) -> str:
    splits = manifest.get("splits", {})
    size = manifest.get("image_size") or []
    facts = [("source", manifest.get("source", "-")),
             ("classes", ", ".join(manifest.get("classes", []))),
             ("images", f"{manifest.get('examples', '-')} ("
              + ", ".join(f"{name} {s['count']}" for name, s in splits.items()) + ")"),
             ("image size", "x".join(map(str, size)) + f" {manifest.get('image_format', '')}"),
             ("skipped", f"{len(manifest.get('skipped', []))} file(s) "
              f"({manifest.get('bad_fraction', 0.0):.1%} could not be decoded)")]
    return "<h2>Data</h2>" + _facts(facts)


def _model_section(trained: Mapping[str, Any], training: Mapping[str, Any]) -> str:
    plan = trained.get("training_plan") or {}
    phases = "; ".join(f"{p['name']}: {p['epochs']} epoch(s) at learning rate "
                       f"{p['learning_rate']}" for p in trained.get("phases", []))
    facts = [("model", f"{trained.get('model', '-')} (weights: "
              f"{training.get('weights') or 'none, trained from scratch'})"),
             ("epochs", f"{trained.get('epochs_run', trained.get('epochs', '-'))}"
              + (f" ({phases})" if phases else "")),
             ("batch", f"{trained.get('global_batch_size', '-')} global, "
              f"{trained.get('per_replica_batch_size', '-')} per replica"),
             ("cluster", f"{trained.get('strategy', '-')} on {trained.get('num_workers', '-')} "
              f"training machine(s), {trained.get('parameter_servers', 0)} parameter "
              f"server(s)" + (f", {plan['gpus_per_machine']} x {plan['accelerator']} each"
                              if plan.get("accelerator") else ", no GPU")),
             ("precision and XLA", f"mixed precision {trained.get('mixed_precision', 'off')}, "
              f"XLA {'on' if trained.get('xla') else 'off'}"),
             *([("the plan's evidence", _evidence(plan))] if plan.get("accelerator") else []),
             ("training time", f"{trained.get('train_seconds', 0.0):.1f} s, "
              f"{trained.get('examples_per_second', 0.0):.0f} training images/s end to "
              "end (warm-up and validation included)")]
    return "<h2>Model and training</h2>" + _facts(facts)


def _evidence(plan: Mapping[str, Any]) -> str:
    """Each GPU choice of the training plan and the results files it was measured in."""
    measured = plan.get("measured") or {}
    values = {"mixed_precision": plan.get("mixed_precision"), "xla": plan.get("xla"),
              "nvidia_environment": plan.get("nvidia_environment"),
              "keep_nhwc": plan.get("keep_nhwc"), "prefetch_to_gpu": plan.get("prefetch_to_gpu")}
    said = {True: "on", False: "off", None: "off"}
    return "; ".join(f"{name} {said.get(value, value)} ("
                     + (", ".join(measured[name]) if measured.get(name) else "not measured")
                     + ")" for name, value in values.items())


def _cost_section(efficiency: Mapping[str, Any] | None) -> str:
    cost = (efficiency or {}).get("cost")
    if cost:
        from components.capacity.cost import line

        rows = [(job["job"].rsplit("/", 1)[-1], item["pool"], item["replicas"],
                 item["machine"] + (f" + {item['gpus_per_machine']} x {item['accelerator']}"
                                    if item["accelerator"] else ""),
                 f"{item['usd_per_hour']:.2f}", f"{item['hours']:.3f}", f"{item['usd']:.2f}")
                for job in cost.get("jobs", []) for item in job.get("pools", [])]
        return ("<h2>Cost</h2><p>" + html.escape(line(cost)) + "</p>"
                + (_table(("job", "pool", "replicas", "each", "USD an hour", "hours", "USD"),
                          rows) if rows else ""))
    cluster = (efficiency or {}).get("cluster") or {}
    return ("<h2>Cost</h2><p>No cloud bill: trained on this machine"
            + (f" ({cluster['gpu_hours']:.4f} GPU-hours)" if cluster.get("gpu_hours") else "")
            + ".</p>")


def draw(*, trained: Mapping[str, Any], confusion: Mapping[str, Any] | None,
         efficiency: Mapping[str, Any] | None,
         evaluations: Sequence[Mapping[str, float]] = ()) -> dict[str, str]:
    """The report's charts (`components.charts`), apart from the page: the export stage
    draws them while the serving check's model server starts."""
    from components import charts

    return {"curves": charts.curves(trained.get("history", []), evaluations),
            "confusion": charts.confusion(confusion["classes"], confusion["matrix"],
                                          confusion["split"]) if confusion else "",
            "use": charts.use_over_time(efficiency["replicas"])
            if efficiency and efficiency.get("replicas") else ""}


def page(*, run: str, model_name: str, manifest: Mapping[str, Any],
         trained: Mapping[str, Any], training: Mapping[str, Any],
         metrics: Mapping[str, Any], confusion: Mapping[str, Any] | None,
         decision: Mapping[str, Any], champion: Mapping[str, Any] | None,
         registered: str | None, efficiency: Mapping[str, Any] | None,
         evaluations: Sequence[Mapping[str, float]] = (),
         drawn: Mapping[str, str] | None = None) -> str:
    """The run's report as one HTML page.

    Args:
        run: The pipeline run's name.
        model_name: The model's display name.
        manifest: The dataset's manifest.
        trained: The trainer's report (`training_report.json`: model, plan, history).
        training: The training options.
        metrics: The new model's metrics (`trainer.serving.measure.evaluate`).
        confusion: Its held-out split's confusion matrix, or None.
        decision: The champion/challenger decision (`Decision.to_dict()`).
        champion: The champion's metrics, or None.
        registered: The local registry's new version, or None.
        efficiency: The merged efficiency figures (with `cost` on Vertex AI), or None.
        evaluations: The sidecar evaluator's evaluations.
        drawn: The charts (`draw`), when drawn already.
    """
    from components import charts
    from components.training import efficiency as usage

    drawn = drawn or draw(trained=trained, confusion=confusion, efficiency=efficiency,
                          evaluations=evaluations)
    made = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    headline = (f"{model_name}: {metrics.get('test_accuracy', metrics['accuracy']):.4f} "
                f"{'test' if 'test_accuracy' in metrics else 'validation'} accuracy; "
                f"{decision['reason']}")
    sections = [
        f"<h1>Run {html.escape(run)}</h1><p>{html.escape(headline)}</p>"
        f"<p class='when'>report written {made}</p>",
        _decision_section(decision, champion, registered),
        _metrics_section(metrics, confusion, manifest, drawn["confusion"]),
        "<h2>Training curves</h2>" + drawn["curves"],
        _data_section(manifest),
        _model_section(trained, training),
        _cost_section(efficiency),
        usage.html(efficiency, drawn["use"]) if efficiency and efficiency.get("replicas")
        else "",
    ]
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>Run {html.escape(run)}</title><style>{charts.STYLE}</style></head><body>"
            + "".join(sections) + "</body></html>")
