"""The local pipeline's own overhead: `run --local` against the 2-worker trainer alone.

In interleaved rounds: the whole pipeline as a user runs it (`gpu-pipeline run --local
--json` in a fresh directory: process start to exit), and the trainer alone as the
pipeline starts it (2 processes on localhost, the same dataset, options and examples:
processes started to all ended). Also the time of each pipeline task, from the KFP local
runner's log. Goal: the pipeline takes at most 1.25x the trainer alone.

Usage: python benchmarks/local_pipeline.py [--rounds N] [--output FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import common

GOAL = 1.25  # pipeline wall time / the 2-worker trainer's, at most
TASK_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) - INFO - Task '([\w-]+)' finished")


def pipeline_run(binary: Path, runs: list) -> float:
    """One `run --local`; returns its wall time and keeps its figures."""
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as cwd:
        started = time.perf_counter()
        result = subprocess.run([str(binary), "run", "--local", "--json"], cwd=cwd,
                                capture_output=True, text=True)
        wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"run failed (exit {result.returncode}):\n{result.stdout[-2000:]}"
                 f"{result.stderr[-2000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    runs.append({"wall_seconds": round(wall, 2), "pipeline_seconds": summary["seconds"],
                 "accuracy": summary["metrics"]["accuracy"],
                 "tasks": task_seconds(result.stdout + result.stderr)})
    return wall


def task_seconds(log: str) -> dict[str, float]:
    """Seconds of each task after the first: from the previous task's end to its own.

    The local runner runs the tasks one after another, so this is each task's share (the
    first one's is counted with the start-up).
    """
    seconds, previous = {}, None
    for line in log.splitlines():
        end = TASK_LINE.match(line)
        if end:
            at = datetime.strptime(end.group(1), "%H:%M:%S.%f")
            if previous is not None:
                seconds[end.group(2)] = round((at - previous).total_seconds(), 2)
            previous = at
    return seconds


def trainer_run(data: Path, work: Path, runs: list) -> float:
    """The 2-worker trainer alone on the prepared dataset, as the pipeline starts it."""
    from components.training.local_cluster import run_local_cluster
    from trainer.cluster.roles import Layout

    job = work / f"job-{len(runs)}"
    started = time.perf_counter()
    run_local_cluster(Layout(workers=1), ["--job-dir", str(job), "--data-dir", str(data)],
                      out=io.StringIO())
    wall = time.perf_counter() - started
    runs.append(round(wall, 2))
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    from components.dataset.dataset_options import DatasetOptions
    from components.dataset.prepare import prepare_dataset

    info = common.machine()
    print(f"machine: {common.describe_machine(info)}", flush=True)
    binary = Path(sys.executable).parent / "gpu-pipeline"
    pipeline_runs: list[dict] = []
    trainer_runs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        work = Path(tmp)
        data = work / "dataset"  # what the pipeline's dataset stage makes by default
        prepare_dataset(DatasetOptions(), data, input_pipelines=2)
        samples = common.interleaved({
            "run --local": lambda: pipeline_run(binary, pipeline_runs),
            "2-worker trainer alone": lambda: trainer_run(data, work, trainer_runs),
        }, args.rounds, unit=" s wall")
    overhead = common.ratio(samples, "run --local", "2-worker trainer alone")
    tasks = {name: statistics.median(r["tasks"].get(name, 0) for r in pipeline_runs)
             for name in pipeline_runs[0]["tasks"]}
    med = common.medians(samples)
    results = {"machine": info, "pipeline_runs": pipeline_runs, "trainer_runs": trainer_runs,
               "wall_seconds_median": med, "task_seconds_median": tasks,
               "pipeline_over_trainer": overhead, "goal": GOAL,
               "verdict": common.verdict(overhead["median"], GOAL, at_most=True),
               "min_accuracy": min(r["accuracy"] for r in pipeline_runs)}
    print(f"run --local {med['run --local']:.1f} s wall, the 2-worker trainer alone "
          f"{med['2-worker trainer alone']:.1f} s: {overhead['median']:.2f}x (rounds "
          f"{overhead['per_round']}; goal <= {GOAL}: {results['verdict']}); lowest accuracy "
          f"{results['min_accuracy']:.4f}")
    print("pipeline tasks (median s): " + ", ".join(f"{k} {v:.1f}" for k, v in tasks.items())
          + f"; start-up, first task and report "
          f"{med['run --local'] - sum(tasks.values()):.1f}")
    print(f"results: {common.save('local_pipeline', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
