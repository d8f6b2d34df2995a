"""A folder with one sub-folder of images per class: a local path, or Vertex AI's `/gcs/`
mount of Cloud Storage (the fallback kind: any path)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from components.dataset.sources.base import (
    IMAGE_EXTENSIONS,
    DatasetError,
    Example,
    SourceKind,
    SourceListing,
    accepted_forms,
    check_extension,
    classes_from,
    local_path_problem,
    raise_unknown,
)
from trainer.common.gcs import mounted_gcs_uri


def list_image_folder(source_dir: str | os.PathLike) -> tuple[list[str], list[tuple[str, int]]]:
    """Lists a local image folder with one sub-folder per class.

    Args:
        source_dir: Directory whose sub-folders are the class names.

    Returns:
        (class names sorted, [(path relative to source_dir, label index), ...]).

    Raises:
        DatasetError: The directory is missing, has fewer than two classes, a class folder
            holds no image, or files of unknown type.
    """
    listing = _list_local_folder(str(source_dir))
    return listing.classes, [(e.identity, e.label) for e in listing.examples]


def _list_local_folder(source: str) -> SourceListing:
    root = Path(source)
    if not root.is_dir():
        raise DatasetError(f"dataset source {source!r} is not a directory; expected "
                           f"{accepted_forms()}")
    names = [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    classes = classes_from(names, f"dataset source {source!r}")
    examples, unknown = [], []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        count = 0
        for path in sorted((root / name).rglob("*")):
            rel = str(path.relative_to(root))
            if not path.is_file() or any(p.startswith(".") for p in Path(rel).parts):
                continue
            if check_extension(rel, "", unknown):
                stat = path.stat()
                examples.append(Example(str(path), rel, label, stat.st_size))
                h.update(f"{rel}\0{label}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
                count += 1
        if not count and not unknown:
            raise DatasetError(f"class folder {str(root / name)!r} holds no image "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
    raise_unknown(unknown, f"dataset source {source!r}")
    return SourceListing("folder", classes, examples, "sha256:" + h.hexdigest())


class LocalFolder(SourceKind):
    name = "folder"
    form = "a folder with one sub-folder of images per class: a local or /gcs/ path"
    fallback = True

    @classmethod
    def matches(cls, source: str) -> bool:
        return "://" not in source

    @classmethod
    def problem(cls, source: str) -> str | None:
        return None if source.strip() and "\0" not in source else "expected a path"

    @classmethod
    def preflight(cls, source: str) -> None:
        if mounted_gcs_uri(source):  # Vertex's mount: read where the stage runs
            return
        root = Path(source)
        if not root.is_dir():
            raise DatasetError(f"it is not a directory; expected {accepted_forms()}")
        classes_from((p.name for p in root.iterdir()
                       if p.is_dir() and not p.name.startswith(".")), "it")

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return local_path_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_local_folder(source)
