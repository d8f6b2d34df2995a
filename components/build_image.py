"""Build stage: the trainer's build context, packed deterministically, and its digest.

The image tag is derived from the content digest, so the same sources always name the
same image. Building and pushing needs a Docker engine or Cloud Build; a local run
says so plainly and uses the trainer installed in its own environment instead.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any, Callable

from components import images

#: Files and package folders that make up the image, relative to the project root.
CONTEXT_FILES = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md")
CONTEXT_PACKAGES = ("pipelines", "components", "trainer")
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


class BuildContextError(RuntimeError):
    """The project sources needed for the image cannot be found."""


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """A packed build context.

    Attributes:
        directory: Directory holding the context files.
        tarball: Path of the deterministic `context.tar.gz`.
        digest: `sha256:<hex>` of the tarball's bytes.
        files: Relative paths in the context, sorted.
    """

    directory: Path
    tarball: Path
    digest: str
    files: tuple[str, ...]

    @property
    def tag(self) -> str:
        """Image tag derived from the digest (same sources, same tag)."""
        return content_tag(self.digest)


def content_tag(digest: str) -> str:
    """The image tag of a build context with `digest` (`sha256:<hex>`)."""
    return "src-" + digest.split(":", 1)[1][:16]


def project_root() -> Path:
    """Returns the checkout (or image directory) holding the Dockerfile and sources.

    Raises:
        BuildContextError: The installed project is not an editable checkout.
    """
    root = Path(__file__).resolve().parent.parent
    missing = [f for f in ("Dockerfile", "pyproject.toml") if not (root / f).is_file()]
    if missing:
        raise BuildContextError(
            f"cannot find {', '.join(missing)} beside the installed packages in {root}; "
            "install the project from its checkout with `pip install -e .` (as `make install` "
            "and the Dockerfile do)")
    return root


def _context_files(root: Path) -> list[str]:
    files = [f for f in CONTEXT_FILES if (root / f).is_file()]
    for package in CONTEXT_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / package):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for name in filenames:
                if not name.endswith(_SKIP_SUFFIXES):
                    files.append(str((Path(dirpath) / name).relative_to(root)))
    return sorted(files)


def deterministic_tarball(root: Path, files: list[str]) -> bytes:
    """Packs `files` (relative to `root`) into gzip'd tar bytes that depend only on content.

    Entries are sorted, owners, times and permissions are normalised, and the gzip header
    carries no time or name, so the same sources always give the same bytes.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (root / rel).read_bytes()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if os.access(root / rel, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_build_context(destination: str | os.PathLike, root: Path | None = None) -> BuildContext:
    """Copies the trainer's build context to `destination` and packs it.

    Args:
        destination: Directory to create (`context/` and `context.tar.gz` go inside).
        root: Project root; defaults to the installed checkout.

    Returns:
        The packed build context.
    """
    root = root or project_root()
    files = _context_files(root)
    dest = Path(destination)
    context_dir = dest / "context"
    for rel in files:
        target = context_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)
    data = deterministic_tarball(root, files)
    tarball = dest / "context.tar.gz"
    tarball.write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return BuildContext(context_dir, tarball, digest, tuple(files))


def trainer_image_uri(repository: str, context: BuildContext) -> str:
    """The image URI the build context produces: `<repository>/gpu-pipeline:src-<digest>`."""
    return images.image_uri(repository, context.tag)


def run_build_stage(context_dir: str, context_uri: str, image_repository: str, *, push: bool,
                    trainer_source_uri: str = "", service_account: str = "",
                    clients: tuple[Any, Any, Any] | None = None,
                    log: Callable[[str], None] = print) -> tuple[str, dict[str, Any]]:
    """Stage 3: the trainer's build context, and on Vertex the image built from it.

    Args:
        context_dir: Local (or /gcs/ FUSE) directory of the stage's build context artifact.
        context_uri: The same location as a URI (`gs://...` on Vertex).
        image_repository: Artifact Registry repository of the project image.
        push: Build and push with Cloud Build (Vertex); False for local runs, which train
            with the trainer installed in their own environment.
        trainer_source_uri: A build context tarball uploaded by `gpu-pipeline submit`;
            empty to use the sources of the stage's own image.
        service_account: Service account Cloud Build runs as.
        clients: (storage, Cloud Build, Artifact Registry) clients; created when None.
        log: Where progress lines go.

    Returns:
        (image to train with, "" for local runs; metadata for the artifact).
    """
    context = write_build_context(context_dir)
    metadata: dict[str, Any] = {"digest": context.digest, "files": len(context.files),
                                "image_uri": trainer_image_uri(image_repository, context)}
    if not push:
        log(f"[gpu-pipeline] build context: {len(context.files)} files, {context.digest}")
        log(f"[gpu-pipeline] local run: image {metadata['image_uri']} was not built or pushed "
            "(no Docker engine is used); training uses the trainer installed in this "
            "environment")
        return "", {**metadata, "pushed": False}

    from components import cloud_build

    storage, builder, registry = clients or _cloud_clients()
    source_uri = f"{context_uri.rstrip('/')}/context.tar.gz"
    tag = context.tag
    if trainer_source_uri:  # sources uploaded by `gpu-pipeline submit`: build those
        from components.dataset import split_gcs_uri

        bucket, name = split_gcs_uri(trainer_source_uri)
        data = storage.bucket(bucket).blob(name).download_as_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        tag, source_uri = content_tag(digest), trainer_source_uri
        metadata.update(digest=digest, image_uri=images.image_uri(image_repository, tag))
    log(f"[gpu-pipeline] build context {source_uri} ({metadata['digest']})")
    image, built = cloud_build.ensure_image(image_repository, tag, source_uri,
                                            build_client=builder, registry_client=registry,
                                            service_account=service_account, log=log)
    return image, {**metadata, "image_uri": image, "pushed": True, "built": built,
                   "source_uri": source_uri}


def _cloud_clients() -> tuple[Any, Any, Any]:
    from google.cloud import artifactregistry_v1
    from google.cloud.devtools import cloudbuild_v1

    from components.dataset import storage_client

    return (storage_client(), cloudbuild_v1.CloudBuildClient(),
            artifactregistry_v1.ArtifactRegistryClient())
