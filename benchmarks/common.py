"""What every benchmark shares: the machine and versions, interleaved rounds, medians,
ratios measured side by side, and the JSON result file.

Absolute figures depend on the machine; a ratio of two figures measured in the same run,
round by round (A, B, A, B, ...), mostly does not. Every benchmark prints both, with the
machine it ran on.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from anywhere
    sys.path.insert(0, str(ROOT))

#: Where `make bench` collects every benchmark's JSON result.
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, OS, the versions that matter for the figures, and the
    checkout's commit."""
    from trainer.benchmark.probe import machine as this_machine

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        commit = ""
    return {**this_machine(), "commit": commit}


def describe_machine(info: dict[str, Any]) -> str:
    """One line: `2 cores (Intel ...), 23.5 GB, Linux x86_64; Python 3.11.7, ...`."""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    return (f"{info['cores']} cores ({info['cpu']}), {info['memory_gb']} GB, "
            f"{info['system']}; {versions}; commit {info['commit'] or '?'}")


def interleaved(cases: dict[str, Callable[[], float]], rounds: int,
                log: Callable[[str], None] = print, unit: str = "") -> dict[str, list[float]]:
    """Runs every case once per round, in turn (A, B, A, B, ...), so that a slower
    stretch of the machine affects all of them alike; returns each case's samples."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for round_ in range(rounds):
        for name, case in cases.items():
            samples[name].append(case())
        log(f"round {round_ + 1}/{rounds}: " + ", ".join(
            f"{name} {values[-1]:,.1f}{unit}" for name, values in samples.items()))
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}


def ratio(samples: dict[str, list[float]], numerator: str, denominator: str) -> dict[str, Any]:
    """The ratio of two cases: of their medians, and round by round (the spread)."""
    per_round = [a / b for a, b in zip(samples[numerator], samples[denominator], strict=True)]
    return {"median": round(statistics.median(samples[numerator])
                            / statistics.median(samples[denominator]), 3),
            "per_round": [round(r, 3) for r in per_round]}


def verdict(value: float, goal: float, at_most: bool) -> str:
    """`met` or `missed by N%` for a goal of at most / at least `goal`."""
    met = value <= goal if at_most else value >= goal
    if met:
        return "met"
    return f"missed by {abs(value - goal) / goal:.0%}"


def save(name: str, results: dict[str, Any], output: Path | None = None) -> Path:
    """Writes a benchmark's results (with the machine) as JSON; returns the path."""
    path = output or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


def photo_like_folder(root: Path, classes: int, per_class: int, width: int = 320,
                      height: int = 240, seed: int = 0) -> Path:
    """A folder of JPEG photo-like images, one sub-folder per class.

    Smooth colour fields (random low-resolution noise upsampled) under fine sensor-like
    noise: unlike the builtin flat-coloured shapes, they compress as photos do, which is
    what shard sizes and decoding costs depend on. Saved as a camera would (JPEG, quality
    90).
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            coarse = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC),
                               dtype=np.float32)
            field += rng.normal(0, 12, field.shape)
            image = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8))
            image.save(folder / f"{c}_{i:05d}.jpg", quality=90)
    return root
