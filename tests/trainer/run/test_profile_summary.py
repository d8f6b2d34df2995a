"""The profile summary (`trainer.run.profile_summary`): the top kernels and the share of the
traced window per kind of work and in idle gaps, read from TensorFlow's own trace format
(an XSpace with a GPU plane as CUPTI's collector writes it, built here with TensorFlow's
xplane_pb2); and on this CPU, a real trace says plainly that it holds no GPU kernels."""

from __future__ import annotations

import pytest

from trainer.run.profile_summary import IDLE, kind_of, summarize, summarize_trace, trace_files

MS = 10**9  # picoseconds


@pytest.mark.parametrize("name,kind", [
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "convolutions and matmuls"),
    ("cutlass3x_sm90_tensorop_gemm_bf16", "convolutions and matmuls"),
    ("sm80_xmma_dgrad_implicit_gemm_indexed_f16f16", "convolutions and matmuls"),
    ("bn_fw_tr_1C11_kernel_NCHW", "batch norm"),
    ("loop_convert_fusion_12", "casts"),
    ("transpose_fusion_3", "transposes"),
    ("void tensorflow::functor::SwapDimension1And2InTensor3UsingTiles", "transposes"),
    ("input_reduce_fusion_7", "reductions"),
    ("loop_add_fusion_2", "element-wise"),
    ("void Eigen::internal::EigenMetaKernel<relu>", "element-wise"),
    ("MemcpyH2D", "copies"),
    ("some_unknown_kernel", "other"),
])
def test_kernels_are_sorted_into_kinds_by_name(name, kind):
    assert kind_of(name) == kind


def test_shares_idle_gaps_and_top_kernels_over_overlapping_streams():
    kernels = [
        ("sm90_xmma_fprop_implicit_gemm", 0, 4 * MS),      # stream 1
        ("loop_convert_fusion", 2 * MS, 5 * MS),           # stream 2, overlaps the first
        ("sm90_xmma_fprop_implicit_gemm", 6 * MS, 8 * MS),  # after a 1 ms gap
        ("input_reduce_fusion", 9 * MS, 10 * MS),           # after another 1 ms gap
    ]
    found = summarize(kernels, steps=2)
    assert (found["window_ms"], found["step_ms"]) == (10.0, 5.0)
    # Busy is the union of the intervals: 0-5, 6-8, 9-10 = 8 of 10 ms.
    assert found["busy_percent"] == 80.0 and found["shares"][IDLE] == 20.0
    assert found["shares"]["convolutions and matmuls"] == 60.0
    assert found["shares"]["casts"] == 30.0 and found["shares"]["reductions"] == 10.0
    top = found["top_kernels"]
    assert [k["kernel"] for k in top] == ["sm90_xmma_fprop_implicit_gemm",
                                          "loop_convert_fusion", "input_reduce_fusion"]
    assert (top[0]["calls"], top[0]["ms"], top[0]["percent"]) == (2, 6.0, 60.0)
    assert (found["kernels"], found["launches"]) == (3, 4)
    assert summarize([], steps=5)["error"] == "no kernels in the trace"


def _space(path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    host = space.planes.add(name="/host:CPU")
    host.lines.add(name="python").events.add(metadata_id=1, offset_ps=0, duration_ps=50 * MS)
    gpu = space.planes.add(name="/device:GPU:0")
    for key, name in ((1, "sm90_xmma_wgrad_implicit_gemm"), (2, "loop_multiply_fusion"),
                      (3, "XLA op that repeats the kernels")):
        gpu.event_metadata[key].id = key
        gpu.event_metadata[key].name = name
    stream = gpu.lines.add(name="Stream #7(Compute)", timestamp_ns=1000)
    stream.events.add(metadata_id=1, offset_ps=0, duration_ps=3 * MS)
    stream.events.add(metadata_id=2, offset_ps=4 * MS, duration_ps=1 * MS)
    # A derived line repeats the same time: not counted.
    gpu.lines.add(name="XLA Ops", timestamp_ns=1000).events.add(
        metadata_id=3, offset_ps=0, duration_ps=5 * MS)
    path.write_bytes(space.SerializeToString())
    return path


def test_a_trace_file_is_read_from_the_gpu_planes_streams(tmp_path):
    found = summarize_trace(str(_space(tmp_path / "host.xplane.pb")), steps=1)
    assert found["device"] == "/device:GPU:0" and found["launches"] == 2
    assert found["shares"] == {"convolutions and matmuls": 60.0, "element-wise": 20.0,
                               IDLE: 20.0}


def test_a_cpu_trace_says_it_holds_no_gpu_kernels(tmp_path):
    import tensorflow as tf

    logdir = str(tmp_path / "profile")
    tf.profiler.experimental.start(logdir)
    tf.reduce_sum(tf.ones((64, 64)) @ tf.ones((64, 64)))
    tf.profiler.experimental.stop()
    [trace] = trace_files(logdir)
    assert summarize_trace(trace, steps=1)["error"].startswith("no GPU kernels in the trace")
