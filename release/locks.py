"""The images' lock files: generated with uv, checked against what TensorFlow declares.

`make lock` (`python -m release.locks`) resolves each image's Python environment
for the images' platform and Python (`components.images`) and writes it with every
package's hashes; the Dockerfiles install from those files alone (`--require-hashes
--no-deps`), so an image holds exactly what was locked. It then pins the GPU image's one
apt package, Reduction Server's NCCL plugin (`components.build.apt_lock`).

The GPU image's CUDA libraries are pinned to the versions TensorFlow's wheel declares as
the minimum of its `and-cuda` extra: the release TensorFlow was built and tested with
(`tf.sysconfig.get_build_info()`: CUDA 12.5.1, cuDNN 9 for 2.21). The extra's ranges
would otherwise resolve to the newest 12.x libraries, which need newer drivers than the
toolkit TensorFlow was built for. XLA's compilers are the exception (`XLA_COMPILERS`):
nvcc's ptxas and libdevice and nvJitLink below 12.6.85 miscompile some clamping edge cases
on Hopper, which XLA warns of (NVIDIA bug 4826023; xla/stream_executor/cuda/
ptx_compiler_helpers.cc), so they are pinned at a newer release inside the range
TensorFlow declares (`>=12.5.82,<13.0` for 2.21). They compile PTX; they are not what
TensorFlow's kernels link against.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from components import images
from components.build import apt_lock, apt_repository
from components.build.context import project_root
from trainer.run.gpu_check import CUDA_LIBRARIES
from trainer.run.gpu_environment import PTXAS_MINIMUM

#: The generated constraints that hold the CUDA libraries at TensorFlow's own versions.
GPU_CONSTRAINTS = "requirements/gpu-constraints.txt"
#: Inputs of both locks besides pyproject.toml (the build backend).
IMAGE_INPUTS = "requirements/image.in"
#: The CPU image's TensorFlow, and the override that drops the `tensorflow` distribution.
CPU_INPUTS = "requirements/cpu.in"
CPU_OVERRIDES = "requirements/cpu-overrides.txt"

#: XLA's PTX compilers, pinned past the Hopper miscompile (the module docstring).
XLA_COMPILERS = {"nvidia-cuda-nvcc-cu12": "12.9.86", "nvidia-nvjitlink-cu12": "12.9.86"}
#: The first CUDA release whose ptxas and nvJitLink XLA does not warn about on Hopper (the
#: trainer's own reading of ptxas holds the same number).
XLA_COMPILER_MINIMUM = ".".join(map(str, PTXAS_MINIMUM))

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", re.MULTILINE)


def normalise(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_requirements() -> dict[str, Any]:
    """The `and-cuda` extra of the installed TensorFlow: package -> its specifier set."""
    from packaging.requirements import Requirement

    found = {}
    for line in metadata.requires("tensorflow") or []:
        requirement = Requirement(line)
        if requirement.marker and requirement.marker.evaluate({"extra": "and-cuda"}) and \
                not requirement.marker.evaluate({"extra": ""}):
            found[normalise(requirement.name)] = requirement.specifier
    return found


def cuda_minimums() -> dict[str, str]:
    """The `and-cuda` extra of the installed TensorFlow: package -> its minimum version."""
    found = {}
    for name, specifier in cuda_requirements().items():
        lower = [s.version for s in specifier if s.operator == ">="]
        if lower:
            found[name] = lower[0]
    return found


def gpu_pins() -> dict[str, str]:
    """Each CUDA library's version in the GPU image: TensorFlow's minimum, and XLA's
    compilers at `XLA_COMPILERS`.

    Raises:
        ValueError: An XLA compiler's pin is outside what TensorFlow declares.
    """
    pins = cuda_minimums()
    declared = cuda_requirements()
    for name, version in XLA_COMPILERS.items():
        if name in declared and not declared[name].contains(version):
            raise ValueError(f"XLA_COMPILERS pins {name}=={version}, outside TensorFlow's "
                             f"declared {declared[name]}")
        pins[name] = version
    return pins


def compiler_problems(gpu_pins: Mapping[str, str]) -> list[str]:
    """XLA's compilers in the GPU lock below `XLA_COMPILER_MINIMUM`, or missing."""
    from packaging.version import Version

    return [f"{name}: the GPU lock pins {gpu_pins.get(name, 'nothing')}; XLA needs "
            f">= {XLA_COMPILER_MINIMUM} on Hopper (NVIDIA bug 4826023)"
            for name in XLA_COMPILERS
            if Version(gpu_pins.get(name, "0")) < Version(XLA_COMPILER_MINIMUM)]


def gpu_constraints() -> str:
    """The constraints file that pins each CUDA library at TensorFlow's own version (XLA's
    compilers at `XLA_COMPILERS`)."""
    lines = [f"{name}=={version}" for name, version in sorted(gpu_pins().items())]
    return ("# Generated by `make lock` from the installed TensorFlow's `and-cuda` extra: each\n"
            "# CUDA library at the version TensorFlow declares as its minimum (the release it\n"
            "# was built and tested with), except XLA's compilers (nvcc's ptxas, nvJitLink):\n"
            f"# {XLA_COMPILER_MINIMUM} or newer, as release/locks.py XLA_COMPILERS says.\n"
            + "\n".join(lines) + "\n")


def lock_command(image: images.ProjectImage, uv: str = "uv") -> list[str]:
    """The uv command that writes `image`'s lock file (run in the project root)."""
    command = [uv, "pip", "compile", "pyproject.toml", IMAGE_INPUTS, "--generate-hashes",
               "--python-version", images.PYTHON_VERSION,
               "--python-platform", images.LOCK_PLATFORM,
               "--custom-compile-command", "make lock", "--quiet", "-o", image.lock]
    if image is images.GPU:
        return command + ["--extra", "gpu", "--constraint", GPU_CONSTRAINTS]
    # The CPU image also runs the Beam dataset engine, locally and as Dataflow workers.
    return command + [CPU_INPUTS, "--extra", "beam", "--override", CPU_OVERRIDES]


def pinned(lock_text: str) -> dict[str, str]:
    """The `name==version` pins of a lock file, by normalised name."""
    return {normalise(name): version for name, version in _PIN.findall(lock_text)}


def required_cuda(build_info: Mapping[str, object]) -> dict[str, str]:
    """The CUDA and cuDNN majors a TensorFlow build needs (`tf.sysconfig.get_build_info()`)."""
    return {"cuda": str(build_info["cuda_version"]).split(".")[0],
            "cudnn": str(build_info["cudnn_version"]).split(".")[0]}


def cuda_problems(gpu_pins: Mapping[str, str], build_info: Mapping[str, object]) -> list[str]:
    """Why the GPU lock does not provide the CUDA and cuDNN majors TensorFlow was built for
    (and every library it opens), or nothing."""
    need = required_cuda(build_info)
    problems = []
    runtime = f"nvidia-cuda-runtime-cu{need['cuda']}"
    cudnn = f"nvidia-cudnn-cu{need['cuda']}"
    for package, major, what in ((runtime, need["cuda"], "CUDA"),
                                 (cudnn, need["cudnn"], "cuDNN")):
        version = gpu_pins.get(package)
        if version is None:
            problems.append(f"{what} {major}: {package} is not in the GPU lock")
        elif version.split(".")[0] != major:
            problems.append(f"{what} {major}: the GPU lock pins {package}=={version}")
    for library, (package, _) in CUDA_LIBRARIES.items():
        if package not in gpu_pins:
            problems.append(f"{library}: {package} is not in the GPU lock")
    return problems


def architecture_problems(gpu_pins: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Each GPU architecture's needs (`catalog.ARCHITECTURE_NEEDS`, with its source) held
    against the GPU lock's cuBLAS and cuDNN: (one line per architecture, problems).

    A problem is a lock whose releases are not the ones the GPU validator decides by
    (`images.GPU_CUDA_LIBRARIES`), or a GPU type the validator accepts whose architecture
    needs more than the lock has.
    """
    from components.gpu import catalog as cat
    from components.gpu.image_support import image_cannot_serve, release
    from trainer.cluster.accelerators import ACCELERATORS

    locked = {"cublas": gpu_pins.get("nvidia-cublas-cu12", "0"),
              "cudnn": gpu_pins.get("nvidia-cudnn-cu12", "0")}
    problems = [f"the GPU lock pins {key} {locked[key]}, but components/images.py "
                f"GPU_CUDA_LIBRARIES says {images.GPU_CUDA_LIBRARIES[key]}: update it"
                for key in locked
                if release(locked[key]) != release(images.GPU_CUDA_LIBRARIES[key])]
    rows = []
    for name, needs in cat.ARCHITECTURE_NEEDS.items():
        accepted = [g for g, a in ACCELERATORS.items()
                    if a.architecture == name and not image_cannot_serve(g)]
        met = (needs.last_cuda_major is None or needs.last_cuda_major >= images.GPU_CUDA_MAJOR) \
            and all(release(locked[k]) >= release(v)
                    for k, v in (("cublas", needs.cublas), ("cudnn", needs.cudnn)))
        rows.append(f"{name:<13} needs cuBLAS {needs.cublas}+, cuDNN {needs.cudnn}+"
                    + (f", CUDA <= {needs.last_cuda_major}" if needs.last_cuda_major else "")
                    + f": {'met' if met else 'NOT met'} by the lock; accepted: "
                    + (", ".join(accepted) or "none (refused by the validator)")
                    + f" [{needs.source}]")
        if accepted and not met:
            problems.append(f"{', '.join(accepted)} ({name}) accepted, but the GPU lock's "
                            f"cuBLAS {locked['cublas']} / cuDNN {locked['cudnn']} do not meet "
                            f"its needs")
    return rows, problems


def write_locks(root: Path, uv: str) -> None:
    """Regenerates the GPU constraints and both lock files under `root`."""
    (root / GPU_CONSTRAINTS).write_text(gpu_constraints())
    for image in images.PROJECT_IMAGES:
        subprocess.run(lock_command(image, uv), cwd=root, check=True)
        print(f"wrote {image.lock}: {len(pinned((root / image.lock).read_text()))} packages")


def write_apt_lock(root: Path, fetch: apt_lock.Fetch = apt_lock.urlopen_fetch,
                   gpgv: str = "gpgv") -> apt_lock.AptLock:
    """Resolves the GPU image's apt lock (`components.images`) and writes it.

    A lock that already pins packages is kept when the repository cannot be reached (a
    network failure never unpins); a first lock then records why nothing is pinned.
    """
    path = root / images.GPU_APT_LOCK
    template = images.gpu_apt_template()
    try:
        lock = apt_repository.resolve(template, images.GOOGLE_APT_KEY_FINGERPRINTS,
                                      [images.REDUCTION_SERVER_PACKAGE], fetch, gpgv)
    except apt_lock.AptLockError as error:
        if path.is_file() and apt_lock.parse(path.read_text()).pins:
            print(f"apt lock: {error}; {images.GPU_APT_LOCK} kept as it is")
            return apt_lock.parse(path.read_text())
        lock = dataclasses.replace(template, unresolved=str(error))
        print(f"apt lock: {error}; {images.GPU_APT_LOCK} pins nothing")
    path.write_text(lock.render())
    if lock.pins:
        print(f"wrote {images.GPU_APT_LOCK}: "
              + ", ".join(f"{p.name}={p.version}" for p in lock.pins))
    return lock


def main(argv: list[str] | None = None) -> int:
    """`make lock`: regenerates the images' lock files with uv, and the GPU image's apt lock."""
    parser = argparse.ArgumentParser(prog="python -m release.locks",
                                     description=main.__doc__)
    parser.add_argument("--uv", default=shutil.which("uv") or str(Path(sys.executable).parent
                                                                   / "uv"))
    args = parser.parse_args(argv)
    write_locks(project_root(), args.uv)
    write_apt_lock(project_root())
    return 0


if __name__ == "__main__":
    sys.exit(main())
