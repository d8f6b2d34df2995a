"""The trainer's step on one GPU: ResNet-50 at 224x224 with 1,000 classes, built and compiled
by the trainer's own code (`trainer.models.factory.build_model`), under the training plan the
project makes for that GPU (`trainer.cluster.training_plan.plan_training`), in each precision
with and without XLA, on synthetic batches and through the trainer's input pipeline
(`trainer.run.data.make_dataset` over TFRecords the dataset stage made).

Each case runs in its own process (Keras's precision policy is global, XLA's compilation is
per process), most important first, as long as `--budget` allows: the plan's own choice
(synthetic, then the TFRecords), then without XLA (synthetic, then the TFRecords), then
float32, then float16, then bfloat16. A case is timed over `--steps` steps after `--warmup`
steps (XLA compilation and cuDNN's autotuning fall in the warm-up, which is timed apart):
images/s, step time, peak GPU memory
(`tf.config.experimental.get_memory_info`) and the GPU's utilisation, sampled every 0.25 s
with NVML by the trainer's sampler (`trainer.run.sampler.Sampler`).

Before the cases, `check` proves what TensorFlow reports: the GPU registered (its build's
CUDA and cuDNN, the device's name and compute capability), small matmul, convolution and
XLA programs, and the trainer's GPU check (`trainer.run.gpu_check.require_gpus`) passing
with 1 expected GPU and refusing 2.

Usage:
  python benchmarks/gpu.py prepare --out DIR [--images N]   (here: the TFRecords to carry)
  python benchmarks/gpu.py all --data DIR [--output FILE] [--budget S] [--batch N] ...
  python benchmarks/gpu.py check | case NAME --data DIR     (one part, as `all` runs them)
On a machine without a GPU, `--allow-cpu` runs the same code (tests, tiny sizes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import common

#: The cases, most important first: (name, precision or "plan", XLA or None for the
#: plan's, input). `all` runs them in this order while the budget lasts.
CASES = (
    ("plan", "plan", None, "synthetic"),
    ("plan-tfrecords", "plan", None, "tfrecords"),
    ("plan-no-xla", "plan", False, "synthetic"),
    # The input pipeline apart from XLA's compile time (which ran out the H100 run's cases).
    ("plan-no-xla-tfrecords", "plan", False, "tfrecords"),
    ("float32-xla", "off", True, "synthetic"),
    ("float32", "off", False, "synthetic"),
    ("float16-xla", "float16", True, "synthetic"),
    ("float16", "float16", False, "synthetic"),
    ("bfloat16-xla", "bfloat16", True, "synthetic"),
    ("bfloat16", "bfloat16", False, "synthetic"),
)
#: NVIDIA's device names -> the catalog's accelerator types (the plan's GPU facts).
DEVICE_TYPES = (("H200", "NVIDIA_H200_141GB"), ("H100", "NVIDIA_H100_80GB"),
                ("A100", "NVIDIA_TESLA_A100"), ("L4", "NVIDIA_L4"), ("T4", "NVIDIA_TESLA_T4"),
                ("V100", "NVIDIA_TESLA_V100"))
RESULT = "RESULT "


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


@contextlib.contextmanager
def gpu_sampled(found: dict[str, Any]) -> Iterator[None]:
    """The trainer's sampler (`trainer.run.sampler.Sampler`, NVML) every 0.25 s while the
    block runs; then the GPU's utilisation and memory in use go into `found`."""
    from trainer.run.efficiency_log import SeriesFile, read_series, replica_path
    from trainer.run.sampler import Sampler, load_nvml

    nvml, missing = load_nvml()
    with tempfile.TemporaryDirectory() as job:
        with Sampler(SeriesFile(replica_path(job, "benchmark")), interval=0.25,
                     flush_every=3600.0, nvml=nvml, nvml_missing=missing):
            yield
        gpus = [line["gpus"][0] for line in read_series(job).get("benchmark", [])
                if line.get("kind") == "sample" and isinstance(line.get("gpus"), list)
                and line["gpus"]]
    if not gpus:
        found.update(gpu_utilization=None, sampled_by=missing or "nothing")
        return
    busy = [gpu["utilization_percent"] for gpu in gpus]
    found.update(gpu_utilization_mean=round(sum(busy) / len(busy), 1),
                 gpu_utilization_min=min(busy),
                 gpu_memory_used_gib_max=round(max(g["memory_used_bytes"] for g in gpus)
                                               / 2**30, 2),
                 samples=len(busy), sampled_by="NVML")


def inputs(tf: Any, source: str, data: str, batch: int, size: int, classes: int) -> Any:
    """Synthetic uint8 batches (what the input pipeline hands the model), or the dataset
    stage's TFRecords through the trainer's input pipeline (JPEG crops, flips), repeated."""
    if source == "synthetic":
        images = tf.cast(tf.random.uniform((batch, size, size, 3), maxval=256, dtype=tf.int32),
                         tf.uint8)
        labels = tf.random.uniform((batch,), maxval=classes, dtype=tf.int64)
        return tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(2)
    from trainer.common.contract import image_format, load_manifest, shard_paths
    from trainer.run.data import InputSpec, make_dataset

    manifest = load_manifest(data)
    spec = InputSpec(tuple(shard_paths(data, manifest, "train")), size, batch, training=True,
                     cache=False, image_format=image_format(manifest), augment=True)
    return make_dataset(tf, spec)


def case(name: str, data: str, batch: int, size: int, classes: int, warmup: int,
         steps: int) -> dict[str, Any]:
    """One case in this process: the trainer's model under the plan (or a variant of it)."""
    _, precision, xla, source = next(c for c in CASES if c[0] == name)
    tf = _tensorflow()
    import tf_keras as keras

    from trainer.models.factory import build_model
    from trainer.run.distribution import apply_precision

    device_name, capability = device(tf)
    plan = plan_for(device_name, capability)
    if precision != "plan":
        plan = dataclasses.replace(plan, mixed_precision=precision)
    if xla is not None:
        plan = dataclasses.replace(plan, xla=xla)
    apply_precision(keras, plan)
    model = build_model(keras, "resnet50", size, classes, 1e-3, jit_compile=plan.xla)
    dataset = inputs(tf, source, data, batch, size, classes)
    started = time.perf_counter()
    model.fit(dataset, steps_per_epoch=warmup, epochs=1, verbose=0)
    warm = time.perf_counter() - started
    gpu = "GPU:0" if tf.config.list_physical_devices("GPU") else None
    if gpu:
        tf.config.experimental.reset_memory_stats(gpu)
    utilization: dict[str, Any] = {}
    with gpu_sampled(utilization):
        started = time.perf_counter()
        history = model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - started
    peak = tf.config.experimental.get_memory_info(gpu)["peak"] / 2**30 if gpu else None
    return {"case": name, "input": source, "mixed_precision": plan.mixed_precision,
            "policy": keras.mixed_precision.global_policy().name, "xla": plan.xla,
            "batch": batch, "image_size": size, "classes": classes, "device": device_name,
            "warmup_steps": warmup, "warmup_seconds": round(warm, 1), "steps": steps,
            "step_ms": round(seconds / steps * 1e3, 2),
            "images_per_second": round(batch * steps / seconds, 1),
            "peak_memory_gib": round(peak, 2) if peak is not None else None,
            "loss": round(float(history.history["loss"][-1]), 4), **utilization}


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """`check`, then every case in order, each in its own process, within the budget."""
    deadline = time.monotonic() + args.budget
    me = [sys.executable, str(Path(__file__).resolve())]
    sizes = ["--batch", str(args.batch), "--size", str(args.size), "--classes",
             str(args.classes), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    flags = ["--allow-cpu"] if args.allow_cpu else []
    results: dict[str, Any] = {"machine": common.machine(), "cases": [], "skipped": []}
    # The check logs which CUDA libraries TensorFlow opens (a "Cannot dlopen" shows there).
    loading = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "dso_loader=1"}
    results["check"] = _child([*me, "check", *flags], args.check_timeout, args.logs, "check",
                              loading)
    print(f"check: {json.dumps(results['check'])}", flush=True)
    if not (results["check"].get("gpus") or args.allow_cpu):
        results["stopped"] = "TensorFlow registered no GPU"
        return results
    wanted = [c[0] for c in CASES if not args.cases or c[0] in args.cases.split(",")]
    for name in wanted:
        left = deadline - time.monotonic()
        if left < args.case_timeout / 2:
            results["skipped"].append(name)
            continue
        found = _child([*me, "case", name, "--data", args.data, *sizes, *flags],
                       min(args.case_timeout, left), args.logs, name)
        results["cases"].append({"case": name, **found})
        print(_line(results["cases"][-1]), flush=True)
    return results


def _child(command: list[str], timeout: float, logs: Path | None, name: str,
           environ: dict[str, str] | None = None) -> dict[str, Any]:
    """A part run in its own process: its RESULT line, or why there is none; with `logs`,
    its whole output is kept there as `<name>.log`."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(environ or {})})
    except subprocess.TimeoutExpired as exc:
        done = subprocess.CompletedProcess(command, -9, _text(exc.stdout), _text(exc.stderr))
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text(done.stdout + done.stderr)
    if done.returncode == -9:
        return {"error": f"timed out after {timeout:.0f} s",
                "log_tail": (done.stdout + done.stderr).strip().splitlines()[-12:]}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            return {**json.loads(line[len(RESULT):]),
                    "process_seconds": round(time.monotonic() - started, 1)}
    tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
    return {"error": f"exit {done.returncode}", "log_tail": tail}


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _line(found: dict[str, Any]) -> str:
    if "error" in found:
        return f"{found['case']}: {found['error']}"
    return (f"{found['case']}: {found['images_per_second']:,.0f} images/s, "
            f"{found['step_ms']} ms/step ({found['policy']}, xla {found['xla']}, "
            f"{found['input']}), warm-up {found['warmup_seconds']} s, peak "
            f"{found['peak_memory_gib']} GiB, GPU busy {found.get('gpu_utilization_mean')}%")


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
    parser.add_argument("name", nargs="?", help="The case (`case`).")
    parser.add_argument("--data", default="", help="The dataset stage's output.")
    parser.add_argument("--out", type=Path, help="Where `prepare` writes the dataset.")
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--cases", default="", help="Comma-separated names (default: all).")
    parser.add_argument("--budget", type=float, default=480.0, help="Seconds for `all`.")
    parser.add_argument("--case-timeout", type=float, default=200.0)
    parser.add_argument("--check-timeout", type=float, default=120.0)
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--output", type=Path, help="Where `all` writes its JSON.")
    parser.add_argument("--logs", type=Path, help="Where `all` keeps each part's output.")
    args = parser.parse_args(argv)
    if args.part == "prepare":
        print(json.dumps(prepare(args.out, args.images, args.size)))
    elif args.part == "check":
        print(RESULT + json.dumps(check(args.allow_cpu)), flush=True)
    elif args.part == "case":
        print(RESULT + json.dumps(case(args.name, args.data, args.batch, args.size,
                                       args.classes, args.warmup, args.steps)), flush=True)
    else:
        results = run_all(args)
        path = common.save("gpu", results, args.output)
        print(f"results: {path}")
        return 0 if results["cases"] and all("error" not in c for c in results["cases"]) \
            else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
