"""Stage 2's data checks, after the dataset is prepared and before anything trains: the
data's leakage and its drift from the champion's (`drift`), a line each, a report, and
under `dataset.drift: fail` the run stopped.

A step of its own, never served from KFP's cache: the prepared dataset may come from the
cache, while the champion it is compared with changes from run to run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from components.dataset.data_statistics import data_summary
from components.dataset.dataset_options import DatasetOptions
from components.dataset.drift import DataDriftError, Finding, distances, drift, leakage
from components.export.model_files import DATA_STATISTICS
from trainer.common import files
from trainer.common.contract import load_manifest


def champion_data(champion_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The summary of the data the champion was trained on, or None when its model
    predates it (or it cannot be read)."""
    path = Path(champion_dir) / DATA_STATISTICS
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_data(dataset_dir: str | os.PathLike, options: DatasetOptions,
               champion_dir: str | os.PathLike | None, *,
               report_path: str | os.PathLike | None = None,
               log: Callable[[str], None] = print) -> list[Finding]:
    """Checks the prepared data, and compares it with the champion's.

    Args:
        dataset_dir: The prepared dataset (its manifest holds the statistics).
        options: The dataset options (`drift`, `drift_share`, `drift_sizes`).
        champion_dir: The champion's SavedModel directory, or None without a champion.
        report_path: Where the checks' Markdown goes.
        log: Where each finding's line goes.

    Returns:
        What the checks found.

    Raises:
        DataDriftError: `dataset.drift` is `fail` and a finding warns.
    """
    manifest = load_manifest(dataset_dir)
    summary = data_summary(manifest)
    champion = champion_data(champion_dir) if champion_dir else None
    found = leakage(summary["statistics"], champion)
    if champion is not None:
        found += drift(summary, champion, share=options.drift_share, sizes=options.drift_sizes)
    compared = ("the champion's data" if champion is not None else
                "no champion's data: the champion's model predates its data statistics"
                if champion_dir else "no champion's data: there is no champion yet")
    if report_path is not None:
        files.write_text(report_path, markdown(found, compared, champion, summary, options))
    for finding in found:
        log(f"dataset: {'warning: ' if finding.warning else ''}{finding.line}")
    warnings = [f for f in found if f.warning]
    log(f"dataset: data checks: {len(warnings)} warning(s), compared with {compared}")
    if warnings and options.drift == "fail":
        raise DataDriftError(
            f"dataset.drift is 'fail' and the data checks warned {len(warnings)} time(s): "
            + "; ".join(f.line for f in warnings)
            + "; nothing was trained. Fix the data, or set dataset.drift: warn to train on it")
    return found


def markdown(found: list[Finding], compared: str, champion: Mapping[str, Any] | None,
             summary: Mapping[str, Any], options: DatasetOptions) -> str:
    """The checks' report: each finding, the drift measured (below its threshold too, to
    set the thresholds from), and the classes beside the champion's."""
    lines = ["# Data checks", "", f"Compared with {compared}.", ""]
    lines += [f"- {'**warning**' if f.warning else 'note'} ({f.check}): {f.line}"
              for f in found] or ["Nothing found."]
    if champion is not None:
        limits = {"class share": ("L-infinity", "dataset.drift_share", options.drift_share),
                  "formats": ("L-infinity", "dataset.drift_share", options.drift_share),
                  "sizes": ("Jensen-Shannon", "dataset.drift_sizes", options.drift_sizes)}
        lines += ["", "| drift | measure | this run | warns above |", "| --- | --- | ---: | --- |"]
        lines += [f"| {name} | {limits[name][0]} | {value:.4f}"
                  + (f" ({at})" if at else "") + f" | {limits[name][1]} {limits[name][2]:g} |"
                  for name, (value, at) in distances(summary, champion).items()]
        names = list(summary["per_class"]) + [c for c in champion.get("per_class", {})
                                              if c not in summary["per_class"]]
        lines += ["", "| class | this run | champion's data |", "| --- | ---: | ---: |"]
        lines += [f"| {name} | {summary['per_class'].get(name, '-')} | "
                  f"{champion.get('per_class', {}).get(name, '-')} |" for name in names]
    return "\n".join(lines) + "\n"
