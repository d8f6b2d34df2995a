"""Build stage: the context, its deterministic tarball and digest; the images' Dockerfiles
and lock files, checked against what TensorFlow declares."""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest
import tomllib

from components import images
from components.build.context import write_build_context
from components.build.sources import BuildSources
from release import locks
from release.image_check import IMAGE_SITE_PACKAGES, stage_environment
from tests.support.paths import ROOT
from trainer.run.gpu_check import CUDA_LIBRARIES


def copy_project(destination: Path) -> Path:
    """A copy of what the build context is made from (no caches), to change freely."""
    destination.mkdir()
    for name in (".dockerignore", "pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, destination / name)
    for package in ("docker", "requirements", "pipelines", "components", "trainer"):
        shutil.copytree(ROOT / package, destination / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def test_context_holds_dockerfile_locks_and_sources(tmp_path):
    context = write_build_context(tmp_path)
    assert {images.GPU.dockerfile, images.CPU.dockerfile, "pyproject.toml", "trainer/task.py",
            "components/ops/setup.py", "pipelines/pipeline.py", images.GPU.lock, images.CPU.lock,
            images.GPU_APT_LOCK, "components/build/apt_lock.py",
            "components/build/apt_repository.py"} <= set(context.files)
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in context.files)
    assert (context.directory / "trainer" / "task.py").read_bytes() == \
        (ROOT / "trainer" / "task.py").read_bytes()
    with tarfile.open(context.tarball) as tar:
        assert sorted(tar.getnames()) == list(context.files)
        assert {m.mtime for m in tar.getmembers()} == {0}
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", context.digest)
    assert context.tag == "src-" + context.digest[len("sha256:"):][:16]


def test_same_sources_same_digest_and_a_change_changes_it(tmp_path):
    copy = copy_project(tmp_path / "project")
    first = write_build_context(tmp_path / "a", root=copy)
    second = write_build_context(tmp_path / "b", root=copy)
    assert first.tarball.read_bytes() == second.tarball.read_bytes()
    assert first.digest == second.digest and first.tag == second.tag
    (copy / "trainer" / "task.py").write_text("# changed\n")
    third = write_build_context(tmp_path / "c", root=copy)
    assert third.digest != first.digest
    (copy / images.GPU.lock).write_text("# a new lock\n")
    assert write_build_context(tmp_path / "d", root=copy).digest != third.digest


def test_image_references_are_digest_only_and_tags_are_for_pushing():
    digest = "sha256:" + "ab" * 32
    assert images.reference("r.example/p/repo/", images.GPU, digest) == \
        f"r.example/p/repo/gpu-pipeline-gpu@{digest}"
    assert images.tagged("r.example/p/repo", images.CPU, "src-1") == \
        "r.example/p/repo/gpu-pipeline-cpu:src-1"
    assert {i.key for i in images.PROJECT_IMAGES} == {"gpu", "cpu"}


GPU_DOCKERFILE = (ROOT / images.GPU.dockerfile).read_text()
CPU_DOCKERFILE = (ROOT / images.CPU.dockerfile).read_text()


@pytest.mark.parametrize("image", images.PROJECT_IMAGES, ids=lambda i: i.key)
def test_each_image_has_a_dockerfile_of_its_own_that_installs_its_locks_and_nothing_else(image):
    dockerfile = (ROOT / image.dockerfile).read_text()
    installs = [line for line in re.sub(r"\\\n\s*", "", dockerfile).splitlines()
                if line.startswith("RUN ")]
    # The apt lock's packages, or the newest plugin signed by the pinned key, recorded.
    apt = ["RUN python /tmp/apt-lock/apt_repository.py install /tmp/apt-lock/gpu-apt.lock "
           f"--resolve {images.REDUCTION_SERVER_PACKAGE} --accept \"$APT_KEY_FINGERPRINTS\" "
           f"--mirror \"$APT_MIRROR\" --record {images.GPU_APT_RECORD} && rm -rf "
           "/tmp/apt-lock"] \
        if image is images.GPU else []
    # The CPU image runs the pipeline's steps, whose reports draw with matplotlib: its font
    # list is built once at build time, not in every step's fresh container.
    fonts = ['RUN python -c "import matplotlib.font_manager"'] if image is images.CPU else []
    # The lock by its hashes, from PyPI or a perimeter's index (components/build/pip_index.py).
    pip = f"RUN python /tmp/pip_index.py install {image.lock} --index \"$PIP_INDEX\" && rm " \
        "/tmp/pip_index.py"
    assert installs == [*apt, pip,
                        *fonts, "RUN pip install --no-deps --no-build-isolation -e ."]
    assert f"ARG PYTHON_BASE={images.PYTHON_BASE_IMAGE}\n" in dockerfile
    # Every stage of the file is one its image needs (the legacy builder builds them all):
    # the Python base, and for the CPU image Beam's SDK image for its boot program.
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert froms == (["${PYTHON_BASE}"] if image is images.GPU
                     else ["${BEAM_SDK}", "${PYTHON_BASE}"])
    # Every argument a build may pass is declared: the pinned sources, and their mirrors.
    mirrored = BuildSources("b@sha256:0", "s@sha256:0", "https://i", "https://a")
    assert [k for k, _ in mirrored.build_args(image)] == \
        re.findall(r"^ARG (\w+)=", dockerfile, re.MULTILINE)
    assert dict(image.build_args)["PYTHON_BASE"] == images.PYTHON_BASE_IMAGE
    assert f"/python{images.PYTHON_VERSION}/" in IMAGE_SITE_PACKAGES


def test_the_gpu_image_starts_the_trainer_and_the_cpu_image_beams_boot_program():
    from release.image_check import stage_entrypoint

    assert stage_entrypoint(GPU_DOCKERFILE) == list(images.TRAINER_COMMAND)
    # Dataflow starts a custom container's entry point, which must run Beam's boot program
    # (Dataflow docs, "Build custom container images"), copied from Beam's SDK image at the
    # version the CPU lock installs.
    assert stage_entrypoint(CPU_DOCKERFILE) == ["/opt/apache/beam/boot"]
    assert f"ARG BEAM_SDK={images.BEAM_SDK_IMAGE}\n" in CPU_DOCKERFILE
    assert dict(images.CPU.build_args)["BEAM_SDK"] == images.BEAM_SDK_IMAGE
    assert "FROM ${BEAM_SDK} AS beam_sdk\n" in CPU_DOCKERFILE
    assert "COPY --from=beam_sdk /opt/apache/beam /opt/apache/beam\n" in CPU_DOCKERFILE
    assert images.BEAM_SDK_IMAGE.endswith(f"_sdk:{images.BEAM_VERSION}")
    assert locks.pinned(_lock(images.CPU))["apache-beam"] == images.BEAM_VERSION
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["beam"]
    assert extra == [f"apache-beam[gcp]=={images.BEAM_VERSION}"]
    # The GPU image has no use for Beam.
    assert "apache-beam" not in locks.pinned(_lock(images.GPU))


def _lock(image: images.ProjectImage) -> str:
    return (ROOT / image.lock).read_text()


@pytest.mark.parametrize("image", images.PROJECT_IMAGES, ids=lambda i: i.key)
def test_every_locked_package_has_hashes_and_satisfies_the_project(image):
    from packaging.requirements import Requirement

    text = _lock(image)
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    assert entries and all("--hash=sha256:" in e for e in entries if "==" in e)
    pins = locks.pinned(text)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    tensorflow = "tensorflow" if image is images.GPU else "tensorflow-cpu"
    assert pins[tensorflow] == images.TENSORFLOW_VERSION
    for line in declared:
        requirement = Requirement(line)
        name = locks.normalise(requirement.name)
        if name == "tensorflow":
            name = tensorflow
        assert name in pins, f"{image.lock} lacks {name}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    assert ("nvidia-cudnn-cu12" in pins) is (image is images.GPU)


def test_the_gpu_lock_provides_the_cuda_and_cudnn_tensorflow_was_built_for():
    import tensorflow as tf

    info = tf.sysconfig.get_build_info()
    assert locks.required_cuda(info) == {"cuda": "12", "cudnn": "9"}
    pins = locks.pinned(_lock(images.GPU))
    assert locks.cuda_problems(pins, info) == []
    # ...at the versions TensorFlow declares (its and-cuda extra's minimum), kept in sync,
    # but XLA's compilers past the Hopper miscompile, inside TensorFlow's declared range.
    assert (ROOT / locks.GPU_CONSTRAINTS).read_text() == locks.gpu_constraints()
    for package, version in locks.cuda_minimums().items():
        assert pins[package] == locks.XLA_COMPILERS.get(package, version)
    assert locks.compiler_problems(pins) == []
    declared = locks.cuda_requirements()
    for package, version in locks.XLA_COMPILERS.items():
        assert pins[package] == version and declared[package].contains(version)


def test_xla_compilers_below_12_6_85_or_outside_tensorflows_range_are_refused(monkeypatch):
    pins = {**locks.pinned(_lock(images.GPU)), "nvidia-cuda-nvcc-cu12": "12.5.82"}
    assert locks.compiler_problems(pins) == [
        "nvidia-cuda-nvcc-cu12: the GPU lock pins 12.5.82; XLA needs >= 12.6.85 on Hopper "
        "(NVIDIA bug 4826023)"]
    monkeypatch.setitem(locks.XLA_COMPILERS, "nvidia-nvjitlink-cu12", "13.0.88")
    with pytest.raises(ValueError, match=r"XLA_COMPILERS pins nvidia-nvjitlink-cu12==13\.0\.88, "
                                         r"outside TensorFlow's declared <13\.0,>=12\.5\.82"):
        locks.gpu_pins()


def test_a_lock_with_the_old_images_cudnn_8_is_refused():
    # What tensorflow/tensorflow:2.21.0-gpu ships (cuDNN 8.9 from apt) against TensorFlow's
    # cuDNN 9 build: the check names it.
    info = {"cuda_version": "12.5.1", "cudnn_version": "9"}
    pins = {**locks.pinned(_lock(images.GPU)), "nvidia-cudnn-cu12": "8.9.7.29"}
    assert locks.cuda_problems(pins, info) == [
        "cuDNN 9: the GPU lock pins nvidia-cudnn-cu12==8.9.7.29"]
    del pins["nvidia-nccl-cu12"]
    assert "nccl: nvidia-nccl-cu12 is not in the GPU lock" in locks.cuda_problems(pins, info)


def test_the_gpu_stage_puts_every_cuda_library_and_the_driver_on_the_library_path():
    env = stage_environment(GPU_DOCKERFILE)
    paths = env["LD_LIBRARY_PATH"].split(":")
    for package, _ in CUDA_LIBRARIES.values():
        folder = package.removeprefix("nvidia-").removesuffix("-cu12").replace("-", "_")
        assert f"{IMAGE_SITE_PACKAGES}/nvidia/{folder}/lib" in paths, package
    assert paths[0] == "/usr/local/nvidia/lib64"  # the driver Vertex AI mounts
    assert f"{IMAGE_SITE_PACKAGES}/nvidia/cuda_nvcc/bin" in env["PATH"].split(":")  # ptxas
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["TF_USE_LEGACY_KERAS"] == "1"
    cpu = stage_environment(CPU_DOCKERFILE)
    assert "LD_LIBRARY_PATH" not in cpu and cpu["TF_USE_LEGACY_KERAS"] == "1"


def test_the_lock_command_is_uv_with_hashes_for_the_images_platform():
    command = locks.lock_command(images.GPU)
    assert command[:4] == ["uv", "pip", "compile", "pyproject.toml"]
    assert "--generate-hashes" in command and images.LOCK_PLATFORM in command
    assert command[command.index("--constraint") + 1] == locks.GPU_CONSTRAINTS
    assert locks.CPU_OVERRIDES in locks.lock_command(images.CPU)


def test_dockerignore_keeps_secrets_and_environments_out():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # everything is excluded unless listed
    assert "!.venv/" not in ignore and "**/.env" in ignore


SECRETS = ("components/.env", "trainer/key.json", "pipelines/service-account-key.json",
           "trainer/gcp-credentials.json", "components/gpu/id_rsa", "trainer/tls.pem",
           ".env", "local_runs/model/saved_model.pb", ".venv/bin/python", "notes.txt",
           "pipelines/__pycache__/cli.cpython-311.pyc", "trainer/db_secret.yaml")


def test_the_build_context_follows_dockerignore_and_leaves_planted_secrets_out(tmp_path):
    project = copy_project(tmp_path / "project")
    for secret in SECRETS:
        (project / secret).parent.mkdir(parents=True, exist_ok=True)
        (project / secret).write_text("do-not-ship")
    context = write_build_context(tmp_path / "out", root=project)
    assert not set(SECRETS) & set(context.files)
    with tarfile.open(context.tarball) as tar:
        names = tar.getnames()
        assert not set(SECRETS) & set(names)
        assert all(b"do-not-ship" not in tar.extractfile(m).read() for m in tar.getmembers())
    assert "trainer/task.py" in names and images.GPU.dockerfile in names


@pytest.mark.parametrize("patterns,path,excluded", [
    ("*\n!trainer/\n", "trainer/task.py", False),
    ("*\n!trainer/\n", "pipelines/cli.py", True),
    ("**/*.pem\n", "a/b/c.pem", True),
    ("**/*.pem\n", "c.pem", True),
    ("docs\n!docs/keep.md\n", "docs/keep.md", False),
    ("docs\n!docs/keep.md\n", "docs/other.md", True),
    ("/build/\n", "build/x", True),
    ("a?c\n", "abc", True),
    ("*.txt\n", "dir/x.txt", False),  # `*` stays within one segment, as in Docker
])
def test_dockerignore_rules_are_dockers(patterns, path, excluded):
    from components.build.dockerignore import DockerIgnore

    assert DockerIgnore(patterns).excluded(path) is excluded


def test_the_gpu_lock_serves_every_architecture_the_validator_accepts(monkeypatch):
    """What `make image-check` proves in the built environment, here from the lock alone:
    the lock's cuBLAS and cuDNN are the releases the validator decides by, and they meet
    NVIDIA's documented needs of every GPU architecture it accepts (B200 and K80 are
    refused for it)."""
    from components.gpu.image_support import image_cannot_serve
    from release.locks import architecture_problems, pinned

    pins = pinned((ROOT / "requirements" / "gpu.lock").read_text())
    rows, problems = architecture_problems(pins)
    assert problems == []
    assert len(rows) == 8 and any(r.startswith("Blackwell") and "NOT met" in r for r in rows)
    assert image_cannot_serve("NVIDIA_B200") and image_cannot_serve("NVIDIA_TESLA_K80")
    # A lock moved to newer libraries without telling the validator is caught ...
    newer = {**pins, "nvidia-cudnn-cu12": "9.8.0.87"}
    assert "the GPU lock pins cudnn 9.8.0.87, but components/images.py GPU_CUDA_LIBRARIES " \
           "says 9.3: update it" in architecture_problems(newer)[1]
    # ... and once told, the validator accepts Blackwell's B200 (its XLA stays off: plan).
    monkeypatch.setitem(images.GPU_CUDA_LIBRARIES, "cublas", "12.8")
    monkeypatch.setitem(images.GPU_CUDA_LIBRARIES, "cudnn", "9.8")
    assert image_cannot_serve("NVIDIA_B200") == ""
    assert architecture_problems({**newer, "nvidia-cublas-cu12": "12.8.4.1"})[1] == []


def test_both_locks_hold_the_efficiency_samplers_libraries():
    """Every replica samples NVML and psutil (`trainer.run.sampler`): both images hold
    them, pinned with hashes; `make image-check` imports them (`_check_sampler`)."""
    from release.image_check import _check_sampler
    from release.locks import pinned

    for lock in ("gpu.lock", "cpu.lock"):
        pins = pinned((ROOT / "requirements" / lock).read_text())
        assert {"nvidia-ml-py", "psutil"} <= set(pins), lock
    report: dict = {}
    failures: list[str] = []
    _check_sampler(report, failures)
    assert failures == [] and report["sampler"].startswith("psutil ")
