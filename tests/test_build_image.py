"""Build stage: the context, its deterministic tarball and digest, and the image pins."""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path

import pytest
import tomllib

from components import images
from components.build.context import project_root, trainer_image_uri, write_build_context

ROOT = Path(__file__).resolve().parent.parent


def copy_project(destination: Path) -> Path:
    """A copy of what the build context is made from (no caches), to change freely."""
    destination.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, destination / name)
    for package in ("pipelines", "components", "trainer"):
        shutil.copytree(ROOT / package, destination / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def test_context_holds_dockerfile_and_sources(tmp_path):
    context = write_build_context(tmp_path)
    assert {"Dockerfile", "pyproject.toml", "trainer/task.py", "components/ops.py",
            "pipelines/pipeline.py"} <= set(context.files)
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in context.files)
    assert (context.directory / "trainer" / "task.py").read_bytes() == \
        (ROOT / "trainer" / "task.py").read_bytes()
    with tarfile.open(context.tarball) as tar:
        assert sorted(tar.getnames()) == list(context.files)
        assert {m.mtime for m in tar.getmembers()} == {0}
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", context.digest)
    uri = trainer_image_uri("r.example/p/repo", context)
    assert uri == f"r.example/p/repo/gpu-pipeline:{context.tag}"


def test_same_sources_same_digest_and_a_change_changes_it(tmp_path):
    copy = copy_project(tmp_path / "project")
    first = write_build_context(tmp_path / "a", root=copy)
    second = write_build_context(tmp_path / "b", root=copy)
    assert first.tarball.read_bytes() == second.tarball.read_bytes()
    assert first.digest == second.digest and first.tag == second.tag
    (copy / "trainer" / "task.py").write_text("# changed\n")
    third = write_build_context(tmp_path / "c", root=copy)
    assert third.digest != first.digest


def test_image_and_tensorflow_pins_agree():
    assert project_root() == ROOT
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"FROM {images.TRAINER_BASE_IMAGE}\n" in dockerfile
    assert 'ENTRYPOINT ["python", "-m", "trainer.task"]' in dockerfile
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    major_minor = ".".join(images.TENSORFLOW_VERSION.split(".")[:2])
    for package in ("tensorflow", "tf-keras"):
        spec = next(d for d in deps if d.startswith(package + ">="))
        assert f">={major_minor}" in spec, spec


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
    assert "trainer/task.py" in names and "Dockerfile" in names


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
