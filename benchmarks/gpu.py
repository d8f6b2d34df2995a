"""The trainer's step on one GPU: ResNet-50 at 224x224 with 1,000 classes, built and compiled
by the trainer's own code (`trainer.models.factory.build_model`), under the training plan the
project makes for that GPU (`trainer.cluster.training_plan.plan_training`) and variants of it
(`benchmarks/gpu_cases.py` names them: precision, XLA, batch, steps per execution, NVIDIA's
environment, prefetching to the GPU), on synthetic batches and through the trainer's input
pipeline (`trainer.run.data.make_dataset` over TFRecords the dataset stage made), with a
profile of the plan's step (`trainer.run.profile_summary`).

Each case runs in its own process (Keras's precision policy is global, XLA's compilation is
per process), most important first, as long as `--budget` allows. A case is timed over
`--steps` steps after `--warmup` steps (XLA's compilation and cuDNN's autotuning fall in the
warm-up, which is timed apart): images/s, step time, peak GPU memory
(`tf.config.experimental.get_memory_info`) and the GPU's utilisation, sampled every 0.25 s
with NVML by the trainer's sampler. XLA's cases log which PTX compiler XLA chose. The
results file is rewritten after every case, so a run stopped midway keeps what ended.

Before the cases, `check` proves what TensorFlow reports: the GPU registered (its build's
CUDA and cuDNN, the device's name and compute capability), small matmul, convolution and
XLA programs, and the trainer's GPU check (`trainer.run.gpu_check.require_gpus`) passing
with 1 expected GPU and refusing 2.

Usage:
  python benchmarks/gpu.py prepare --out DIR [--images N]   (here: the TFRecords to carry)
  python benchmarks/gpu.py all --data DIR [--output FILE] [--budget S] [--cases A,B] ...
  python benchmarks/gpu.py check | case NAME --data DIR     (one part, as `all` runs them)
On a machine without a GPU, `--allow-cpu` runs the same code (tests, tiny sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from trainer.benchmark import cases as gpu_cases
from trainer.cluster import case_names

#: The cases `all` runs, most important first (`gpu_cases` reads the names): the plan's own,
#: through the TFRecords and profiled; steps per execution, a larger batch and prefetching
#: on it; bfloat16 with NVIDIA's environment and float32, side by side with it; float32 in
#: NHWC (its NCHW transposes were 11.2% of its step); XLA last, its GEMMs on cuBLAS (its
#: warm-up ran past 210 s on an H200 with Triton's GEMMs, and stopped in their autotuner at
#: level 0).
CASES = ("plan+tfrecords+profile", "plan+spe4", "plan+b512", "plan+prefetch",
         "bfloat16-noxla+nvenv", "float32-noxla", "float32-noxla+nvenv+nhwc",
         "float16-xla+nvenv+notriton")
#: NVIDIA's device names -> the catalog's accelerator types (the plan's GPU facts).
DEVICE_TYPES = (("H200", "NVIDIA_H200_141GB"), ("H100", "NVIDIA_H100_80GB"),
                ("A100", "NVIDIA_TESLA_A100"), ("L4", "NVIDIA_L4"), ("T4", "NVIDIA_TESLA_T4"),
                ("V100", "NVIDIA_TESLA_V100"))
RESULT = gpu_cases.RESULT
#: What XLA's and TensorFlow's logs say of the PTX compiler (kept with each case).
COMPILER_LOG = re.compile(r"assemble_compilation_provider|ptx_compiler_helpers|"
                          r"nvjitlink|ptxas|Please upgrade to CUDA", re.I)


def _tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    return tf


def accelerator_type(device_name: str) -> str:
    """The catalog's type of a device TensorFlow names ("" when it is not a known one)."""
    return next((kind for mark, kind in DEVICE_TYPES if mark in device_name), "")


def plan_for(device_name: str, capability: tuple[int, int] | None) -> Any:
    """The training plan stage 1 makes for one machine with this GPU (the CPU's without
    one; `BENCH_AS_DEVICE` names the GPU to plan for on a machine without, for tests)."""
    from trainer.cluster.accelerators import ACCELERATORS, seen
    from trainer.cluster.roles import Layout
    from trainer.cluster.training_plan import plan_training

    kind = accelerator_type(os.environ.get("BENCH_AS_DEVICE") or device_name)
    gpu = ACCELERATORS.get(kind) or (seen(capability) if capability else None)
    return plan_training(Layout(), gpu=gpu, gpus=1 if gpu else 0)


def device(tf: Any) -> tuple[str, tuple[int, int] | None]:
    """The first GPU's name and compute capability ("cpu", None without one)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", None
    details = tf.config.experimental.get_device_details(gpus[0])
    return str(details.get("device_name", "GPU")), tuple(details.get("compute_capability") or
                                                         (0, 0))


def check(allow_cpu: bool) -> dict[str, Any]:
    """What TensorFlow reports of the GPU, and the trainer's GPU check on it."""
    from trainer.run import gpu_environment
    from trainer.run.gpu_check import MissingGpuError, require_gpus, unloadable_libraries

    started = time.perf_counter()
    tf = _tensorflow()
    found: dict[str, Any] = {"import_seconds": round(time.perf_counter() - started, 1),
                             "gpus": len(tf.config.list_physical_devices("GPU"))}
    build = tf.sysconfig.get_build_info()
    found["build"] = {k: build.get(k) for k in ("cuda_version", "cudnn_version", "is_cuda_build")}
    found["tensorflow"] = tf.__version__
    name, capability = device(tf)
    found["device"], found["compute_capability"] = name, capability
    found["unloadable"] = sorted(unloadable_libraries())
    found["xla_compiler"] = gpu_environment.compiler(os.environ)
    if not found["gpus"] and not allow_cpu:
        return found
    a = tf.random.normal((1024, 1024), dtype=tf.float16)
    found["matmul"] = bool(tf.reduce_all(tf.math.is_finite(tf.matmul(a, a))))
    conv = tf.nn.conv2d(tf.random.normal((8, 32, 32, 3)), tf.random.normal((3, 3, 3, 8)), 1,
                        "SAME")
    found["conv"] = bool(tf.reduce_all(tf.math.is_finite(conv)))
    compiled = tf.function(lambda v: tf.nn.relu(v) * 2.0, jit_compile=True)
    found["xla"] = float(tf.reduce_sum(compiled(tf.ones((1024,))))) == 2048.0
    expected = found["gpus"]
    started = time.perf_counter()
    found["gpu_check_passes"] = require_gpus(tf, expected, os.environ) == found["gpus"]
    try:
        require_gpus(tf, expected + 1, os.environ)
        found["gpu_check_refuses"] = False
    except MissingGpuError as exc:
        found["gpu_check_refuses"] = True
        found["gpu_check_message"] = str(exc).splitlines()[0][:300]
    found["gpu_check_seconds"] = round(time.perf_counter() - started, 2)
    found["plan"] = plan_for(name, capability).summary()
    return found


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """`check`, then every case in order, each in its own process, within the budget; the
    results file is rewritten after each part."""
    deadline = time.monotonic() + args.budget
    me = [sys.executable, str(Path(__file__).resolve())]
    sizes = ["--batch", str(args.batch), "--size", str(args.size), "--classes",
             str(args.classes), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    flags = ["--allow-cpu"] if args.allow_cpu else []
    results: dict[str, Any] = {"machine": common.machine(), "cases": [], "skipped": [],
                               "environment": {k: v for k, v in os.environ.items()
                                               if k.startswith(("XLA_", "TF_"))}}
    # The check logs which CUDA libraries TensorFlow opens (a "Cannot dlopen" shows there).
    loading = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "dso_loader=1"}
    [results["check"]] = _child([*me, "check", *flags], args.check_timeout, args.logs,
                                "check", loading)
    print(f"check: {json.dumps(results['check'])}", flush=True)
    _save(results, args.output)
    if not (results["check"].get("gpus") or args.allow_cpu):
        results["stopped"] = "TensorFlow registered no GPU"
        return results
    found_device = ["--device", str(results["check"].get("device", "cpu")),
                    "--capability", ".".join(map(str, results["check"].get(
                        "compute_capability") or ()))]
    for name in args.cases.split(",") if args.cases else CASES:
        left = deadline - time.monotonic()
        if left < min(args.case_timeout, 120) / 2:
            results["skipped"].append(name)
            continue
        for found in _child([*me, "case", name, "--data", args.data, *sizes, *found_device,
                             *flags], min(args.case_timeout, left), args.logs, name):
            results["cases"].append({"case": name, **found})
            print(_line(results["cases"][-1]), flush=True)
        _save(results, args.output)
    return results


def _save(results: dict[str, Any], output: Path | None) -> Path:
    return common.save("gpu", results, output)


def _child(command: list[str], timeout: float, logs: Path | None, name: str,
           environ: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A part run in its own process: its RESULT lines (one per phase it finished), then
    why it stopped if it did not end well; with `logs`, its output is kept as `<name>.log`
    (`+` and other characters outside letters, digits, `.`, `_` and `-` as `_`)."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(environ or {})})
    except subprocess.TimeoutExpired as exc:
        done = subprocess.CompletedProcess(command, -9, _text(exc.stdout), _text(exc.stderr))
    output = done.stdout + done.stderr
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        # Plain names: the GPU machine's transfer drops files named with a `+`.
        (logs / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".log")).write_text(output)
    compiler_log = list(dict.fromkeys(line.strip()[:300] for line in output.splitlines()
                                      if COMPILER_LOG.search(line)
                                      and not line.startswith(RESULT)))[:16]
    found = [json.loads(line[len(RESULT):]) for line in done.stdout.splitlines()
             if line.startswith(RESULT)]
    for phase in found:
        phase["process_seconds"] = round(time.monotonic() - started, 1)
        if compiler_log and phase.get("xla"):
            phase["xla_compiler_log"] = compiler_log
    if done.returncode == 0 and found:
        return found
    tail = output.strip().splitlines()[-12:]
    error = f"timed out after {timeout:.0f} s" if done.returncode == -9 else \
        f"exit {done.returncode}"
    return [*found, {"phase": "stopped", "error": error, "log_tail": tail,
                     **({"xla_compiler_log": compiler_log} if compiler_log else {})}]


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _line(found: dict[str, Any]) -> str:
    if "error" in found:
        return f"{found['case']}: {found['error']}"
    if found.get("phase") == "warmup":
        return (f"{found['case']}: warm-up {found['warmup_seconds']} s "
                f"({found['warmup_steps']} steps)")
    if found.get("phase") == "profile":
        profile = found["profile"]
        return f"{found['case']}: profile " + (profile.get("error") or json.dumps(
            {k: profile.get(k) for k in ("step_ms", "busy_percent", "shares")}))
    return (f"{found['case']}: {found['images_per_second']:,.0f} images/s, "
            f"{found['step_ms']} ms/step ({found['policy']}, xla {found['xla']}, batch "
            f"{found['batch']}, {found['input']}), peak {found['peak_memory_gib']} GiB, "
            f"GPU busy {found.get('gpu_utilization_mean')}%")


def prepare(out: Path, images: int, size: int) -> dict[str, Any]:
    """The dataset stage's TFRecords of photo-like JPEGs (10 classes), to carry along."""
    from components.dataset.prepare import prepare_source

    with tempfile.TemporaryDirectory() as work:
        source = common.photo_like_folder(Path(work) / "source", classes=10,
                                          per_class=max(1, images // 10), width=500,
                                          height=375)
        manifest = prepare_source(str(source), out, image_size=size, image_format="jpeg",
                                  validation_fraction=0.1, test_fraction=0.0, num_shards=4)
    return {"images": {k: v["count"] for k, v in manifest["splits"].items()},
            "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("all", "check", "case", "prepare"))
    parser.add_argument("name", nargs="?", help="The case (`case`; gpu_cases names them).")
    parser.add_argument("--data", default="", help="The dataset stage's output.")
    parser.add_argument("--out", type=Path, help="Where `prepare` writes the dataset.")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--cases", default="", help="Comma-separated cases (default: CASES).")
    parser.add_argument("--budget", type=float, default=480.0, help="Seconds for `all`.")
    parser.add_argument("--case-timeout", type=float, default=200.0)
    parser.add_argument("--check-timeout", type=float, default=120.0)
    parser.add_argument("--device", default="cpu", help="`case`: the GPU `check` found.")
    parser.add_argument("--capability", default="", help="`case`: its compute capability.")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--output", type=Path, help="Where `all` writes its JSON.")
    parser.add_argument("--logs", type=Path, help="Where `all` keeps each part's output.")
    args = parser.parse_args(argv)
    try:
        for name in ([args.name] if args.part == "case" else
                     args.cases.split(",") if args.part == "all" and args.cases else []):
            case_names.parse(name or "")
    except case_names.CaseError as exc:
        parser.error(str(exc))
    if args.part == "prepare":
        print(json.dumps(prepare(args.out, args.images, args.size)))
    elif args.part == "check":
        print(RESULT + json.dumps(check(args.allow_cpu)), flush=True)
    elif args.part == "case":
        capability = tuple(int(p) for p in args.capability.split(".")) \
            if args.capability else None
        gpu_cases.run(case_names.parse(args.name), plan_for(args.device, capability),
                      args.data, args.batch, args.size, args.classes, args.warmup,
                      args.steps)
    else:
        results = run_all(args)
        path = _save(results, args.output)
        print(f"results: {path}")
        return 0 if results["cases"] and all("error" not in c for c in results["cases"]) \
            else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
