"""Times the whole local pipeline (what `make demo` runs), after installation.

Runs `gpu-pipeline run --local --json` several times in fresh directories and reports,
per run, the wall time of the command (process start to exit, which is what a user
waits for) and the pipeline time the run reports, with the accuracy it reached.

Usage: python benchmarks/local_pipeline.py [--runs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 90.0


def one_run(binary: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as cwd:
        started = time.perf_counter()
        result = subprocess.run([str(binary), "run", "--local", "--json"], cwd=cwd,
                                capture_output=True, text=True)
        wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"run failed (exit {result.returncode}):\n{result.stdout[-2000:]}"
                 f"{result.stderr[-2000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return {"wall_seconds": round(wall, 1), "pipeline_seconds": summary["seconds"],
            "accuracy": summary["metrics"]["accuracy"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, help="Also write the results as JSON here.")
    args = parser.parse_args()
    binary = Path(sys.executable).parent / "gpu-pipeline"
    runs = []
    for i in range(args.runs):
        runs.append(one_run(binary))
        print(f"run {i + 1}/{args.runs}: {runs[-1]['wall_seconds']:.1f} s wall, "
              f"{runs[-1]['pipeline_seconds']:.1f} s pipeline, accuracy "
              f"{runs[-1]['accuracy']:.4f}", flush=True)
    wall = [r["wall_seconds"] for r in runs]
    results = {
        "machine": (f"{os.cpu_count()} CPUs, {platform.machine()}, "
                    f"Python {platform.python_version()}"),
        "runs": runs,
        "wall_seconds_median": statistics.median(wall),
        "wall_seconds_max": max(wall),
        "target_seconds": TARGET_SECONDS,
        "min_accuracy": min(r["accuracy"] for r in runs),
    }
    print(f"median {results['wall_seconds_median']:.1f} s, max {results['wall_seconds_max']:.1f} s "
          f"(target <= {TARGET_SECONDS:.0f} s); lowest accuracy {results['min_accuracy']:.4f} "
          f"on {results['machine']}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
