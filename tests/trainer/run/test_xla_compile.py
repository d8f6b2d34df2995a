"""XLA's compile settings and caches: every flag the trainer sets is one the installed
TensorFlow's XLA accepts (an unknown one aborts the process), and the caches are keyed by
GPU type and image, restored before TensorFlow starts and saved after, never failing a run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainer.run import xla_compile

#: A jit-compiled function on the CPU: enough for XLA to parse its flags and compile.
COMPILE = ("import tensorflow as tf\n"
           "f = tf.function(lambda x: tf.nn.relu(x) * 2.0, jit_compile=True)\n"
           "print(float(tf.reduce_sum(f(tf.ones((8,))))))\n")


def _compile(tmp_path, xla_flags: str, tf_xla_flags: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "XLA_FLAGS": xla_flags,
                                            "TF_XLA_FLAGS": tf_xla_flags,
                                            "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.slow
def test_every_flag_the_trainer_sets_is_one_the_installed_xla_accepts(tmp_path):
    values = {"xla_gpu_enable_llvm_module_compilation_parallelism": True,
              "xla_gpu_force_compilation_parallelism": 2,
              "xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found": True,
              "xla_gpu_enable_triton_gemm": False, "xla_gpu_autotune_level": 2,
              "xla_gpu_experimental_enable_fusion_autotuner": True,
              "xla_gpu_per_fusion_autotune_cache_dir": tmp_path / "autotune"}
    assert set(values) == set(xla_compile.XLA_FLAG_NAMES)
    flags = " ".join(xla_compile.flag(name, value) for name, value in values.items())
    cache = xla_compile.flag("tf_xla_persistent_cache_directory", tmp_path / "executables")
    done = _compile(tmp_path, flags, cache)
    assert done.returncode == 0 and done.stdout.strip() == "16.0", done.stderr[-2000:]
    # The persistent cache kept the compiled function (on the CPU as on a GPU).
    assert [p.name.endswith("XLA_CPU_JIT.pb") for p in (tmp_path / "executables").iterdir()] \
        == [True]
    # A name the installed XLA does not know aborts the whole process: why each is listed.
    unknown = _compile(tmp_path, "--xla_gpu_no_such_flag=1")
    assert unknown.returncode != 0 and "Unknown flag in XLA_FLAGS" in unknown.stderr
    with pytest.raises(ValueError, match="not an XLA flag the trainer knows"):
        xla_compile.flag("xla_gpu_no_such_flag", 1)
    # Parallel compilation is asked for with a thread pool (TensorFlow passes XLA none).
    assert xla_compile.parallel_flags(16) == [
        "--xla_gpu_enable_llvm_module_compilation_parallelism=true",
        "--xla_gpu_force_compilation_parallelism=16"]
    assert xla_compile.with_flags({"XLA_FLAGS": "--a=1"}, xla=["--b=2"]) == \
        {"XLA_FLAGS": "--a=1 --b=2"}


def test_the_cache_is_keyed_restored_and_saved_and_never_fails_a_run(tmp_path):
    image = "r/gpu-pipeline-gpu@sha256:" + "cd" * 32
    assert xla_compile.cache_location("gs://b/root/xla-cache/", "NVIDIA_L4", image) == \
        "gs://b/root/xla-cache/NVIDIA_L4/cdcdcdcdcdcdcdcd/"
    assert xla_compile.cache_location("", "NVIDIA_L4", image) == ""
    root = tmp_path / "bucket"
    environ = {xla_compile.IMAGE_VARIABLE: image, "XLA_FLAGS": "--xla_gpu_autotune_level=4"}
    # A first run finds nothing, points XLA at a local folder, and saves what it compiled.
    local, said = xla_compile.open_cache(str(root), "NVIDIA_L4", environ)
    keyed = root / "NVIDIA_L4" / "cdcdcdcdcdcdcdcd"
    assert said == f"none yet at {keyed}/: this run compiles and fills it"
    assert environ["XLA_FLAGS"] == ("--xla_gpu_autotune_level=4 "
                                    f"--xla_gpu_per_fusion_autotune_cache_dir={local}/autotune")
    assert environ["TF_XLA_FLAGS"] == f"--tf_xla_persistent_cache_directory={local}/executables"
    (local / "executables" / "step.pb").write_bytes(b"compiled")
    assert xla_compile.close_cache(local, str(root), "NVIDIA_L4", environ) == \
        f"1 new file(s) saved to {keyed}/"
    assert [p.name for p in keyed.rglob("*") if p.is_file()] == ["step.pb"]  # no .partial
    # The next run restores it and saves nothing twice.
    again, said = xla_compile.open_cache(str(root), "NVIDIA_L4", dict(environ))
    assert said == f"1 file(s) restored from {keyed}/"
    assert (again / "executables" / "step.pb").read_bytes() == b"compiled"
    assert xla_compile.close_cache(again, str(root), "NVIDIA_L4", environ).startswith("0 new")
    # A cache that cannot be written costs the next run its warm-up, nothing else.
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    said = xla_compile.close_cache(again, str(blocked), "NVIDIA_L4", environ)
    assert "could not be written" in said and said.endswith("the next run compiles again")
