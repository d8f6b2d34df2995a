"""What a replica sets in its environment before TensorFlow starts on GPUs, and what it
reads back of XLA's PTX compiler. Pure Python (ctypes for nvJitLink's version).

XLA compiles each kernel's PTX to machine code with one of (xla/stream_executor/cuda/
assemble_compilation_provider.cc): libnvptxcompiler + libnvJitLink, libnvJitLink alone (in
process, in parallel), or the `ptxas` program (one subprocess per module, much slower: on an
H100 the ResNet-50 step's warm-up did not end within 200 s that way). In its AUTO mode XLA
skips nvJitLink when `LoadedNvJitLinkHasKnownIssues()` says so, which the XLA in TensorFlow's
tree returns for every nvJitLink from 12.5 on (xla/stream_executor/cuda/
nvjitlink_known_issues.cc: the comment names a leak fixed in 12.4 Update 1, the test
reads `>=`); `--xla_gpu_enable_libnvjitlink=true` makes XLA use it. The image's nvJitLink
and ptxas are 12.9.86 (requirements/gpu.lock): below 12.6.85 XLA warns that both miscompile
some clamping edge cases on Hopper (NVIDIA bug 4826023, xla/.../ptx_compiler_helpers.cc).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import MutableMapping

#: XLA's flag that makes nvJitLink compile (true: DebugOptions' libnvjitlink_mode ENABLED,
#: false: DISABLED; unset: AUTO). TensorFlow 2.21's XLA refuses the newer
#: `--xla_gpu_libnvjitlink_mode` ("Unknown flag in XLA_FLAGS"), a fatal error.
NVJITLINK_FLAG = "--xla_gpu_enable_libnvjitlink"
NVJITLINK_LIBRARY = "libnvJitLink.so.12"
#: XLA's log of its choice (VLOG 3 and 4 in assemble_compilation_provider.cc).
COMPILER_LOG_MODULE = "assemble_compilation_provider"


def prepare(environ: MutableMapping[str, str], *, xla: bool, gpus: int) -> list[str]:
    """Sets, in `environ` (before TensorFlow is imported), what XLA on GPUs needs: nvJitLink
    as its compiler, unless XLA_FLAGS already chooses. Returns what it set, as lines."""
    if not (xla and gpus):
        return []
    flags = environ.get("XLA_FLAGS", "")
    if NVJITLINK_FLAG in flags:
        return []
    environ["XLA_FLAGS"] = f"{flags} {NVJITLINK_FLAG}=true".strip()
    return [f"XLA_FLAGS: {NVJITLINK_FLAG}=true (XLA's AUTO mode may skip nvJitLink and run "
            "the ptxas program per module)"]


def nvjitlink_version() -> str:
    """The version of the nvJitLink the process can load ("" when none loads)."""
    try:
        library = ctypes.CDLL(NVJITLINK_LIBRARY)
    except OSError:
        return ""
    major, minor = ctypes.c_uint(), ctypes.c_uint()
    try:
        status = library.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
    except AttributeError:  # nvJitLink before 12.3 has no version call
        return "unknown"
    return f"{major.value}.{minor.value}" if status == 0 else "unknown"


def ptxas_version(environ: MutableMapping[str, str]) -> tuple[str, str]:
    """(path, version) of the ptxas XLA would run: in `--xla_gpu_cuda_data_dir`'s bin/, else
    on PATH; ("", "") when there is none."""
    data_dir = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    candidates = [os.path.join(data_dir.group(1), "bin", "ptxas")] if data_dir else []
    found = shutil.which("ptxas", path=environ.get("PATH"))
    path = next((p for p in [*candidates, found] if p and os.access(p, os.X_OK)), "")
    if not path:
        return "", ""
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return path, "unknown"
    match = re.search(r"V(\d+\.\d+\.\d+)", text)
    return path, match.group(1) if match else "unknown"


def compiler(environ: MutableMapping[str, str]) -> dict[str, str]:
    """Which PTX compiler XLA will use, read as XLA decides it (the module docstring):
    `compiler` (nvJitLink or ptxas), its `version`, and the `mode` XLA_FLAGS sets."""
    match = re.search(NVJITLINK_FLAG + r"=(\w+)", environ.get("XLA_FLAGS", ""))
    mode = ("enabled" if match.group(1).lower() in ("true", "1") else "disabled") \
        if match else "auto"
    linker = nvjitlink_version()
    if linker and mode == "enabled":
        return {"compiler": "nvJitLink", "version": linker, "mode": mode}
    path, version = ptxas_version(environ)
    if path:
        return {"compiler": "ptxas", "version": version, "mode": mode, "path": path}
    return {"compiler": "none found", "version": "", "mode": mode,
            "nvjitlink": linker or "not loadable"}


def describe(found: dict[str, str]) -> str:
    """The compiler in one line, as a replica logs it."""
    where = f" ({found['path']})" if found.get("path") else ""
    return (f"XLA compiles PTX with {found['compiler']} {found['version']}{where}, "
            f"nvJitLink mode {found['mode']}").replace("  ", " ")
