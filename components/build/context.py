"""The image's build context: the Dockerfile and sources, packed deterministically.

The image tag is derived from the content digest, so the same sources always name the
same image.
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

from components.build.dockerignore import DockerIgnore
from trainer.errors import StageError


class BuildContextError(StageError):
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
    root = Path(__file__).resolve().parents[2]
    missing = [f for f in ("Dockerfile", "pyproject.toml") if not (root / f).is_file()]
    if missing:
        raise BuildContextError(
            f"cannot find {', '.join(missing)} beside the installed packages in {root}; "
            "install the project from its checkout with `pip install -e .` (as `make install` "
            "and the Dockerfile do)")
    return root


def _context_files(root: Path) -> list[str]:
    """The files `.dockerignore` leaves in the context, as the Docker engine would."""
    return DockerIgnore.of(root).files(root)


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
