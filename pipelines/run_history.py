"""The local runs' history, for comparing runs over time: one JSON line per run in
`<pipeline root>/runs.jsonl`, appended when the run ends (succeeded or failed), and the
table `gpu-pipeline runs` prints of it (date, data, accuracy, decision, cost, duration)."""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FILE = "runs.jsonl"


def record(root: str | os.PathLike, entry: Mapping[str, Any]) -> None:
    """Appends a run's line (a line is written whole, or the run is not recorded: the
    history is a record, never a reason to fail a run)."""
    line = json.dumps({"ended": datetime.datetime.now(datetime.timezone.utc)
                       .isoformat(timespec="seconds"), **entry}, sort_keys=True) + "\n"
    try:
        with open(Path(root) / FILE, "a") as out:
            out.write(line)
    except OSError:
        pass


def load(root: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    """(the runs recorded under `root`, oldest first; how many lines could not be read)."""
    path = Path(root) / FILE
    if not path.is_file():
        return [], 0
    runs, unread = [], 0
    for text in path.read_text().splitlines():
        try:
            found = json.loads(text)
        except ValueError:
            unread += 1
            continue
        if isinstance(found, dict):
            runs.append(found)
        else:
            unread += 1
    return runs, unread


def dataset_words(manifest: Mapping[str, Any] | None) -> str:
    """A prepared dataset in a few words: its source, its images and their size, and the
    first digits of its content's digest when the source has one (a folder, a bucket):
    runs on 32 px and 64 px images of one source read apart."""
    if not manifest:
        return "-"
    count, size = manifest.get("examples"), manifest.get("image_size")
    pixels = size[0] if isinstance(size, (list, tuple)) and size else size
    words = [str(manifest.get("source", "-")),
             f"{count:,} images" if isinstance(count, int) else f"{count or '?'} images"]
    if pixels:
        words.append(f"{pixels} px")
    digest = str(manifest.get("source_fingerprint", "")).rsplit(":", 1)[-1]
    if re.fullmatch(r"[0-9a-f]{8,}", digest):
        words.append(f"data {digest[:8]}")
    return ", ".join(words)


def decision_words(promoted: bool, version: str, has_decision: bool) -> str:
    """The gate's outcome in a few words."""
    if not has_decision:
        return "-"
    if promoted:
        return f"promoted (version {version})" if version else "promoted"
    return f"champion kept (version {version} registered)" if version else \
        "champion kept (not registered)"


#: The gate's decision as a Vertex AI run's Experiments metric, in the table's words.
EXPERIMENT_DECISIONS = {"promoted": "promoted", "registered": "champion kept (registered)",
                        "not registered": "champion kept (not registered)"}

#: Vertex AI Experiments' final states as a run's summary names them.
EXPERIMENT_STATES = {"COMPLETE": "SUCCEEDED", "FAILED": "FAILED", "CANCELLED": "CANCELLED",
                     "RUNNING": "RUNNING"}


def _whole(value: Any) -> Any:
    """A count as Vertex ML Metadata gives it back (a double: protobuf Struct numbers)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def from_experiments(runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Vertex AI runs read back from Vertex AI Experiments
    (`components.export.experiments.list_runs`) as lines of this history, oldest first."""
    from components.export.gate import compared_metric

    lines = []
    for run in runs:
        values, results = run["params"], run["metrics"]
        metric = compared_metric(results)
        data = {"source": values["data_source"],
                "examples": _whole(values.get("data_examples", "?")),
                "image_size": _whole(values.get("data_image_size")),
                "source_fingerprint": values.get("data_fingerprint", "")} \
            if values.get("data_source") else None
        decided = results.get("decision")
        lines.append({
            "run": run["name"], "ended": results.get("ended", "-"),
            "state": EXPERIMENT_STATES.get(run["state"], run["state"]),
            "data": dataset_words(data), "model": values.get("model", "-"),
            "metric": metric, "accuracy": results.get(metric),
            "decision": EXPERIMENT_DECISIONS.get(str(decided), str(decided or "-")),
            "local": False, "cost_usd": results.get("cost_usd"),
            "seconds": results.get("duration_s")})
    return sorted(lines, key=lambda line: str(line["ended"]))


def table(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The runs as an aligned table, newest last."""
    header = ("ended", "state", "data", "model", "accuracy", "decision", "cost", "duration")
    rows = [header] + [(
        str(run.get("ended", "-")).replace("+00:00", "Z"), str(run.get("state", "-")),
        str(run.get("data", "-")),
        str(run.get("model") or (run.get("params") or {}).get("model") or "-"),
        f"{run['metric']} {run['accuracy']:.4f}" if run.get("accuracy") is not None else "-",
        str(run.get("decision", "-")),
        "0 USD (local)" if run.get("local", True) else
        f"{run['cost_usd']:.2f} USD" if run.get("cost_usd") is not None else "-",
        f"{run['seconds']:.0f} s" if run.get("seconds") is not None else "-")
        for run in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in rows]
