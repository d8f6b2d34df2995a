"""No silent CPU training: a replica whose machine has GPUs stops when TensorFlow sees fewer.

A GPU image whose CUDA libraries do not match TensorFlow's build does not fail: TensorFlow
logs "Cannot dlopen some GPU libraries ... Skipping registering GPU devices" and trains on
the CPUs of a machine billed for its GPUs (tensorflow/tensorflow#62412, #81344). The
CustomJob tells each replica how many GPUs its pool has (`--expected-gpus`), and the
trainer exits with an error before training when TensorFlow sees fewer, naming what it
found and the libraries that do not load. Pure Python until TensorFlow is asked.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from trainer.common.errors import StageError

#: The CUDA libraries TensorFlow opens on a GPU machine (its DSO loader), by the pip
#: package that ships each and the soname TensorFlow asks for with CUDA 12 and cuDNN 9.
CUDA_LIBRARIES: dict[str, tuple[str, str]] = {
    "cudart": ("nvidia-cuda-runtime-cu12", "libcudart.so.12"),
    "cublas": ("nvidia-cublas-cu12", "libcublas.so.12"),
    "cublasLt": ("nvidia-cublas-cu12", "libcublasLt.so.12"),
    "cufft": ("nvidia-cufft-cu12", "libcufft.so.11"),
    "curand": ("nvidia-curand-cu12", "libcurand.so.10"),
    "cusolver": ("nvidia-cusolver-cu12", "libcusolver.so.11"),
    "cusparse": ("nvidia-cusparse-cu12", "libcusparse.so.12"),
    "cudnn": ("nvidia-cudnn-cu12", "libcudnn.so.9"),
    "nccl": ("nvidia-nccl-cu12", "libnccl.so.2"),
    "nvjitlink": ("nvidia-nvjitlink-cu12", "libnvJitLink.so.12"),
}
#: cuDNN 9 is split: libcudnn.so.9 opens these when a handle is created.
CUDNN_PARTS = tuple(f"libcudnn_{part}.so.9" for part in (
    "graph", "ops", "cnn", "adv", "engines_precompiled", "engines_runtime_compiled",
    "heuristic"))
#: The driver's library, mounted into the container by the machine (not in the image).
DRIVER_LIBRARY = "libcuda.so.1"


class MissingGpuError(StageError):
    """TensorFlow sees fewer GPUs than the replica's machine has."""


def unloadable_libraries() -> dict[str, str]:
    """The driver's and CUDA's libraries that do not load here: soname -> the loader's error."""
    failed = {}
    for soname in (DRIVER_LIBRARY, *(s for _, s in CUDA_LIBRARIES.values()), *CUDNN_PARTS):
        try:
            ctypes.CDLL(soname)
        except OSError as exc:
            failed[soname] = str(exc)
    return failed


def require_gpus(tf: Any, expected: int, environ: Mapping[str, str]) -> int:
    """Raises MissingGpuError when TensorFlow sees fewer than `expected` GPUs; returns how
    many it sees. Call before the strategy is created: it only lists physical devices."""
    found = len(tf.config.list_physical_devices("GPU"))
    if found >= expected:
        return found
    failed = unloadable_libraries()
    info = tf.sysconfig.get_build_info()
    build = (f"TensorFlow {tf.__version__} is built for CUDA {info.get('cuda_version')} and "
             f"cuDNN {info.get('cudnn_version')}" if info.get("is_cuda_build")
             else f"TensorFlow {tf.__version__} is a CPU build")
    if failed:
        by_error: dict[str, list[str]] = {}
        for name, error in failed.items():
            by_error.setdefault(error.split(": ")[-1], []).append(name)
        why = "libraries that do not load: " + "; ".join(
            f"{', '.join(names)} ({error})" for error, names in by_error.items())
    else:
        why = ("every CUDA library loads; CUDA_VISIBLE_DEVICES is "
               f"{environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}")
    raise MissingGpuError(
        f"this machine should have {expected} GPU(s) (--expected-gpus {expected}) but "
        f"TensorFlow sees {found}: training would run on its CPUs. {build}; {why}")


#: Where the GPU image records what its apt step installed (the apt lock's format:
#: `package NAME VERSION FILENAME sha256:HEX` lines; components/build/apt_lock.py).
APT_RECORD = "/etc/gpu-pipeline/gpu-apt.lock"


def installed_packages(record: str = "") -> list[str]:
    """What the GPU image's apt step installed (`record`, else `APT_RECORD`), as
    `NAME=VERSION (sha256:HEX)`; [] where nothing is recorded (not the GPU image, or
    nothing installed)."""
    try:
        lines = open(record or APT_RECORD, encoding="utf-8").read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        words = line.split()
        if len(words) == 5 and words[0] == "package":
            found.append(f"{words[1]}={words[2]} ({words[4]})")
    return found


class MissingNcclPluginError(StageError):
    """The plan all-reduces through a Reduction Server, but NCCL's network plugin is absent."""


def nccl_net_plugin(environ: Mapping[str, str]) -> str:
    """The network plugin NCCL opens at start: `libnccl-net.so`, or with `NCCL_NET_PLUGIN`
    set, `libnccl-net-<value>.so` (or the library it names), by the loader's search
    (NCCL docs: Environment Variables, NCCL_NET_PLUGIN; "NCCL Net plugin")."""
    chosen = environ.get("NCCL_NET_PLUGIN", "")
    if not chosen:
        return "libnccl-net.so"
    return chosen if ".so" in chosen else f"libnccl-net-{chosen}.so"


def require_reduction_server_plugin(environ: Mapping[str, str]) -> str:
    """Checks that NCCL will find Vertex AI Reduction Server's network plugin here.

    Without it NCCL all-reduces between the training machines directly and pool 2's
    reducers are paid for and idle; the plugin comes from the `google-reduction-server`
    package the GPU image installs from its apt lock.

    Returns:
        The plugin library's name, as loaded, and the package the image recorded for it.

    Raises:
        MissingNcclPluginError: The loader cannot open it.
    """
    name = nccl_net_plugin(environ)
    recorded = [p for p in installed_packages() if p.startswith("google-reduction-server=")]
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        raise MissingNcclPluginError(
            f"worker_pool_specs[2] runs Vertex AI's Reduction Server, but NCCL's network "
            f"plugin {name} does not load in this image ({exc}): NCCL would all-reduce "
            "without the reducers. Rebuild the GPU image (its apt step installs "
            "google-reduction-server, pinned by requirements/gpu-apt.lock or resolved from "
            "Google's repository; the build's log says which), or remove the Reduction Server "
            "pool") from None
    return name + (f", from {recorded[0]}" if recorded else "")
