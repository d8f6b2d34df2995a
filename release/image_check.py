"""`make image-check`: each image's Python environment, built and checked on this machine.

No Docker engine and no GPU are needed, and none is used: for each image the check builds
the environment the Dockerfile builds, from the same lock file (`pip install
--require-hashes --no-deps`, then the project), in a fresh virtualenv under
`build/image-check/`, and then, with the library path and PATH the Dockerfile's stage
sets (its site-packages mapped onto the virtualenv's):

- GPU image: loads every CUDA library TensorFlow opens, by the soname TensorFlow asks for
  (`trainer.run.gpu_check.CUDA_LIBRARIES`, and cuDNN's parts), runs the `ptxas` XLA would
  run (`trainer.run.gpu_environment`) and refuses one below 12.6.85, and reads nvJitLink's
  version;
  checks that the lock provides the CUDA and cuDNN majors of TensorFlow's build
  (`tf.sysconfig.get_build_info()`), and that its cuBLAS and cuDNN meet the needs of every
  GPU architecture the validator accepts (`locks.architecture_problems`: a table with
  each architecture's source);
- both images: imports TensorFlow and tf-keras, runs `python -m trainer.task --help`,
  imports the serving predictor and the pipeline's components;
- GPU image: says what its apt lock pins (Reduction Server's NCCL plugin, installed by
  the Docker build from Google's apt repository, which cannot be reached here);
- CPU image: prepares a small dataset with the Beam engine (what its Dataflow workers
  run; Beam's boot program, copied from Beam's SDK image, is not here);
- reports each environment's size on disk.

What it cannot show: that a kernel runs on a GPU (there is none here, nor the driver's
libcuda.so.1, which Vertex AI mounts), and the Docker build itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from components import images
from components.build.apt_lock import parse
from components.build.context import project_root

#: Where the image's own Python puts packages (python:3.11-slim): the Dockerfile's paths.
IMAGE_SITE_PACKAGES = f"/usr/local/lib/python{images.PYTHON_VERSION}/site-packages"


def _stage_chain(dockerfile: str, target: str | None = None) -> list[list[tuple[str, str]]]:
    """The instructions (keyword, rest) of a Dockerfile stage (`FROM ... AS target`; the
    file's last stage, which `docker build` makes, by default) and of the stages it is
    built on, the first stage first."""
    stages: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current = ""
    text = re.sub(r"\\\n\s*", " ", dockerfile)
    for line in text.splitlines():
        line = line.strip()
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(2) or f"#{len(stages)}"  # an unnamed stage
            stages[current] = (match.group(1), [])
        elif line and not line.startswith("#") and current in stages:
            keyword, _, rest = line.partition(" ")
            stages[current][1].append((keyword.upper(), rest.strip()))
    chain = []
    target = target or current
    while target in stages:
        chain.append(stages[target][1])
        target = stages[target][0]
    return chain[::-1]


def stage_environment(dockerfile: str, target: str | None = None) -> dict[str, str]:
    """The ENV assignments of a Dockerfile stage and of the stages it is built on."""
    environment: dict[str, str] = {}
    for stage in _stage_chain(dockerfile, target):
        for keyword, rest in stage:
            if keyword == "ENV":
                environment.update(re.findall(r"(\w+)=(\S+)", rest))
    return environment


def stage_entrypoint(dockerfile: str, target: str | None = None) -> list[str]:
    """The ENTRYPOINT (exec form) a container of the stage starts, or []."""
    found: list[str] = []
    for stage in _stage_chain(dockerfile, target):
        for keyword, rest in stage:
            if keyword == "ENTRYPOINT":
                found = json.loads(rest)
    return found


def _run(command: list[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"image-check: {' '.join(command[:4])} ... failed "
                         f"({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def build_environment(image: images.ProjectImage, root: Path, work: Path) -> Path:
    """A virtualenv holding what `image`'s Dockerfile installs with pip (reused while its lock
    and the project are unchanged); returns its directory."""
    lock = root / image.lock
    venv = work / image.key
    stamp = venv / ".lock-sha256"
    digest = hashlib.sha256(lock.read_bytes() + (root / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "install",
           "--quiet", "--no-cache-dir"]
    started = time.monotonic()
    _run(pip + ["--require-hashes", "--no-deps", "-r", str(lock)])
    _run(pip + ["--no-deps", "--no-build-isolation", "-e", str(root)])
    print(f"[image-check] {image.name}: environment installed from {image.lock} in "
          f"{time.monotonic() - started:.0f} s")
    stamp.write_text(digest)
    return venv


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{images.PYTHON_VERSION}" / "site-packages"


def image_environment(image: images.ProjectImage, root: Path, venv: Path) -> dict[str, str]:
    """The process environment of `image`'s Dockerfile, its paths mapped onto `venv`."""
    declared = stage_environment((root / image.dockerfile).read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    for name, value in declared.items():
        env[name] = value.replace(IMAGE_SITE_PACKAGES, str(site_packages(venv)))
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', os.environ.get('PATH', ''))}"
    return env


def apt_lock_status(root: Path) -> str:
    """What the GPU image's apt lock pins (the Reduction Server plugin), in a line."""
    lock = parse((root / images.GPU_APT_LOCK).read_text())
    if lock.pins:
        return (", ".join(f"{p.name}={p.version}" for p in lock.pins)
                + f" (signed by {lock.fingerprint}); installed by the Docker build, not here")
    return (f"{images.GPU_APT_LOCK} pins nothing ({lock.unresolved}): the Docker build "
            "resolves the Reduction Server plugin (newest version, signed by the pinned key) "
            f"and records it at {images.GPU_APT_RECORD}")


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) \
        / 1e6


# --- Inside the image's environment ------------------------------------------------------


def _loaded_path(soname: str) -> str:
    """Where the dynamic loader found a loaded library (this process's memory map)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(f"/{soname}"):
                return line.split()[-1]
    return "?"


def _check_cuda(report: dict, failures: list[str]) -> None:
    """The GPU image's CUDA: every library TensorFlow opens and cuDNN's parts, loaded by the
    soname TensorFlow asks for through the image's library path (the trainer's own check,
    `trainer.run.gpu_check`), and ptxas on PATH."""
    from trainer.run.gpu_check import (
        CUDA_LIBRARIES,
        CUDNN_PARTS,
        DRIVER_LIBRARY,
        unloadable_libraries,
    )

    missing_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":")
                    if "site-packages" in d and not os.path.isdir(d)]
    if missing_dirs:
        failures.append(f"LD_LIBRARY_PATH names missing directories: {missing_dirs}")
    failed = unloadable_libraries()
    failures += [f"{name}: {error}" for name, error in failed.items() if name != DRIVER_LIBRARY]
    loaded = {library: _loaded_path(soname) for library, (_, soname) in CUDA_LIBRARIES.items()
              if soname not in failed}
    loaded["cudnn parts"] = f"{len(CUDNN_PARTS)} libcudnn_*.so.9 beside libcudnn.so.9"
    report["cuda_libraries"] = loaded
    # XLA's compiler, found as XLA finds it (trainer.run.gpu_environment), at a release XLA
    # does not warn about on Hopper; nvJitLink (cuSPARSE's and cuFFT's) at the same one.
    from trainer.run.gpu_environment import compiler, describe

    found = compiler(os.environ)
    report["ptxas"] = describe(found)
    if found["compiler"] != "ptxas":
        failures.append("ptxas is not on PATH (XLA compiles GPU kernels with it)")
    elif found.get("miscompiles") or found["version"] == "unknown":
        failures.append(f"ptxas {found['version']}: {found.get('miscompiles', 'no version')}")
    report["nvjitlink"] = _nvjitlink_version()
    linker = report["nvjitlink"]
    if not re.fullmatch(r"\d+\.\d+", linker) or tuple(map(int, linker.split("."))) < (12, 6):
        failures.append(f"nvJitLink {linker or 'does not load'}: the GPU lock pins 12.9")
    report["driver"] = (f"{DRIVER_LIBRARY} absent (the driver Vertex AI mounts; none here)"
                        if DRIVER_LIBRARY in failed else f"{DRIVER_LIBRARY} found")


def _nvjitlink_version() -> str:
    """`major.minor` of the nvJitLink the library path loads ("" when none loads)."""
    import ctypes

    try:
        library = ctypes.CDLL("libnvJitLink.so.12")
    except OSError:
        return ""
    major, minor = ctypes.c_uint(), ctypes.c_uint()
    if library.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
        return "unknown"
    return f"{major.value}.{minor.value}"


def _check_beam(report: dict, failures: list[str]) -> None:
    """The CPU image runs the Beam dataset engine (and, on Dataflow, its workers): a small
    dataset prepared with it, on Beam's in-process runner."""
    import tempfile

    import apache_beam

    from components.dataset.prepare import prepare_source

    with tempfile.TemporaryDirectory() as work:
        try:
            manifest = prepare_source("builtin://shapes", Path(work) / "data", engine="beam",
                                      image_size=32, builtin_images_per_class=10, processes=1)
        except Exception as exc:  # noqa: BLE001 - reported with the other failures
            failures.append(f"the Beam engine failed: {exc}")
            return
    report["beam"] = (f"apache-beam {apache_beam.__version__}: {manifest['examples']} images "
                      "prepared by the Beam engine")
    if apache_beam.__version__ != images.BEAM_VERSION:
        failures.append(f"apache-beam {apache_beam.__version__}, expected {images.BEAM_VERSION}")


def _check_sampler(report: dict, failures: list[str]) -> None:
    """The efficiency sampler's libraries (`trainer.run.sampler`): psutil reads the host;
    nvidia-ml-py imports, and NVML itself starts only where a driver is (Vertex AI mounts
    it into a GPU machine's container; none here)."""
    from trainer.run.sampler import load_nvml

    try:
        import psutil
        import pynvml  # noqa: F401
    except ImportError as exc:
        failures.append(f"the efficiency sampler's libraries: {exc}")
        return
    nvml, missing = load_nvml()
    report["sampler"] = (f"psutil {psutil.__version__}, {psutil.cpu_count()} CPUs; NVML "
                         + (f"{nvml.nvmlSystemGetDriverVersion()}" if nvml else
                            f"unavailable here ({missing})"))


def check_inside(key: str) -> dict:
    """Runs in the image's environment: what it loads and starts; raises SystemExit on a
    failure."""
    report: dict = {"image": key, "python": sys.version.split()[0]}
    failures: list[str] = []
    if key == images.GPU.key:
        _check_cuda(report, failures)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras

    info = tf.sysconfig.get_build_info()
    report["tensorflow"] = f"{tf.__version__} (tf-keras {tf_keras.__version__}), " + (
        f"built for CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}"
        if info.get("is_cuda_build") else "CPU build")
    if key == images.GPU.key:
        from importlib import metadata

        from release.locks import architecture_problems, cuda_problems, normalise

        pins = {normalise(d.metadata["Name"]): d.version for d in metadata.distributions()}
        failures += cuda_problems(pins, info)
        report["architectures"], refused = architecture_problems(pins)
        failures += refused
        report["gpus_visible"] = len(tf.config.list_physical_devices("GPU"))
    if tf.__version__ != images.TENSORFLOW_VERSION:
        failures.append(f"TensorFlow {tf.__version__}, expected {images.TENSORFLOW_VERSION}")
    help_text = subprocess.run([sys.executable, "-m", "trainer.task", "--help"],
                               capture_output=True, text=True)
    if help_text.returncode != 0:
        failures.append(f"python -m trainer.task --help exited {help_text.returncode}: "
                        f"{help_text.stderr[-1000:]}")
    report["trainer"] = f"python -m trainer.task --help: exit {help_text.returncode}"
    import components.ops.export
    import components.ops.setup
    import components.ops.training  # noqa: F401
    import trainer.serving.app  # noqa: F401 - the model server's predictor (aiplatform CPR)
    report["imports"] = "trainer.serving.app, components.ops"
    _check_sampler(report, failures)
    if key == images.CPU.key:
        _check_beam(report, failures)
    if failures:
        raise SystemExit("image-check failed in the " + key + " image's environment:\n  - "
                         + "\n  - ".join(failures))
    return report


def main(argv: list[str] | None = None) -> int:
    """Builds each image's environment from its lock and checks it (see the module doc)."""
    parser = argparse.ArgumentParser(prog="python -m release.image_check",
                                     description=main.__doc__)
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    parser.add_argument("--image", choices=[i.key for i in images.PROJECT_IMAGES],
                        action="append", help="Check only this image (repeatable).")
    args = parser.parse_args(argv)
    if args.inside:
        print(json.dumps(check_inside(args.inside)))
        return 0
    wanted = args.image or [i.key for i in images.PROJECT_IMAGES]
    python = ".".join(map(str, sys.version_info[:2]))
    if python != images.PYTHON_VERSION:
        raise SystemExit(f"image-check: the images run Python {images.PYTHON_VERSION}; this "
                         f"is Python {python}, whose wheels differ: run it with "
                         f"python{images.PYTHON_VERSION}")
    root = project_root()
    work = root / "build" / "image-check"
    work.mkdir(parents=True, exist_ok=True)
    for image in (i for i in images.PROJECT_IMAGES if i.key in wanted):
        venv = build_environment(image, root, work)
        env = image_environment(image, root, venv)
        output = _run([str(venv / "bin" / "python"), "-m", "release.image_check",
                       "--inside", image.key], env=env)
        report = json.loads(output.strip().splitlines()[-1])
        report["environment_mb"] = round(_size_mb(site_packages(venv)))
        if image is images.GPU:
            report["apt_lock"] = apt_lock_status(root)
        print(f"[image-check] {image.name} ({image.purpose}):")
        for name, value in report.items():
            if isinstance(value, dict):
                for library, path in value.items():
                    print(f"    {library:<10} {path.replace(str(venv), '<env>')}")
            elif isinstance(value, list):
                print(f"  {name}:")
                for line in value:
                    print(f"    {line}")
            else:
                print(f"  {name}: {value}")
    print("[image-check] passed: each image's locked environment installs, its CUDA "
          "libraries load by soname and its code starts. Not shown here: a kernel on a GPU "
          "(none on this machine) and the Docker build (no Docker engine).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
