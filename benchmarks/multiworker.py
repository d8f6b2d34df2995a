"""Multi-worker training on one machine: the trainer as 1 worker and as 2 worker processes.

The same examples either way (the demo's dataset and options: 10 epochs, global batch 64,
so 2 workers take 32 each), the trainer started as `run --local` starts it
(`components.training.local_cluster`), in interleaved rounds. Reported per case: the
training time the trainer measures (`train_seconds`, first step to the end of `fit`), the
wall time (processes started to all ended) and the final validation accuracy. The goal:
2 workers take at most 1.3x the training time of 1 worker, with the same accuracy within
noise.

Usage: python benchmarks/multiworker.py [--rounds N] [--epochs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import common

GOAL = 1.3  # 2 workers' training time / 1 worker's, at most


def prepare(work: Path, shards: int) -> Path:
    """The demo's dataset (builtin://shapes, 32x32), `shards` files per split."""
    from components.dataset.prepare import prepare_dataset

    data = work / "dataset"
    prepare_dataset("builtin://shapes", data, image_size=32, validation_fraction=0.2,
                    test_fraction=0.1, num_shards=shards)
    return data


def train(workers: int, data: Path, work: Path, epochs: int, global_batch: int,
          runs: list) -> dict:
    """One training run as `workers` processes; returns its figures."""
    from components.training.local_cluster import run_local_cluster
    from trainer.cluster import Layout

    job = work / f"job-{len(runs)}"
    started = time.perf_counter()
    run_local_cluster(Layout(workers=workers - 1), [
        "--job-dir", str(job), "--data-dir", str(data), "--epochs", str(epochs),
        "--batch-size", str(global_batch // workers)], out=io.StringIO())
    wall = time.perf_counter() - started
    report = json.loads((job / "training_report.json").read_text())
    figures = {"workers": workers, "train_seconds": report["train_seconds"],
               "wall_seconds": round(wall, 2),
               "val_accuracy": report["history"][-1]["val_accuracy"],
               "examples": report["global_batch_size"] * report["steps_per_epoch"] * epochs}
    runs.append(figures)
    return figures


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
    with tempfile.TemporaryDirectory(prefix="bench-multiworker-") as tmp:
        work = Path(tmp)
        data = prepare(work, shards=2)
        cases = {f"{n} worker(s)": (lambda n=n: train(n, data, work, args.epochs,
                                                      args.batch_size, runs))
                 for n in (1, 2)}
        by_case: dict[str, list[dict]] = {name: [] for name in cases}

        def timed(name):
            def case():
                figures = cases[name]()
                by_case[name].append(figures)
                return figures["train_seconds"]
            return case

        samples = common.interleaved({name: timed(name) for name in cases}, args.rounds,
                                     unit=" s training")
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
    print(f"results: {common.save('multiworker', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
