"""What a GPU replica's TensorFlow runs with: XLA's PTX compiler, read as XLA decides it so
that each replica can say it once, and NVIDIA's environment when asked for
(`training.nvidia_environment`). Pure Python (a subprocess for the tools' versions).

XLA compiles each kernel's PTX to machine code with the first of these it can use
(xla/stream_executor/cuda/assemble_compilation_provider.cc): libnvptxcompiler with
libnvJitLink, libnvJitLink alone, the `ptxas` program (with `nvlink`, modules can be compiled
in parallel and linked), then the driver. The XLA in TensorFlow 2.21's wheel is built
without both libraries: on an H200 its log said "Has NvJitLink support: LibNvJitLink is not
supported (disabled during compilation)", the same for NvPtxCompiler, and "Using
ptxas(path=.../cuda_nvcc/bin/ptxas, version=12.9.86) and nvlink(...)"
(benchmarks/measured/gpu-h200-2026-11-26.json). So XLA runs the ptxas program once per
module, whatever nvJitLink the image has, and `--xla_gpu_enable_libnvjitlink=true` makes
every compilation fail ("Autotuner could not compile any configs", the same run): the
trainer never sets it. ptxas is the one that matters: below 12.6.85 XLA warns that it
miscompiles some clamping edge cases on Hopper (NVIDIA bug 4826023,
xla/stream_executor/cuda/ptx_compiler_helpers.cc), so the image pins nvcc's ptxas at 12.9.86
(release/locks.py XLA_COMPILERS). ptxas is looked for in `--xla_gpu_cuda_data_dir`'s bin/
(XLA_FLAGS), then on PATH (`FindPtxAsExecutable`); nvlink the same way. The nvcc wheel has
no nvlink, so in the image XLA compiles one module after another.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, MutableMapping

#: What NVIDIA's TensorFlow ResNet-50 sets before TensorFlow starts (DeepLearningExamples,
#: TensorFlow/Classification/ConvNets/runtime/runner.py); `training.nvidia_environment`.
NVIDIA_ENVIRONMENT = {"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "2",
                      "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT": "1",
                      "TF_AUTOTUNE_THRESHOLD": "2"}
#: XLA's log of its choice (VLOG 3 and 4 in assemble_compilation_provider.cc).
COMPILER_LOG_MODULE = "assemble_compilation_provider"
#: The first ptxas XLA does not warn about on Hopper.
PTXAS_MINIMUM = (12, 6, 85)


def set_nvidia_environment(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Sets `NVIDIA_ENVIRONMENT` in `environ` (before TensorFlow starts), keeping any of
    the variables already set; returns what it set."""
    added = {k: v for k, v in NVIDIA_ENVIRONMENT.items() if k not in environ}
    environ.update(added)
    return added


def _tool(name: str, environ: Mapping[str, str]) -> str:
    """Where XLA finds a CUDA tool: `--xla_gpu_cuda_data_dir`'s bin/, else PATH ("")."""
    data_dir = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    candidates = [os.path.join(data_dir.group(1), "bin", name)] if data_dir else []
    candidates.append(shutil.which(name, path=environ.get("PATH")) or "")
    return next((p for p in candidates if p and os.access(p, os.X_OK)), "")


def tool_version(path: str) -> str:
    """`X.Y.Z` from a CUDA tool's `--version` ("unknown" when it does not say)."""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    match = re.search(r"V(\d+\.\d+\.\d+)", text)
    return match.group(1) if match else "unknown"


def ptxas_version(environ: Mapping[str, str]) -> tuple[str, str]:
    """(path, version) of the ptxas XLA would run; ("", "") when there is none."""
    path = _tool("ptxas", environ)
    return (path, tool_version(path)) if path else ("", "")


def compiler(environ: Mapping[str, str]) -> dict[str, str]:
    """The PTX compiler XLA will use in this environment (the module docstring):
    `compiler` (`ptxas`, or `driver` when there is none), with the path and version of
    ptxas, whether nvlink was found (`parallel`: modules compiled in parallel), and
    `miscompiles` when the ptxas is one XLA warns about on Hopper."""
    path, version = ptxas_version(environ)
    if not path:
        return {"compiler": "driver", "version": "", "parallel": "no",
                "why": "no ptxas in --xla_gpu_cuda_data_dir/bin or on PATH"}
    found = {"compiler": "ptxas", "version": version, "path": path,
             "parallel": "possible (nvlink found)" if _tool("nvlink", environ) else "no"}
    numbers = tuple(int(p) for p in version.split(".")) if version != "unknown" else None
    if numbers is not None and numbers < PTXAS_MINIMUM:
        found["miscompiles"] = (f"below {'.'.join(map(str, PTXAS_MINIMUM))}: XLA warns of "
                                "miscompiled clamping edge cases on Hopper (NVIDIA bug "
                                "4826023)")
    return found


def describe(found: Mapping[str, str]) -> str:
    """The compiler in one line, as a replica logs it."""
    if found["compiler"] != "ptxas":
        return f"XLA compiles PTX with the CUDA driver ({found.get('why', '')})"
    return (f"XLA compiles PTX with ptxas {found['version']} ({found['path']}), "
            + ("with nvlink: modules in parallel where XLA_FLAGS asks for it"
               if found["parallel"] != "no" else "one module at a time")
            + (f"; {found['miscompiles']}" if found.get("miscompiles") else ""))
