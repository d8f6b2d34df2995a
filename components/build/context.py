"""The images' build context: the Dockerfiles and sources, packed deterministically.

The image tag is derived from the content digest, so the same sources always name the
same image. A user's model code (`training.user_code`) goes in as `user_code/`, under the
same `.dockerignore` rules: the image holds it, and its digest changes with it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import posixpath
import shutil
import tarfile
from pathlib import Path

from components import images
from components.build.dockerignore import DockerIgnore
from trainer.common.errors import StageError
from trainer.models.user_model import USER_CODE_IN_IMAGE


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
    """Returns the checkout (or image directory) holding the Dockerfiles and sources.

    Raises:
        BuildContextError: The installed project is not an editable checkout.
    """
    root = Path(__file__).resolve().parents[2]
    needed = ("pyproject.toml", *(image.dockerfile for image in images.PROJECT_IMAGES))
    missing = [f for f in needed if not (root / f).is_file()]
    if missing:
        raise BuildContextError(
            f"cannot find {', '.join(missing)} beside the installed packages in {root}; "
            "install the project from its checkout with `pip install -e .` (as `make install` "
            "and the Dockerfiles do)")
    return root


#: Where a user's model code sits in the context (and below the image's WORKDIR).
USER_CODE_DIR = posixpath.basename(USER_CODE_IN_IMAGE)


def _context_files(root: Path, user_code: Path | None) -> dict[str, Path]:
    """Context path -> file, for the files `.dockerignore` leaves in the context, as the
    Docker engine would; `user_code`'s files (if given) as `user_code/...`."""
    ignore = DockerIgnore.of(root)
    found = {rel: root / rel for rel in ignore.files(root)}
    if user_code is not None:
        found = {rel: path for rel, path in found.items()
                 if not rel.startswith(USER_CODE_DIR + "/")}
        for dirpath, dirnames, filenames in os.walk(user_code):
            dirnames.sort()
            base = Path(dirpath).relative_to(user_code).as_posix()
            prefix = USER_CODE_DIR + ("" if base == "." else f"/{base}")
            dirnames[:] = [d for d in dirnames if not ignore.excluded(f"{prefix}/{d}")]
            found.update({f"{prefix}/{name}": Path(dirpath) / name for name in filenames
                          if not ignore.excluded(f"{prefix}/{name}")})
    return dict(sorted(found.items()))


def deterministic_tarball(files: dict[str, Path]) -> bytes:
    """Packs `files` (context path -> file) into gzip'd tar bytes that depend only on
    content.

    Entries are sorted, owners, times and permissions are normalised, and the gzip header
    carries no time or name, so the same sources always give the same bytes.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in sorted(files.items()):
            data = path.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_build_context(destination: str | os.PathLike, root: Path | None = None,
                        user_code: str | os.PathLike | None = None) -> BuildContext:
    """Copies the trainer's build context to `destination` and packs it.

    Args:
        destination: Directory to create (`context/` and `context.tar.gz` go inside).
        root: Project root; defaults to the installed checkout.
        user_code: A directory of the user's model code, packed as `user_code/` (in place
            of one the root may hold, as an image built with user code does).

    Returns:
        The packed build context.
    """
    root = root or project_root()
    files = _context_files(root, Path(user_code) if user_code else None)
    dest = Path(destination)
    context_dir = dest / "context"
    for rel, path in files.items():
        target = context_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    data = deterministic_tarball(files)
    tarball = dest / "context.tar.gz"
    tarball.write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return BuildContext(context_dir, tarball, digest, tuple(files))


def user_code_files(context: BuildContext) -> list[str]:
    """The context's files of a user's model code."""
    return [f for f in context.files if f.startswith(USER_CODE_DIR + "/")]
