"""The `gpu-pipeline` command: clear messages and exit codes, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.cli import main

BIN = Path(sys.executable).parent / "gpu-pipeline"


def run(*args, cwd=None):
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("args,message", [
    (["run", "--local", "--epochs", "0"], "argument --epochs: 0 is not >= 1"),
    (["run", "--local", "--colour", "red"], "unrecognized arguments: --colour red"),
    (["run"], "use `gpu-pipeline run --local`"),
    (["run", "--local", "--config", "/no/such.yaml"], "--config '/no/such.yaml' is not a "
                                                      "readable file"),
    (["run", "--local", "--dataset-source", "/no/such/dir"], "dataset.source is '/no/such/dir'"),
    (["run", "--local", "--workers", "9"], "training.local_workers is 9; expected an integer "
                                           "from 1 to 8"),
    (["compile", "--region", "mars-1"], "region is 'mars-1', which offers no GPUs"),
])
def test_user_mistakes(args, message, tmp_path):
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_invalid_config_refused_before_compiling(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("vertex:\n  worker_pool_specs:\n    - machine_spec: {machine_type: "
                      "n1-standard-32, accelerator_type: NVIDIA_TESLA_V100, "
                      "accelerator_count: 2}\n")
    out = tmp_path / "spec.yaml"
    result = run("compile", "--config", str(config), "--output", str(out))
    assert result.returncode == 2
    assert "n1-standard-32 takes 4, 8 x NVIDIA_TESLA_V100" in result.stderr
    assert not out.exists()


def test_compile_writes_the_spec(tmp_path):
    out = tmp_path / "nested" / "spec.yaml"
    assert main(["compile", "--output", str(out)]) == 0
    assert "gpu-training-pipeline" in out.read_text()


def test_validate_gpu(capsys):
    ok = ["validate-gpu", "--machine-type", "n1-standard-8", "--accelerator-type",
          "NVIDIA_TESLA_T4", "--accelerator-count", "1", "--replica-count", "3",
          "--region", "us-central1", "--json"]
    assert main(ok) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and [p["replica_count"] for p in report["worker_pool_specs"]] == [1, 2]
    bad = ["validate-gpu", "--machine-type", "n1-standard-4", "--accelerator-type",
           "NVIDIA_TESLA_T4", "--accelerator-count", "3"]
    assert main(bad) == 1
    assert "n1-standard-4 takes 1, 2, 4 x NVIDIA_TESLA_T4" in capsys.readouterr().out
    assert main(["validate-gpu"]) == 2
    assert "give --machine-type" in capsys.readouterr().err
