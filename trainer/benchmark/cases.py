"""The cases of the GPU benchmark (`benchmarks/gpu.py`): what one case is, and one case run
in this process.

The case names are `trainer.cluster.case_names`'s.

A case prints one `RESULT {...}` line per phase as soon as the phase ends (warm-up and
synthetic batches, the profile, the TFRecords), so a case stopped by its time limit keeps
the phases it finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.cluster.case_names import TRAINER_PRECISION, Case

RESULT = "RESULT "
PROFILE_STEPS = 5
#: Steps through the TFRecords before they are timed (the pipeline fills its buffers).
TFRECORDS_WARMUP = 3


def environment(case: Case, xla: bool, nvidia: bool) -> dict[str, str]:
    """The variables a case sets before TensorFlow starts: XLA's log of its compiler
    choice, NVIDIA's environment (`nvidia`), XLA's flags of `parallel`, `notriton` and
    `autotuneN`."""
    from trainer.run import gpu_environment, xla_compile

    changed: dict[str, str] = {}
    if xla:
        changed["TF_CPP_MIN_LOG_LEVEL"] = "0"
        changed["TF_CPP_VMODULE"] = f"{gpu_environment.COMPILER_LOG_MODULE}=4"
    if nvidia:  # as the trainer sets it where the plan says so
        changed.update(gpu_environment.set_nvidia_environment({}))
    # Parallel compilation needs a thread pool and nvlink or, without it (the image: the
    # nvcc wheel has none), the driver's linker (trainer.run.xla_compile).
    extra = (xla_compile.parallel_flags(os.cpu_count() or 1, driver_links=True)
             if case.parallel else []) \
        + ([xla_compile.flag("xla_gpu_autotune_level", case.autotune)]
           if case.autotune is not None else []) \
        + ([xla_compile.flag("xla_gpu_enable_triton_gemm", False)] if case.notriton else [])
    changed.update(xla_compile.with_flags(os.environ, xla=extra))
    return changed


def emit(found: dict[str, Any]) -> None:
    print(RESULT + json.dumps(found), flush=True)


def run(case: Case, plan: Any, data: str, batch: int, size: int, classes: int, warmup: int,
        steps: int, model: str = "resnet50", user_code: str = "", xla_cache: str = "") -> None:
    """Runs one case of `model` (`training.model`; random weights) in this process
    (TensorFlow not yet imported), printing each phase; `data` ("" for none) is a prepared
    dataset for the `tfrecords` phase; `xla_cache`, with the `cache` switch, is where XLA's
    caches are restored from before TensorFlow starts and saved to after the warm-up."""
    xla = plan.xla if case.xla is None else case.xla
    precision = plan.mixed_precision if case.precision == "plan" else \
        TRAINER_PRECISION[case.precision]
    # The plan's case runs with NVIDIA's environment, NHWC and prefetching where the plan
    # turns them on; the others (and the plan's, with `nvenv`, `nhwc`, `prefetch`) where
    # the case name asks for them.
    own = case.precision == "plan"
    nvidia = case.nvidia_environment or (own and plan.nvidia_environment)
    plan = dataclasses.replace(plan, xla=xla, mixed_precision=precision,
                               nvidia_environment=nvidia,
                               keep_nhwc=case.keep_nhwc or (own and plan.keep_nhwc),
                               prefetch_to_gpu=case.prefetch or (own and plan.prefetch_to_gpu))
    os.environ.update(environment(case, xla, nvidia))
    from trainer.run import gpu_environment, xla_compile

    cache, restored = None, 0
    if case.xla_cache and xla_cache:
        cache = Path(tempfile.mkdtemp(prefix="xla-cache-"))
        restored = xla_compile.restore(xla_cache, cache)
        os.environ.update(xla_compile.cache_environment(cache, os.environ))

    compiler = gpu_environment.compiler(os.environ) if xla and plan.gpus_per_machine else None
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from trainer.models.factory import build_model
    from trainer.run.distribution import apply_precision, create_strategy, keep_nhwc

    batch = case.batch or batch
    gpu = "GPU:0" if tf.config.list_physical_devices("GPU") else None
    # The trainer's own strategy and layout for the plan.
    strategy = create_strategy(tf, plan)
    nhwc = keep_nhwc(tf, plan.keep_nhwc)
    apply_precision(keras, plan)
    with strategy.scope():
        built = build_model(keras, model, size, classes, 1e-3, jit_compile=plan.xla,
                            steps_per_execution=case.steps_per_execution, user_code=user_code)
    common = {"case": case.name, "model": model, "mixed_precision": plan.mixed_precision,
              "policy": keras.mixed_precision.global_policy().name, "xla": plan.xla,
              "batch": batch, "image_size": size, "classes": classes,
              "steps_per_execution": case.steps_per_execution,
              "nvidia_environment": nvidia, "prefetch": plan.prefetch_to_gpu, "keep_nhwc": nhwc,
              "xla_flags": os.environ.get("XLA_FLAGS", ""),
              **({"xla_compiler": compiler} if compiler else {})}
    synthetic = inputs(tf, "synthetic", data, batch, size, classes)
    started = time.perf_counter()
    built.fit(synthetic, steps_per_epoch=warmup, epochs=1, verbose=0)
    warm = time.perf_counter() - started
    if cache is not None:  # the step is compiled: what is new goes to the cache now
        common["xla_cache"] = {"start": "warm" if restored else "cold", "restored": restored,
                               "saved": xla_compile.save(cache, xla_cache)}
    emit({**common, "phase": "warmup", "warmup_steps": warmup,
          "warmup_seconds": round(warm, 1)})
    emit({**common, "phase": "timed", "input": "synthetic", "warmup_steps": warmup,
          "warmup_seconds": round(warm, 1), **timed(tf, built, synthetic, steps, batch, gpu)})
    if case.tfrecords and data:
        records = inputs(tf, "tfrecords", data, batch, size, classes)
        built.fit(records, steps_per_epoch=TFRECORDS_WARMUP, epochs=1, verbose=0)
        emit({**common, "phase": "timed", "input": "tfrecords",
              **timed(tf, built, records, steps, batch, gpu)})
    if case.profile:  # last: a profiler that fails takes no figure with it
        emit({**common, "phase": "profile", **profiled(tf, built, synthetic)})


def timed(tf: Any, model: Any, dataset: Any, steps: int, batch: int,
          gpu: str | None) -> dict[str, Any]:
    """`steps` steps of `fit`, timed, with the GPU's utilisation and peak memory."""
    if gpu:
        tf.config.experimental.reset_memory_stats(gpu)
    utilization: dict[str, Any] = {}
    with gpu_sampled(utilization):
        started = time.perf_counter()
        history = model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - started
    peak = tf.config.experimental.get_memory_info(gpu)["peak"] / 2**30 if gpu else None
    return {"steps": steps, "step_ms": round(seconds / steps * 1e3, 2),
            "images_per_second": round(batch * steps / seconds, 1),
            "peak_memory_gib": round(peak, 2) if peak is not None else None,
            "loss": round(float(history.history["loss"][-1]), 4), **utilization}


def profiled(tf: Any, model: Any, dataset: Any) -> dict[str, Any]:
    """A trace of PROFILE_STEPS steps by the trainer's profiler callback, summarised."""
    from trainer.run.profile_steps import WARMUP, ProfileSteps
    from trainer.run.profile_summary import summarize_trace, trace_files

    with tempfile.TemporaryDirectory() as logdir:
        total = WARMUP + PROFILE_STEPS
        callback = ProfileSteps(tf, logdir, PROFILE_STEPS, total)
        model.fit(dataset, steps_per_epoch=total, epochs=1, verbose=0, callbacks=[callback])
        traces = trace_files(logdir)
        if not traces:
            return {"profile": {"error": "the profiler wrote no trace"}}
        summary = summarize_trace(traces[-1], PROFILE_STEPS)
        summary.pop("trace", None)
        return {"profile": {"steps": PROFILE_STEPS, **summary}}


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
