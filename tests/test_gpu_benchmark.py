"""The GPU benchmark (`benchmarks/gpu.py`) on this CPU machine, at tiny sizes, so that on a GPU
machine nothing but the GPU is new: the plan it makes for an H100 (bfloat16 and XLA), the
trainer's ResNet-50 compiled that way, the dataset stage's TFRecords through the trainer's
input pipeline, the trainer's GPU check, and the result file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

BENCHMARK = ROOT / "benchmarks" / "gpu.py"


@pytest.fixture(scope="module")
def gpu_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu

        yield gpu
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_plan_is_the_one_stage_1_makes_for_the_gpu_tensorflow_names(gpu_module):
    assert gpu_module.accelerator_type("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB"
    assert gpu_module.accelerator_type("NVIDIA H200") == "NVIDIA_H200_141GB"
    assert gpu_module.accelerator_type("Tesla T4") == "NVIDIA_TESLA_T4"
    hopper = gpu_module.plan_for("NVIDIA H100 80GB HBM3", (9, 0))
    assert (hopper.mixed_precision, hopper.xla, hopper.strategy) == ("bfloat16", True, "single")
    assert gpu_module.plan_for("Tesla T4", (7, 5)).mixed_precision == "float16"
    # A GPU the catalog does not name is planned from what TensorFlow reports of it.
    assert gpu_module.plan_for("NVIDIA Future GPU", (9, 0)).mixed_precision == "bfloat16"
    cpu = gpu_module.plan_for("cpu", None)
    assert (cpu.mixed_precision, cpu.xla) == ("off", False)


def test_the_benchmark_runs_the_trainers_step_as_planned_for_an_h100(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(BENCHMARK), "prepare", "--out", str(data),
                    "--images", "40", "--size", "32"], check=True, capture_output=True,
                   timeout=120)
    output = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "all", "--data", str(data), "--allow-cpu",
         "--size", "32", "--batch", "4", "--classes", "10", "--warmup", "1", "--steps", "2",
         "--cases", "plan-tfrecords", "--output", str(output), "--logs", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "BENCH_AS_DEVICE": "NVIDIA H100 80GB HBM3"})
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(output.read_text())
    check = results["check"]
    assert check["gpus"] == 0 and check["build"]["is_cuda_build"]
    assert check["matmul"] and check["conv"] and check["xla"]
    # The trainer's GPU check passes with the GPUs there are and refuses one more.
    assert check["gpu_check_passes"] and check["gpu_check_refuses"]
    assert "--expected-gpus 1" in check["gpu_check_message"]
    assert "mixed precision bfloat16; XLA on" in check["plan"]
    [case] = results["cases"]
    assert (case["case"], case["input"], case["policy"], case["xla"]) == (
        "plan-tfrecords", "tfrecords", "mixed_bfloat16", True)
    assert case["images_per_second"] > 0 and case["step_ms"] > 0 and case["steps"] == 2
    assert case["peak_memory_gib"] is None  # no GPU: no allocator to read
    assert results["skipped"] == [] and results["machine"]["commit"]
    assert (tmp_path / "logs" / "check.log").exists()
    assert "plan-tfrecords: " in done.stdout and "images/s" in done.stdout
