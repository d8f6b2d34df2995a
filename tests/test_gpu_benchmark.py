"""The GPU benchmark (`benchmarks/gpu.py`) on this CPU machine, at tiny sizes, so that on a GPU
machine nothing but the GPU is new: the plan it makes for an H100 (what measured fastest
there), its variants by name, the trainer's model compiled each way, the dataset stage's
TFRecords through the trainer's input pipeline, the profile's phase, the trainer's GPU check,
and the result file, rewritten after each case.

The cases train the trainer's small CNN (`--model cnn`): the benchmark's path is the same for
every model, and ResNet-50 is trained in each precision and layout in
tests/trainer/models/test_models.py (here it cost 85 s of the suite, 17 s with the CNN)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

BENCHMARK = ROOT / "benchmarks" / "gpu.py"

# Exercised here without an import, in the benchmark's processes: `trainer.benchmark.runner`
# (check, then each case in its own process), `trainer.benchmark.__main__` (its entry).


@pytest.mark.parametrize(("device", "kind"), [
    ("Tesla P4", "NVIDIA_TESLA_P4"), ("Tesla P40", ""),
    ("NVIDIA L4", "NVIDIA_L4"), ("NVIDIA L40", ""), ("NVIDIA L40S", ""),
    ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB"), ("NVIDIA H100 PCIe", ""),
    ("NVIDIA H100 NVL", ""),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA_TESLA_A100"), ("NVIDIA A100-PCIE-40GB", ""),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA_A100_80GB"), ("NVIDIA A100 80GB PCIe", ""),
    ("Tesla V100-SXM2-16GB", "NVIDIA_TESLA_V100"), ("Tesla V100-SXM2-32GB", ""),
    ("NVIDIA H200", "NVIDIA_H200_141GB"), ("NVIDIA H200 NVL", ""),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", ""), ("  tesla  t4 ", "NVIDIA_TESLA_T4"),
])
def test_a_gpu_is_a_vertex_ai_type_by_its_whole_name_never_a_neighbour(device, kind):
    from trainer.cluster.accelerators import accelerator_of_device
    from trainer.cluster.measurements import ResultsError, parse_results

    assert accelerator_of_device(device) == kind
    # A results file from a neighbour counts for no Vertex AI GPU.
    data = {"schema": 2, "gpu": device, "model": "cnn", "measured_at": "2026-11-28",
            "runs": []}
    if kind:
        assert parse_results(data, "f.json").accelerator == kind
    else:
        with pytest.raises(ResultsError, match="is no Vertex AI accelerator type"):
            parse_results(data, "f.json")


def test_the_plan_is_the_one_stage_1_makes_for_the_gpu_tensorflow_names():
    from trainer.benchmark.probe import plan_for
    from trainer.cluster.accelerators import accelerator_of_device

    assert accelerator_of_device("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB"
    assert accelerator_of_device("NVIDIA H200") == "NVIDIA_H200_141GB"
    assert accelerator_of_device("Tesla T4") == "NVIDIA_TESLA_T4"
    assert accelerator_of_device("NVIDIA A100-SXM4-80GB") == "NVIDIA_A100_80GB"
    assert accelerator_of_device("NVIDIA A100-SXM4-40GB") == "NVIDIA_TESLA_A100"
    hopper = plan_for("NVIDIA H100 80GB HBM3", (9, 0))
    assert (hopper.mixed_precision, hopper.xla, hopper.strategy, hopper.nvidia_environment) \
        == ("off", False, "single", True)  # its own file's fastest case, float32
    assert plan_for("Tesla T4", (7, 5)).mixed_precision == "float16"
    # A GPU the catalog does not name is planned from what TensorFlow reports of it.
    assert plan_for("NVIDIA Future GPU", (8, 0)).mixed_precision == "bfloat16"


def test_case_names_parse_into_variants_and_bad_ones_name_what_is_valid():
    from trainer.benchmark import cases as gpu_cases
    from trainer.cluster import case_names

    case = case_names.parse("bfloat16-xla+b512+spe4+nvenv+prefetch+parallel+autotune2")
    assert (case.precision, case.xla, case.batch, case.steps_per_execution) == (
        "bfloat16", True, 512, 4)
    assert case.nvidia_environment and case.prefetch and case.parallel and case.autotune == 2
    assert not case.keep_nhwc and case_names.parse("float32-noxla+nhwc").keep_nhwc
    assert case_names.parse("plan").xla is None  # the plan's own choice
    env = gpu_cases.environment(case, xla=True, nvidia=True)
    assert env["TF_GPU_THREAD_MODE"] == "gpu_private"
    assert "TF_GPU_THREAD_MODE" not in gpu_cases.environment(case, xla=False, nvidia=False)
    assert "triton" not in env["XLA_FLAGS"]
    cublas = gpu_cases.environment(case_names.parse("float16-xla+notriton"), xla=True,
                                   nvidia=False)
    assert cublas["XLA_FLAGS"].split()[-1] == "--xla_gpu_enable_triton_gemm=false"
    assert "--xla_gpu_enable_llvm_module_compilation_parallelism=true" in env["XLA_FLAGS"]
    assert env["TF_CPP_VMODULE"] == "assemble_compilation_provider=4"
    for bad, says in (("fp8-xla", "PRECISION one of plan, float32"),
                      ("plan+autotune9", "autotuneN (N 0-4)"), ("plan+b0", "option 'b0'"),
                      ("plan+NHWC", "nvenv, prefetch, nhwc, tfrecords")):
        with pytest.raises(case_names.CaseError, match=re.escape(says)):
            case_names.parse(bad)
    done = subprocess.run([sys.executable, str(BENCHMARK), "all", "--cases", "plan+turbo"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "option 'turbo' is not one of" in done.stderr
    from trainer.benchmark.probe import plan_for

    cpu = plan_for("cpu", None)
    assert (cpu.mixed_precision, cpu.xla) == ("off", False)


@pytest.mark.slow
def test_the_benchmark_runs_the_trainers_step_as_planned_for_an_h100(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, str(BENCHMARK), "prepare", "--out", str(data),
                    "--images", "40", "--size", "32"], check=True, capture_output=True,
                   timeout=120)
    output = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "all", "--data", str(data), "--allow-cpu",
         "--model", "cnn", "--size", "32", "--batch", "4", "--classes", "10", "--warmup", "1",
         "--steps", "2",
         "--cases", "plan+tfrecords+profile,bfloat16-xla+b8", "--output", str(output),
         "--logs", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "BENCH_AS_DEVICE": "NVIDIA H100 80GB HBM3"})
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(output.read_text())
    assert (results["schema"], results["accelerator"], results["device"], results["model"]) \
        == (2, "", "cpu", "cnn")
    (run,) = results["runs"]
    check = run["check"]
    assert check["gpus"] == 0 and check["build"]["is_cuda_build"]
    assert check["matmul"] and check["conv"] and check["xla"]
    # The trainer's GPU check passes with the GPUs there are and refuses one more.
    assert check["gpu_check_passes"] and check["gpu_check_refuses"]
    assert "--expected-gpus 1" in check["gpu_check_message"]
    assert "mixed precision off; XLA off; NVIDIA's environment" in check["plan"]
    assert check["xla_compiler"]["compiler"] in ("ptxas", "driver")
    phases = [(c["case"], c["phase"], c.get("input")) for c in run["cases"]]
    assert phases == [
        ("plan+tfrecords+profile", "warmup", None),
        ("plan+tfrecords+profile", "timed", "synthetic"),
        ("plan+tfrecords+profile", "timed", "tfrecords"),
        ("plan+tfrecords+profile", "profile", None),
        ("bfloat16-xla+b8", "warmup", None), ("bfloat16-xla+b8", "timed", "synthetic")]
    plan, records = run["cases"][1], run["cases"][2]
    # The plan's case runs as the plan says: on an H100, float32 (its own file's fastest
    # precision) with NVIDIA's environment (the H200's files standing in).
    assert (plan["policy"], plan["xla"], plan["batch"], plan["nvidia_environment"]) == (
        "float32", False, 4, True)
    assert records["images_per_second"] > 0 and records["step_ms"] > 0 and records["steps"] == 2
    assert plan["peak_memory_gib"] is None  # no GPU: no allocator to read
    # The profile ran the trainer's profiler; on a CPU it says there are no GPU kernels.
    assert run["cases"][3]["profile"]["error"].startswith("no GPU kernels in the trace")
    variant = run["cases"][5]
    assert (variant["policy"], variant["xla"], variant["batch"]) == ("mixed_bfloat16", True, 8)
    assert "xla_compiler" in variant  # planned for an H100: XLA's compiler is read
    assert run["skipped"] == [] and run["call"].startswith("benchmarks/gpu.py at commit ")
    assert (tmp_path / "logs" / "check.log").exists()
    assert (tmp_path / "logs" / "plan_tfrecords_profile.log").exists()
    assert "plan+tfrecords+profile: " in done.stdout and "images/s" in done.stdout


def test_a_case_line_leaves_out_what_the_machine_could_not_measure():
    """On CPUs there is no peak GPU memory or utilisation: the line leaves them out
    rather than print None; on a GPU both are said."""
    from trainer.benchmark.runner import line

    case = {"case": "float32", "images_per_second": 812.4, "step_ms": 39.4, "policy": "float32",
            "xla": False, "batch": 32, "input": "synthetic"}
    on_cpus = line({**case, "peak_memory_gib": None, "gpu_utilization_mean": None})
    assert "None" not in on_cpus and "GiB" not in on_cpus and "busy" not in on_cpus
    assert on_cpus.startswith("float32: 812 images/s, 39.4 ms/step")
    on_gpu = line({**case, "peak_memory_gib": 61.2, "gpu_utilization_mean": 97})
    assert on_gpu.endswith(", peak 61.2 GiB, GPU busy 97%")
