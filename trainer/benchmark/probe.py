"""What TensorFlow reports of the machine before the benchmark's cases: the GPU registered
(its build's CUDA and cuDNN, the device's name and compute capability), small matmul,
convolution and XLA programs, the trainer's GPU check passing with the GPUs there are and
refusing one more, and the training plan the project makes for that GPU."""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from typing import Any

from trainer.cluster.accelerators import ACCELERATORS, accelerator_of_device, seen
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import TrainingPlan, plan_training, requested


def tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    return tf


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, OS, and the versions that matter for the figures."""
    model = platform.processor() or platform.machine()
    memory_gb = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
            memory_gb = round(kb / 2**20, 1)
    except (OSError, StopIteration):
        pass
    versions = {"python": platform.python_version()}
    for package in ("tensorflow", "tf-keras", "kfp", "pillow"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return {"cores": os.cpu_count(), "cpu": model, "memory_gb": memory_gb,
            "system": f"{platform.system()} {platform.machine()}", "versions": versions}


def plan_for(device_name: str, capability: tuple[int, int] | None,
             options: Any = None) -> TrainingPlan:
    """The training plan stage 1 makes for one machine with this GPU (the CPU's without
    one; `BENCH_AS_DEVICE` names the GPU to plan for on a machine without, for tests),
    with the training options given (`TrainingOptions`; None: the defaults)."""
    from trainer.run.training_options import TrainingOptions

    kind = accelerator_of_device(os.environ.get("BENCH_AS_DEVICE") or device_name)
    gpu = ACCELERATORS.get(kind) or (seen(capability) if capability else None)
    asked = requested(options if options is not None else TrainingOptions())
    asked["strategy"] = "auto"  # one machine, one GPU
    return plan_training(Layout(), gpu=gpu, gpus=1 if gpu else 0, **asked)


def device(tf: Any) -> tuple[str, tuple[int, int] | None]:
    """The first GPU's name and compute capability ("cpu", None without one)."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", None
    details = tf.config.experimental.get_device_details(gpus[0])
    return str(details.get("device_name", "GPU")), tuple(details.get("compute_capability") or
                                                         (0, 0))


def check(allow_cpu: bool, options: Any = None) -> dict[str, Any]:
    """What TensorFlow reports of the GPU, and the trainer's GPU check on it."""
    from trainer.run import gpu_environment
    from trainer.run.gpu_check import MissingGpuError, require_gpus, unloadable_libraries

    started = time.perf_counter()
    tf = tensorflow()
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
    found["plan"] = plan_for(name, capability, options).summary()
    return found
