"""XLA's PTX compiler as a replica reads it (`trainer.run.gpu_environment`): ptxas from
`--xla_gpu_cuda_data_dir`'s bin/ before PATH, as XLA looks for it, its version from the tool
itself, nvlink's presence (parallel compilation), and a ptxas XLA warns about on Hopper."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types

import pytest

from trainer.run import gpu_environment


def _tool(folder, name, version):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version[:4]}, "
                    f"V{version}'\n")
    path.chmod(0o755)
    return path


def test_the_data_dirs_ptxas_comes_before_the_one_on_path(tmp_path):
    data_dir = tmp_path / "cuda_nvcc"
    ours = _tool(data_dir / "bin", "ptxas", "12.9.86")
    _tool(tmp_path / "elsewhere", "ptxas", "12.5.82")
    environ = {"XLA_FLAGS": f"--xla_gpu_cuda_data_dir={data_dir} --xla_gpu_autotune_level=4",
               "PATH": str(tmp_path / "elsewhere")}
    found = gpu_environment.compiler(environ)
    assert found == {"compiler": "ptxas", "version": "12.9.86", "path": str(ours),
                     "parallel": "no"}
    assert gpu_environment.describe(found) == (
        f"XLA compiles PTX with ptxas 12.9.86 ({ours}), one module at a time")


def test_an_old_ptxas_is_named_as_one_xla_warns_about_and_nvlink_allows_parallel(tmp_path):
    tools = tmp_path / "bin"
    _tool(tools, "ptxas", "12.5.82")
    _tool(tools, "nvlink", "12.5.82")
    found = gpu_environment.compiler({"PATH": str(tools)})
    assert found["version"] == "12.5.82" and found["parallel"] == "possible (nvlink found)"
    line = gpu_environment.describe(found)
    assert "in parallel" in line and "NVIDIA bug 4826023" in line


def test_without_ptxas_the_driver_compiles(tmp_path):
    found = gpu_environment.compiler({"PATH": str(tmp_path), "XLA_FLAGS": ""})
    assert found["compiler"] == "driver"
    assert gpu_environment.describe(found).startswith("XLA compiles PTX with the CUDA driver")


def test_a_tool_that_says_no_version_is_unknown(tmp_path):
    silent = tmp_path / "ptxas"
    silent.write_text("#!/bin/sh\necho nothing\n")
    silent.chmod(0o755)
    assert gpu_environment.tool_version(str(silent)) == "unknown"
    assert gpu_environment.tool_version(os.devnull) == "unknown"


def test_nvidias_environment_is_set_without_overriding_what_is_there():
    environ = {"TF_GPU_THREAD_COUNT": "4"}
    added = gpu_environment.set_nvidia_environment(environ)
    assert environ == {"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "4",
                       "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT": "1",
                       "TF_AUTOTUNE_THRESHOLD": "2"}
    assert "TF_GPU_THREAD_COUNT" not in added and len(added) == 3


def _fake_tf(gpus, grappler=None):
    made = []
    optimizer = types.SimpleNamespace(set_experimental_options=lambda o: grappler.update(o))
    strategies = types.SimpleNamespace(
        MirroredStrategy=lambda: made.append("mirrored") or "mirrored",
        OneDeviceStrategy=lambda device: made.append(device) or f"one device {device}",
        get_strategy=lambda: "default")
    return types.SimpleNamespace(
        config=types.SimpleNamespace(list_physical_devices=lambda kind: ["gpu"] * gpus,
                                     optimizer=optimizer),
        distribute=strategies)


def test_prefetch_to_gpu_trains_one_gpu_under_a_one_device_strategy():
    from trainer.cluster.roles import Layout
    from trainer.cluster.training_plan import plan_training
    from trainer.run.distribution import create_strategy

    plan = plan_training(Layout())
    prefetching = dataclasses.replace(plan, prefetch_to_gpu=True)
    assert create_strategy(_fake_tf(1), prefetching) == "one device /gpu:0"
    assert create_strategy(_fake_tf(1), plan) == "default"
    # Nothing to prefetch to on a CPU; several GPUs keep MirroredStrategy, which already
    # prefetches to each of them.
    assert create_strategy(_fake_tf(0), prefetching) == "default"
    assert create_strategy(_fake_tf(2), prefetching) == "mirrored"


def test_keep_nhwc_turns_graplers_layout_optimizer_off_only_on_gpus():
    from trainer.run.distribution import keep_nhwc

    grappler = {}
    assert keep_nhwc(_fake_tf(1, grappler), True) and grappler == {"layout_optimizer": False}
    untouched = {}
    # Off by default; on a CPU there is no layout to keep (Grappler converts only for GPUs).
    assert not keep_nhwc(_fake_tf(1, untouched), False)
    assert not keep_nhwc(_fake_tf(0, untouched), True) and untouched == {}


@pytest.mark.slow
def test_keep_nhwc_names_an_option_tensorflow_has():
    """The option's key as TensorFlow reads it back: TensorFlow ignores a key it does not
    know ('layout_optimiser' reads back as nothing), so only this shows it is the right one."""
    script = ("import tensorflow as tf; "
              "tf.config.optimizer.set_experimental_options({'layout_optimizer': False}); "
              "print(tf.config.optimizer.get_experimental_options())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'layout_optimizer': False" in done.stdout
