"""`gpu-pipeline benchmark`: the GPU benchmark's cases (`trainer.benchmark`) with a
configuration's model, batch and image size, on synthetic batches and the run's own
TFRecords, written as one results file the training plan reads
(`trainer.cluster.measurements`). On Vertex AI it is one CustomJob on the primary
configuration's GPU (`pipelines.vertex.benchmark_job`); `--local` runs the same cases here.
This module holds what both share: the arguments, where the file goes, the table.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipelines.config import Config
from trainer.common.shell_name import command

#: Seconds for all the cases, and at most per case (XLA's warm-up ran past 200 s on
#: Hopper: its case is bounded, and runs last).
BUDGET_SECONDS = 1500
CASE_SECONDS = 300


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark of a configuration.

    Attributes:
        accelerator: The GPU measured (the primary configuration's).
        model: `training.model`.
        batch: `training.batch_size` (one GPU's batch).
        size: `dataset.image_size`.
        classes: The model's classes (the prepared dataset's, when there is one).
        cases: The cases, comma-separated ("" for `trainer.benchmark.runner.CASES`).
        budget: Seconds for them all.
        warmup: Warm-up steps of each case.
        steps: Timed steps of each case.
    """

    accelerator: str
    model: str
    batch: int
    size: int
    classes: int
    cases: str = ""
    budget: float = BUDGET_SECONDS
    warmup: int = 10
    steps: int = 50

    def arguments(self, config: Config, *, data: str, output: str, image: str = "",
                  call: str = "") -> list[str]:
        """`python -m trainer.benchmark all`'s arguments."""
        training = config.training.model_dump()
        return ["all", "--accelerator", self.accelerator, "--model", self.model,
                "--user-code", config.training.user_code,
                "--training", json.dumps(training, sort_keys=True, separators=(",", ":")),
                "--batch", str(self.batch), "--size", str(self.size),
                "--classes", str(self.classes), "--warmup", str(self.warmup),
                "--steps", str(self.steps), "--budget", str(self.budget),
                "--case-timeout", str(min(CASE_SECONDS, self.budget)),
                "--data", data, "--output", output, "--image", image, "--call", call,
                *(["--cases", self.cases] if self.cases else [])]


def benchmark_of(config: Config, *, classes: int, cases: str = "", budget: float = 0,
                 warmup: int = 0, steps: int = 0) -> Benchmark:
    """The benchmark of a configuration's primary GPU and training options."""
    primary = config.alternatives()[0]
    chief = primary.pools[0]
    return Benchmark(accelerator=chief.accelerator or "", model=config.training.model,
                     batch=config.training.batch_size, size=config.dataset.image_size,
                     classes=classes, cases=cases, budget=budget or BUDGET_SECONDS,
                     warmup=warmup or 10, steps=steps or 50)


def results_name(benchmark: Benchmark, image: str, when: datetime.datetime | None = None
                 ) -> str:
    """`ACCELERATOR/MODEL/IMAGE/TIME.json`: one file per run, keyed by accelerator type,
    model and image digest (`local` for this machine's environment)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    model = re.sub(r"[^A-Za-z0-9._-]", "-", benchmark.model)
    digest = image.rsplit("@sha256:", 1)[-1][:16] if "@sha256:" in image else "local"
    return (f"{benchmark.accelerator or 'cpu'}/{model}/{digest}/"
            f"{when.strftime('%Y%m%dT%H%M%SZ')}.json")


def table(results: Mapping[str, Any]) -> list[str]:
    """The cases as a table: images/s, step time, warm-up and GPU busy %, one row each."""
    rows = [("case", "input", "images/s", "step ms", "warm-up s", "GPU busy %")]
    for run in results.get("runs", []):
        for case in run.get("cases", []):
            if case.get("error"):
                rows.append((case["case"], "-", case["error"], "", "", ""))
            elif case.get("phase") == "timed":
                busy = case.get("gpu_utilization_mean")
                rows.append((case["case"], case.get("input", ""),
                             f"{case['images_per_second']:,.1f}", f"{case['step_ms']:g}",
                             f"{case['warmup_seconds']:g}" if case.get("warmup_seconds")
                             is not None else "", "-" if busy is None else f"{busy:g}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def classes_of(data: str) -> int | None:
    """The number of classes of a prepared dataset (its manifest), None if unreadable."""
    from trainer.common.contract import load_manifest

    try:
        return len(load_manifest(data)["classes"])
    except Exception:  # noqa: BLE001 -- the caller says what it uses instead
        return None


def prepare_here(config: Config, work: Path) -> str:
    """The configuration's dataset prepared here by the dataset stage, for the TFRecords
    phase of `--local`; returns its folder."""
    from components.dataset.prepare import prepare_dataset

    out = work / "dataset"
    prepare_dataset(config.dataset, out)
    return str(out)


def describe_cpu_file(results: Mapping[str, Any], output: str) -> list[str]:
    """What a file measured on CPUs is worth, and how the plan reads it."""
    if results.get("device") != "cpu":
        return []
    return [f"note: this machine has no GPU: {output} holds CPU figures for "
            f"{results.get('accelerator') or 'no GPU type'}; a plan reads it only from "
            "training.measurements, after any GPU's own files, and says \"measured on CPUs\"; "
            f"`{command()} benchmark --config CFG` measures the GPU itself on Vertex AI"]


def lines_of(results: Mapping[str, Any], where: str, cost: Sequence[str] = (),
             said: bool = False) -> list[str]:
    """What the command prints at the end: the table, the cost, where the file is (unless
    `said`: the runner here has printed it), and what CPU figures are worth."""
    return [*table(results), *cost, *([] if said else [f"results: {where}"]),
            *describe_cpu_file(results, where)]
