"""What a profiler trace says about a training step on a GPU, in a few figures: the top
kernels by time, and the share of the traced window in each kind of work (convolutions
and matmuls, element-wise ops, reductions, casts, transposes, batch norm, copies) and in
idle gaps, when no kernel ran on the device.

It reads the trace `tf.profiler.experimental.start/stop` writes (`trainer.run.profile_steps`):
`<logdir>/plugins/profile/<run>/<host>.xplane.pb`, an `XSpace` protocol buffer
(tensorflow/tsl/profiler/protobuf/xplane.proto). CUPTI's kernels and copies are the events
of the device plane's lines named "Stream #<id>(...)" (tsl/profiler/utils/xplane_schema.h:
`kGpuPlanePrefix` "/device:GPU:", and the CUPTI collector names each stream's line so);
the profiler's derived lines on that plane ("Steps", "XLA Ops", "TensorFlow Ops", ...)
repeat the same time and are not counted.

The kinds are read from the kernels' names, so they are approximate: cuDNN's and cuBLAS's
kernels name what they compute (`sm90_xmma_fprop_implicit_gemm...`, `bn_fw_tr...`), XLA's
fusions their root (`loop_convert_fusion`, `input_reduce_fusion`, `transpose_fusion`).
Under XLA, batch norm is expanded into reductions and element-wise fusions, so its time
shows there. Pure Python over the protocol buffer, so it runs where the trace is read.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from typing import Any

#: The kinds of kernel, in the order a name is tried against them (the first match wins).
KINDS = (
    ("copies", re.compile(r"memcpy|memset|copy_?h2d|copy_?d2h", re.I)),
    ("transposes", re.compile(r"transpose|nchw_?to_?nhwc|nhwc_?to_?nchw|swapdim|shuffle",
                              re.I)),
    ("casts", re.compile(r"convert|cast", re.I)),
    ("batch norm", re.compile(r"batch_?norm|\bbn_|^bn|cudnn::bn|batchnorm", re.I)),
    ("convolutions and matmuls", re.compile(
        r"xmma|gemm|conv|cudnn|cutlass|wgrad|dgrad|fprop|winograd|cublas|implicit|"
        r"sm\d+_|magma|dot", re.I)),
    ("reductions", re.compile(r"reduce|reduction|argmax|sum_|mean", re.I)),
    ("element-wise", re.compile(r"fusion|loop_|elementwise|eigen|relu|add|mul|scalar|"
                                r"select|exp|log|sqrt|rsqrt|pow|max|min|random|philox|"
                                r"rng|bias", re.I)),
)
OTHER = "other"
IDLE = "idle gaps"
#: The device planes' prefix and the lines CUPTI's events are on.
DEVICE_PLANE = "/device:GPU:"
STREAM_LINE = "Stream #"
TOP = 15
#: The profiler's own lines on a device plane, which repeat the streams' time (used only
#: when no line is named for a stream).
DERIVED_LINES = {"Steps", "XLA Modules", "XLA Ops", "Async XLA Ops", "TensorFlow Ops",
                 "TensorFlow Name Scope", "Framework Ops", "Framework Name Scope",
                 "Source code", "Launch Stats", "XLA TraceMe"}


def kind_of(kernel: str) -> str:
    """The kind of work a kernel does, from its name."""
    return next((kind for kind, pattern in KINDS if pattern.search(kernel)), OTHER)


def summarize(intervals: Iterable[tuple[str, int, int]], steps: int,
              top: int = TOP) -> dict[str, Any]:
    """The summary of one device's kernels.

    Args:
        intervals: (kernel name, start, end) in picoseconds, any order, any streams.
        steps: Training steps the trace holds (for the time per step).
        top: How many kernels to list.

    Returns:
        `window_ms` (first start to last end), `step_ms`, `busy_percent` (time when some
        kernel ran), `shares` (percent of the window per kind and `idle gaps`; kernels that
        overlap on several streams count in full, so the kinds may add up to over 100),
        `top_kernels` (name, kind, total ms, calls, percent of the window), `kernels`
        (how many distinct ones ran) and `launches`.
    """
    found = sorted(intervals, key=lambda item: item[1])
    if not found:
        return {"kernels": 0, "launches": 0, "error": "no kernels in the trace"}
    start, end = found[0][1], max(item[2] for item in found)
    window = max(end - start, 1)
    covered = 0
    cursor = start
    by_name: dict[str, list[int]] = {}
    for name, begin, finish in found:
        if finish > cursor:
            covered += finish - max(begin, cursor)
            cursor = finish
        total = by_name.setdefault(name, [0, 0])
        total[0] += finish - begin
        total[1] += 1
    busy = covered
    shares: dict[str, float] = {}
    for name, (total, _) in by_name.items():
        kind = kind_of(name)
        shares[kind] = shares.get(kind, 0.0) + total
    percent = {kind: round(100 * value / window, 1) for kind, value in
               sorted(shares.items(), key=lambda item: -item[1])}
    percent[IDLE] = round(100 * (window - busy) / window, 1)
    ranked = sorted(by_name.items(), key=lambda item: -item[1][0])[:top]
    return {
        "window_ms": round(window / 1e9, 2),
        "step_ms": round(window / 1e9 / max(steps, 1), 2),
        "busy_percent": round(100 * busy / window, 1),
        "shares": percent,
        "top_kernels": [{"kernel": name[:160], "kind": kind_of(name),
                         "ms": round(total / 1e9, 3), "calls": calls,
                         "percent": round(100 * total / window, 1)}
                        for name, (total, calls) in ranked],
        "kernels": len(by_name),
        "launches": len(found),
    }


def device_intervals(space: Any) -> dict[str, list[tuple[str, int, int]]]:
    """Each GPU plane's kernels and copies as (name, start ps, end ps), by plane name."""
    planes: dict[str, list[tuple[str, int, int]]] = {}
    for plane in space.planes:
        if not plane.name.startswith(DEVICE_PLANE):
            continue
        names = {key: meta.display_name or meta.name
                 for key, meta in plane.event_metadata.items()}
        events = planes.setdefault(plane.name, [])
        streams = [line for line in plane.lines if line.name.startswith(STREAM_LINE)] or \
            [line for line in plane.lines if line.name not in DERIVED_LINES]
        for line in streams:
            base = line.timestamp_ns * 1000
            for event in line.events:
                begin = base + event.offset_ps
                events.append((names.get(event.metadata_id, "?"), begin,
                               begin + event.duration_ps))
    return planes


def trace_files(logdir: str) -> list[str]:
    """The traces under a profiler log directory, newest run last."""
    return sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))


def summarize_trace(path: str, steps: int) -> dict[str, Any]:
    """The summary of the first GPU in one trace file (`{"error": ...}` without a GPU's
    kernels: a CPU run, or CUPTI that did not load)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    planes = device_intervals(space)
    if not planes or not any(planes.values()):
        return {"trace": path, "error": "no GPU kernels in the trace (no GPU, or CUPTI did "
                                        "not load: libcupti.so.12 on the library path)"}
    name = sorted(planes)[0]
    return {"trace": path, "device": name, **summarize(planes[name], steps)}
