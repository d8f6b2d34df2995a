"""`gpu-pipeline benchmark`: the machine it measures on, its results file's name and table,
and `--local` end to end: the file it writes changes the plan that reads it."""

from __future__ import annotations

import datetime
import json

import pytest

from components.gpu import catalog as cat
from components.gpu.benchmark_machine import benchmark_machine
from pipelines.benchmark import Benchmark, results_name, table
from pipelines.cli import main

# Exercised here without an import, through the CLI: `pipelines.commands.benchmark`.


@pytest.mark.parametrize("machine,gpu,count,expected", [
    ("n1-standard-8", cat.T4, 1, ("n1-standard-8", 1)),
    ("n1-standard-32", cat.T4, 4, ("n1-standard-8", 1)),  # 8 vCPUs per GPU, as before
    ("a3-highgpu-8g", cat.H100_80GB, 8, ("a3-highgpu-1g", 1)),
    ("g2-standard-48", cat.L4, 4, ("g2-standard-12", 1)),
    ("a3-ultragpu-8g", cat.H200, 8, ("a3-ultragpu-8g", 8)),  # only ever 8: one is used
])
def test_the_benchmark_measures_one_gpu_of_the_training_machines_family(machine, gpu, count,
                                                                       expected):
    found = benchmark_machine(machine, gpu, count)
    assert (found.machine, found.gpus) == expected and found.accelerator == gpu
    if found.gpus > 1:
        assert "the whole machine is billed" in found.why


def test_results_are_named_by_accelerator_model_and_image_and_shown_as_a_table():
    bench = Benchmark("NVIDIA_L4", "mine.models:tiny", 32, 64, 10)
    when = datetime.datetime(2026, 12, 1, 8, 30, tzinfo=datetime.timezone.utc)
    assert results_name(bench, "r/gpu@sha256:" + "ab" * 32, when) == \
        "NVIDIA_L4/mine.models-tiny/abababababababab/20261201T083000Z.json"
    assert results_name(bench, "", when).split("/")[2] == "local"
    rows = table({"runs": [{"cases": [
        {"case": "float16-noxla", "phase": "warmup"},
        {"case": "float16-noxla", "phase": "timed", "input": "synthetic",
         "images_per_second": 1234.56, "step_ms": 25.9, "warmup_seconds": 4.0,
         "gpu_utilization_mean": 91.5},
        {"case": "float16-xla", "phase": "stopped", "error": "timed out after 300 s"}]}]})
    assert rows[0].split() == ["case", "input", "images/s", "step", "ms", "warm-up", "s", "GPU",
                               "busy", "%"]
    assert rows[1].split() == ["float16-noxla", "synthetic", "1,234.6", "25.9", "4", "91.5"]
    assert rows[2].split() == ["float16-xla", "-", "timed", "out", "after", "300", "s"]


def test_a_case_name_that_does_not_parse_is_a_usage_error(capsys):
    assert main(["benchmark", "--local", "--cases", "float16-noxla,fp8"]) == 2
    assert "--cases: case 'fp8': 'fp8' is not PRECISION[-xla|-noxla]" in capsys.readouterr().err


@pytest.mark.slow
def test_local_writes_a_results_file_that_decides_nothing_for_the_gpu(tmp_path, capsys):
    """`benchmark --local` on this CPU machine: a schema 2 file for the configuration's
    T4, marked as run on CPUs; the T4's plan is the same with it and without it."""
    folder = tmp_path / "measurements"
    config = tmp_path / "config.yaml"
    config.write_text("training:\n  batch_size: 4\n  measurements: measurements\n")
    assert main(["benchmark", "--local", "--config", str(config), "--cases",
                 "float32-noxla,float16-noxla", "--steps", "2", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    (path,) = folder.rglob("*.json")
    assert str(path.relative_to(tmp_path)).startswith("measurements/NVIDIA_TESLA_T4/cnn/local/")
    assert f"results: {folder.name}/" in out or f"results: {folder}" in out
    assert out.count("results: ") == 1  # said once
    results = json.loads(path.read_text())
    assert (results["schema"], results["device"], results["accelerator"], results["model"],
            results["batch"]) == (2, "cpu", cat.T4, "cnn", 4)
    # The T4's plan with the file and without it: the same, a CPU file deciding nothing.
    plans = []
    for measured in (True, False):
        config.write_text("training:\n  batch_size: 4\n"
                          + ("  measurements: measurements\n" if measured else ""))
        assert main(["validate-gpu", "--config", str(config), "--json"]) == 0
        plans.append(json.loads(capsys.readouterr().out)["training_plan"])
    assert plans[0] == plans[1]
    assert plans[0]["mixed_precision"] == "float16" and plans[0]["measured"] == {}
