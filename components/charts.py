"""The reports' charts, drawn with matplotlib as inline SVG.

The training report and the run's report are single HTML files a person opens from a
run's artifacts (locally, or in the Vertex AI console's HTML viewer), so each chart is
embedded as SVG: no script, no file beside the page, nothing fetched when it is opened
(a page inside a perimeter reaches no CDN). matplotlib's object API is used without pyplot:
no global figure state, no GUI backend chosen at import.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

#: One colour per series, in order (matplotlib's default cycle, colour-blind aware).
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def _figure(width: float = 7.2, height: float = 3.2) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def svg(figure: Any) -> str:
    """The figure as an `<svg>` element for an HTML page (no XML prolog, text kept as
    text so the page stays searchable and small)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "gpu-pipeline"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def curves(history: Sequence[Mapping[str, float]],
           evaluations: Sequence[Mapping[str, float]] = ()) -> str:
    """Loss and accuracy per epoch (training, validation, and the sidecar evaluator's),
    side by side."""
    figure = _figure(height=3.0)
    loss, accuracy = figure.subplots(1, 2)
    epochs = [i + 1 for i in range(len(history))]
    for axes, metric in ((loss, "loss"), (accuracy, "accuracy")):
        for colour, (label, rows, key) in zip(COLOURS, (
                ("training", history, metric), ("validation", history, f"val_{metric}"),
                ("sidecar evaluator", evaluations, metric)), strict=False):
            # History and evaluations count epochs from 0; the axis from 1.
            points = [(r.get("epoch", i) + 1, r[key]) for i, r in enumerate(rows)
                      if r.get(key) is not None]
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", markersize=3,
                          color=colour, label=label)
        axes.set_title(f"{metric.capitalize()} per epoch")
        axes.set_xlabel("epoch")
        axes.set_ylabel(metric + (" (fraction correct)" if metric == "accuracy" else ""))
        if epochs:
            axes.set_xlim(0.5, max(len(epochs), 1) + 0.5)
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend(fontsize="small")
    return svg(figure)


def use_over_time(replicas: Mapping[str, Mapping[str, Any]]) -> str:
    """Each replica's CPU (solid) and GPU (dashed) use, in percent, over the training
    time; `replicas` maps a name to its efficiency figures (`timeline`: rows of
    `(seconds, cpu %, gpu % or None)`)."""
    figure = _figure()
    axes = figure.subplots()
    for colour, (name, figures) in zip(COLOURS * 8, sorted(replicas.items()), strict=False):
        timeline = figures.get("timeline") or []
        for column, style, what in ((1, "-", "CPU"), (2, "--", "GPU")):
            points = [(row[0], row[column]) for row in timeline if row[column] is not None]
            if points:
                axes.plot(*zip(*points, strict=True), linestyle=style, linewidth=2,
                          alpha=0.75, color=colour, label=f"{name} {what}")
    axes.set_title("CPU (solid) and GPU (dashed) use per replica")
    axes.set_xlabel("seconds since the first sample")
    axes.set_ylabel("use (%)")
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small", loc="lower right")
    else:  # a job too short for the sampler's first sample
        axes.text(0.5, 0.5, "no CPU or GPU samples were taken", ha="center",
                  transform=axes.transAxes)
    return svg(figure)


def confusion(classes: Sequence[str], matrix: Sequence[Sequence[int]], split: str) -> str:
    """The confusion matrix as a heat map, each cell with its count (rows: the true class,
    columns: the predicted one)."""
    size = max(3.0, 0.6 * len(classes) + 1.8)
    figure = _figure(width=size + 1.2, height=size)
    axes = figure.subplots()
    image = axes.imshow(matrix, cmap="Blues")
    most = max((max(row) for row in matrix), default=0)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            axes.text(j, i, str(count), ha="center", va="center",
                      color="white" if most and count > most / 2 else "black")
    axes.set_xticks(range(len(classes)), labels=classes, rotation=45, ha="right")
    axes.set_yticks(range(len(classes)), labels=classes)
    axes.set_xlabel("predicted class")
    axes.set_ylabel("true class")
    axes.set_title(f"Confusion matrix ({split} split)")
    figure.colorbar(image, ax=axes, label="images")
    return svg(figure)


#: The reports' stylesheet (inline: a page fetches nothing).
STYLE = ("body{font-family:sans-serif;max-width:60em;margin:1em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}"
         "th{background:#f3f3f3}dt{font-weight:bold;float:left;clear:left;width:11em}"
         "dd{margin-left:12em}.when{color:#666}svg{max-width:100%;height:auto}")
