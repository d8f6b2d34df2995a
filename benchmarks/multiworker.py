"""Multi-worker training on one machine: the trainer as 1 worker and as 2 worker processes.

The same examples either way (the demo's dataset and options: 10 epochs, global batch 64,
so 2 workers take 32 each), the trainer started as `run --local` starts it
(`components.training.local_cluster`), in interleaved rounds. Reported per case: the
training time the trainer measures (`train_seconds`, first step to the end of `fit`), the
wall time (processes started to all ended) and the final validation accuracy. The goal:
2 workers take at most 1.3x the training time of 1 worker, with the same accuracy within
noise. With 2 cores or more, a third case profiles the difference: one worker's share
(half the global batch) trained alone on one core, as each of the 2 workers is pinned;
what a step of the 2 workers costs beyond it is the all-reduce and the waiting.

Usage: python benchmarks/multiworker.py [--rounds N] [--epochs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common

GOAL = 1.3  # 2 workers' training time / 1 worker's, at most
SHARE = "1 worker, 1 core, half the batch"


def prepare(work: Path, shards: int) -> Path:
    """The demo's dataset (builtin://shapes, 32x32), `shards` files per split."""
    from components.dataset.prepare import prepare_source

    data = work / "dataset"
    prepare_source("builtin://shapes", data, image_size=32, validation_fraction=0.2,
                    test_fraction=0.1, num_shards=shards)
    return data


def train(workers: int, data: Path, work: Path, epochs: int, batch: int, runs: list,
          cores: list[int] | None = None) -> dict:
    """One training run as `workers` processes of `batch` examples a step each (on
    `cores` only, when given); returns its figures."""
    from components.training.local_cluster import run_local_cluster
    from trainer.cluster.roles import Layout

    job = work / f"job-{len(runs)}"
    allowed = os.sched_getaffinity(0)
    started = time.perf_counter()
    try:
        if cores:  # the trainer processes inherit it
            os.sched_setaffinity(0, cores)
        run_local_cluster(Layout(workers=workers - 1), [
            "--job-dir", str(job), "--data-dir", str(data), "--epochs", str(epochs),
            "--batch-size", str(batch)], out=io.StringIO())
    finally:
        os.sched_setaffinity(0, allowed)
    wall = time.perf_counter() - started
    report = json.loads((job / "training_report.json").read_text())
    steps = report["steps_per_epoch"] * epochs
    figures = {"workers": workers, "train_seconds": report["train_seconds"],
               "wall_seconds": round(wall, 2),
               "val_accuracy": report["history"][-1]["val_accuracy"],
               "examples": report["global_batch_size"] * steps,
               "ms_per_step": round(1000 * report["train_seconds"] / steps, 2)}
    runs.append(figures)
    return figures


def measure(args: argparse.Namespace, runs: list[dict]) -> tuple[dict, dict[str, list[dict]]]:
    """(training seconds per case, each case's runs), 1 and 2 workers (and one worker's
    share alone) in interleaved rounds; every run is also appended to `runs`."""
    with tempfile.TemporaryDirectory(prefix="bench-multiworker-") as tmp:
        work = Path(tmp)
        data = prepare(work, shards=2)
        cases = {f"{n} worker(s)": (lambda n=n: train(n, data, work, args.epochs,
                                                      args.batch_size // n, runs))
                 for n in (1, 2)}
        if len(os.sched_getaffinity(0)) >= 2:
            # What each of the 2 workers computes, alone on one core: the difference per
            # step is what the all-reduce and the waiting between the processes cost.
            cases[SHARE] = lambda: train(1, data, work, args.epochs, args.batch_size // 2,
                                         runs, cores=sorted(os.sched_getaffinity(0))[:1])
        by_case: dict[str, list[dict]] = {name: [] for name in cases}

        def timed(name):
            def case():
                figures = cases[name]()
                by_case[name].append(figures)
                return figures["train_seconds"]
            return case

        samples = common.interleaved({name: timed(name) for name in cases}, args.rounds,
                                     unit=" s training")
    return samples, by_case


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64, help="Global batch.")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    info = common.machine()
    print(f"machine: {common.describe_machine(info)}", flush=True)
    runs: list[dict] = []
    samples, by_case = measure(args, runs)
    one, two = "1 worker(s)", "2 worker(s)"
    training = common.ratio(samples, two, one)
    walls = {name: [r["wall_seconds"] for r in rs] for name, rs in by_case.items()}
    accuracy = {name: [r["val_accuracy"] for r in rs] for name, rs in by_case.items()}
    results = {
        "machine": info, "epochs": args.epochs, "global_batch": args.batch_size,
        "examples": runs[0]["examples"], "runs": runs,
        "train_seconds_median": {k: statistics.median(v) for k, v in samples.items()},
        "wall_seconds_median": {k: statistics.median(v) for k, v in walls.items()},
        "val_accuracy_median": {k: statistics.median(v) for k, v in accuracy.items()},
        "two_over_one_training": training,
        "two_over_one_wall": common.ratio(walls, two, one),
        "goal": GOAL, "verdict": common.verdict(training["median"], GOAL, at_most=True),
    }
    med = results["train_seconds_median"]
    print(f"{results['examples']} examples, {args.epochs} epochs, global batch "
          f"{args.batch_size}: 1 worker {med[one]:.1f} s training "
          f"({results['wall_seconds_median'][one]:.1f} s wall), 2 workers {med[two]:.1f} s "
          f"({results['wall_seconds_median'][two]:.1f} s wall)")
    print(f"2 workers / 1 worker: training {training['median']:.2f}x (rounds "
          f"{training['per_round']}; goal <= {GOAL}: {results['verdict']}), wall "
          f"{results['two_over_one_wall']['median']:.2f}x; validation accuracy "
          f"{results['val_accuracy_median'][one]:.4f} vs {results['val_accuracy_median'][two]:.4f}")
    steps = {name: statistics.median(r["ms_per_step"] for r in rs)
             for name, rs in by_case.items()}
    results["ms_per_step_median"] = steps
    if SHARE in steps:
        sync = steps[two] - steps[SHARE]
        results["sync_ms_per_step"] = round(sync, 2)
        results["sync_share_of_two_workers"] = round(sync / steps[two], 3)
        print(f"ms per training step (validation included): 1 worker {steps[one]:.1f}, "
              f"2 workers {steps[two]:.1f}, one worker's share alone on 1 core "
              f"{steps[SHARE]:.1f}: the all-reduce and the waiting between the processes "
              f"cost {sync:.1f} ms a step, {sync / steps[two]:.0%} of the 2 workers' time")
    print(f"results: {common.save('multiworker', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
