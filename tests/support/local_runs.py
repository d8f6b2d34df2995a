"""The local pipeline as a user runs it, for the tests of whole local runs: `gpu-pipeline run
--local --json` as a process, and the local registry it leaves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "gpu-pipeline"


def run_json(cwd: Path, *flags: str) -> tuple[dict, str]:
    """`gpu-pipeline run --local --json FLAGS` in `cwd`, which must succeed: (its JSON
    summary, its stdout)."""
    result = subprocess.run([str(BIN), "run", "--local", "--json", *flags], cwd=cwd,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stdout


def registry_index(cwd: Path) -> dict:
    """The local registry's index of the default model, under `cwd`'s local runs."""
    return json.loads((cwd / "local_runs" / "registry" / "gpu-pipeline-model" /
                       "registry.json").read_text())
