"""Dataset sources: one class per kind, registered once (`register`, `KINDS`).

A kind says which sources it takes (`matches`), what is wrong with one without looking at
it (`problem`, at config load), what is wrong with it before the pipeline starts
(`preflight`, cheap: does the folder have classes, is the TFDS dataset on disk), why the
pipeline on Vertex AI cannot read it (`vertex_problem`), what it holds (`listing`: classes,
examples and a fingerprint of its state, without reading images) and how an image is read
in a decoding process (`load`). The kinds here (`dataset.source`):

- a folder with one sub-folder of images per class: a local path or Vertex's `/gcs/`
  mount (`LocalFolder`), or a `gs://bucket/prefix` read with google-cloud-storage
  (`GcsFolder`);
- a CSV or JSONL manifest of (image URI, label), the URIs local, relative to the manifest
  or `gs://` (`Manifest`);
- `tfds://NAME[/SPLIT]`, a TensorFlow Datasets dataset already on disk (`Tfds`; optional
  extra; never downloaded);
- `builtin://shapes`, drawn by `components.dataset.shapes` (`BuiltinShapes`).

Adding a kind is one class and `register(Kind)`; messages list the accepted forms from
the registry.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from components.cloud_names import gcs_uri_problem
from components.dataset.shapes import IDENTITY, SHAPE_CLASSES, draw_identity
from trainer.errors import InputError, first_line
from trainer.gcs import mounted_gcs_uri, read_bytes, split_gcs_uri, storage_client
from trainer.schema import short

BUILTIN_SHAPES = "builtin://shapes"
TFDS_PREFIX = "tfds://"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


class DatasetError(InputError):
    """A dataset source or parameter the stage cannot use."""


@dataclasses.dataclass(frozen=True)
class Example:
    """One source image: where to read it, its stable identity and its label index."""

    ref: str
    identity: str
    label: int
    size: int = 0


@dataclasses.dataclass
class SourceListing:
    """What a source holds, before any image is read."""

    kind: str
    classes: list[str]
    examples: list[Example]
    fingerprint: str




def _classes_from(labels: Iterable[str], where: str) -> list[str]:
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DatasetError(f"{where} has {len(classes)} class(es) ({', '.join(classes) or 'none'});"
                           " classification needs at least 2")
    return classes


def _check_extension(name: str, where: str, unknown: list[str]) -> bool:
    suffix = Path(name).suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return True
    unknown.append(f"{where}/{name}" if where else name)
    return False


def _raise_unknown(unknown: list[str], where: str) -> None:
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5
                                          else "")
        raise DatasetError(f"{where} holds {len(unknown)} file(s) of unknown type ({shown}); "
                           f"image files end in {', '.join(IMAGE_EXTENSIONS)}: remove or "
                           "convert the others")


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
    classes = _classes_from(names, f"dataset source {source!r}")
    examples, unknown = [], []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        count = 0
        for path in sorted((root / name).rglob("*")):
            rel = str(path.relative_to(root))
            if not path.is_file() or any(p.startswith(".") for p in Path(rel).parts):
                continue
            if _check_extension(rel, "", unknown):
                stat = path.stat()
                examples.append(Example(str(path), rel, label, stat.st_size))
                h.update(f"{rel}\0{label}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
                count += 1
        if not count and not unknown:
            raise DatasetError(f"class folder {str(root / name)!r} holds no image "
                               f"({', '.join(IMAGE_EXTENSIONS)})")
    _raise_unknown(unknown, f"dataset source {source!r}")
    return SourceListing("folder", classes, examples, "sha256:" + h.hexdigest())


def _list_gcs_folder(source: str) -> SourceListing:
    bucket, prefix = split_gcs_uri(source.rstrip("/") + "/")
    from google.api_core import exceptions

    try:
        blobs = sorted(storage_client().list_blobs(bucket, prefix=prefix),
                       key=lambda b: b.name)
    except exceptions.GoogleAPIError as exc:
        first = first_line(exc)
        raise DatasetError(f"dataset source {source!r} cannot be listed: {first[:300]}") from None
    by_class: dict[str, list[Any]] = {}
    unknown: list[str] = []
    for blob in blobs:
        rel = blob.name[len(prefix):]
        if "/" not in rel or rel.endswith("/") or any(p.startswith(".") for p in rel.split("/")):
            continue
        if _check_extension(rel, "", unknown):
            by_class.setdefault(rel.split("/", 1)[0], []).append(blob)
    if not blobs:
        raise DatasetError(f"dataset source {source!r} holds no objects; expected "
                           f"{source.rstrip('/')}/<class>/<image> objects")
    _raise_unknown(unknown, f"dataset source {source!r}")
    classes = _classes_from(by_class, f"dataset source {source!r}")
    examples = []
    h = hashlib.sha256()
    for label, name in enumerate(classes):
        for blob in by_class[name]:
            rel = blob.name[len(prefix):]
            examples.append(Example(f"gs://{bucket}/{blob.name}", rel, label, blob.size or 0))
            h.update(f"{rel}\0{label}\0{blob.size}\0{blob.md5_hash}\0{blob.generation}\n".encode())
    return SourceListing("gcs-folder", classes, examples, "sha256:" + h.hexdigest())


def _manifest_rows(source: str, text: str) -> Iterator[tuple[int, str | None, str | None]]:
    if source.lower().endswith(".jsonl"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{source}:{number} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{source}:{number} is not a JSON object with image and label")
            yield number, row.get("image"), row.get("label")
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = {"image", "label"} - set(reader.fieldnames or ())
        if missing:
            raise DatasetError(f"{source} lacks the column(s) {', '.join(sorted(missing))}; a "
                               "CSV manifest needs a header with image,label")
        for number, row in enumerate(reader, 2):
            yield number, row.get("image"), row.get("label")


def _list_manifest(source: str) -> SourceListing:
    try:
        text = read_bytes(source).decode("utf-8")
    except FileNotFoundError:
        raise DatasetError(f"dataset manifest {source!r} does not exist") from None
    base = os.path.dirname(source)
    rows, problems, unknown = [], [], []
    for number, image, label in _manifest_rows(source, text):
        label = str(label).strip() if label not in (None, "") else ""
        if not image:
            problems.append(f"{source}:{number}: no image URI")
        elif not label:
            problems.append(f"{source}:{number}: image {image!r} has no label")
        elif _check_extension(str(image), "", unknown):
            ref = image if image.startswith("gs://") or os.path.isabs(image) \
                else os.path.join(base, image)
            rows.append((ref, label))
    if problems:
        raise DatasetError(f"dataset manifest {source!r} has {len(problems)} unusable row(s): "
                           + "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else ""))
    _raise_unknown(unknown, f"dataset manifest {source!r}")
    if not rows:
        raise DatasetError(f"dataset manifest {source!r} lists no images")
    classes = _classes_from((label for _, label in rows), f"dataset manifest {source!r}")
    index = {c: i for i, c in enumerate(classes)}
    examples = [Example(ref, ref, index[label]) for ref, label in rows]
    h = hashlib.sha256(text.encode())
    for ex in examples:  # the images' own state, so a replaced file changes the key
        if not ex.ref.startswith("gs://") and os.path.exists(ex.ref):
            stat = os.stat(ex.ref)
            h.update(f"{ex.ref}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return SourceListing("manifest", classes, examples, "sha256:" + h.hexdigest())


def _list_tfds(source: str) -> SourceListing:
    name, _, split = source[len(TFDS_PREFIX):].partition("/")
    info = _tfds_builder(source).info
    classes = list(info.features["label"].names)
    split = split or "train"
    total = info.splits[split].num_examples
    examples = [Example(f"{source}#{i}", f"{name}/{split}/{i}", -1) for i in range(total)]
    fingerprint = f"tfds:{name}:{info.version}:{split}:{total}"
    return SourceListing("tfds", classes, examples, fingerprint)


def _list_builtin(image_size: int, per_class: int) -> SourceListing:
    """The builtin shapes, drawn later by the encoding processes (`builtin_image`)."""
    examples = [Example(f"{BUILTIN_SHAPES}#{identity}", identity, label)
                for label, name in enumerate(SHAPE_CLASSES) for index in range(per_class)
                for identity in [IDENTITY.format(label=name, index=index)]]
    # v: the drawing's version; a new one draws other pixels (and misses KFP's cache).
    fingerprint = f"{BUILTIN_SHAPES}?images_per_class={per_class}&image_size={image_size}&v=3"
    return SourceListing("builtin", list(SHAPE_CLASSES), examples, fingerprint)


def builtin_image(ref: str, image_size: int) -> Any:
    """Draws the builtin image `ref` (`builtin://shapes#circle/circle_00007.png`)."""
    return draw_identity(ref[len(BUILTIN_SHAPES) + 1:], image_size)


def source_fingerprint(source: str, image_size: int = 32,
                       builtin_images_per_class: int = 400) -> str:
    """A cheap key of the source's current state (names, sizes, times or checksums).

    The pipeline passes it to the preparation stage, so KFP's cache reuses the prepared
    data exactly when the source is unchanged.
    """
    return list_source(source, image_size, builtin_images_per_class).fingerprint


# --- The kinds of source ---------------------------------------------------------------------


class SourceKind:
    """One kind of dataset source; subclasses set `name` and `form` and implement `matches`
    and `listing`, and override the other checks where they have something to say.

    Attributes:
        name: The kind, as manifests record it (`source_kind`).
        form: How a user writes such a source, for messages.
        fallback: Tried after every other kind (a plain path).
        reads_files: Its examples' refs are files (a local, `/gcs/` or `gs://` path) that
            `load` reads, rather than names of images it makes.
    """

    name: ClassVar[str]
    form: ClassVar[str]
    fallback: ClassVar[bool] = False
    reads_files: ClassVar[bool] = True

    @classmethod
    def matches(cls, source: str) -> bool:
        raise NotImplementedError

    @classmethod
    def problem(cls, source: str) -> str | None:
        """Why `source` is malformed, without looking at it (config load); None if not."""
        return None

    @classmethod
    def preflight(cls, source: str) -> None:
        """Raises DatasetError when a cheap look at the source shows it unusable (before the
        pipeline starts; the message says what, the caller names the source); sources read
        only where the pipeline runs are not looked at."""

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        """Why the pipeline on Vertex AI cannot read `source`; None if it can."""
        return None

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        """What the source holds (classes, examples, fingerprint), without reading images."""
        raise NotImplementedError

    @classmethod
    def load(cls, ref: str, image_size: int) -> Any:
        """An example's image, in a decoding process: its encoded bytes, or a PIL image."""
        return read_bytes(ref)

    @classmethod
    def bulk_results(cls, order: list[Example], image_size: int,
                     image_format: str) -> Iterator[Any] | None:
        """Encoded results read by the kind itself, in its own order; None to decode each
        example with `load` in the decoding pool."""
        return None


#: The registered kinds, in the order they are tried (fallbacks last).
KINDS: list[type[SourceKind]] = []


def register(kind: type[SourceKind]) -> type[SourceKind]:
    """Registers a kind of source (usable as a class decorator)."""
    if kind not in KINDS:
        KINDS.append(kind)
    KINDS.sort(key=lambda k: k.fallback)
    return kind


def accepted_forms() -> str:
    """Every registered kind's form, for messages."""
    return "; ".join(k.form for k in KINDS)


def kind_of(source: str) -> type[SourceKind]:
    """The kind of `source`.

    Raises:
        DatasetError: No registered kind takes it.
    """
    if isinstance(source, str) and source:
        for kind in KINDS:
            if kind.matches(source):
                return kind
    raise DatasetError(f"dataset source {short(source)} is of no kind this stage reads; "
                       f"expected {accepted_forms()}")


def kind_named(name: str) -> type[SourceKind]:
    """The registered kind called `name` (a listing's `kind`)."""
    return next(k for k in KINDS if k.name == name)


def list_source(source: str, image_size: int = 32,
                builtin_images_per_class: int = 400) -> SourceListing:
    """Lists a dataset source without reading its images.

    Raises:
        DatasetError: The source is missing or unusable (the message says how).
    """
    kind = kind_of(source)
    problem = kind.problem(source)
    if problem:
        raise DatasetError(f"dataset source {short(source)}: {problem}")
    return kind.listing(source, image_size, builtin_images_per_class)


@register
class BuiltinShapes(SourceKind):
    name = "builtin"
    form = f"{BUILTIN_SHAPES} (drawn here)"
    reads_files = False

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.startswith("builtin://")

    @classmethod
    def problem(cls, source: str) -> str | None:
        return None if source == BUILTIN_SHAPES else \
            f"the only builtin dataset is {BUILTIN_SHAPES}"

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_builtin(image_size, per_class)

    @classmethod
    def load(cls, ref: str, image_size: int) -> Any:
        return builtin_image(ref, image_size)  # drawn in the decoding process


@register
class Tfds(SourceKind):
    name = "tfds"
    form = f"{TFDS_PREFIX}NAME[/SPLIT] (a TensorFlow Datasets dataset on this machine's disk)"

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.startswith(TFDS_PREFIX)

    @classmethod
    def problem(cls, source: str) -> str | None:
        return None if re.fullmatch(r"[a-z0-9_]+(:[0-9.]+)?(/[\w\[\]:%+.-]+)?",
                                    source[len(TFDS_PREFIX):]) \
            else "expected tfds://NAME or tfds://NAME/SPLIT"

    @classmethod
    def preflight(cls, source: str) -> None:
        _tfds_builder(source)

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return ("a TensorFlow Datasets dataset on this machine's disk, which the pipeline on "
                "Vertex AI cannot read: its images hold neither TFDS nor the data; export the "
                "images to Cloud Storage as class folders or a CSV/JSONL manifest and give its "
                "gs:// URI (or run it locally: gpu-pipeline run --local)")

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_tfds(source)

    @classmethod
    def bulk_results(cls, order: list[Example], image_size: int,
                     image_format: str) -> Iterator[Any] | None:
        from components.dataset.encode import tfds_results

        return tfds_results(order, image_size, image_format)


@register
class Manifest(SourceKind):
    name = "manifest"
    form = "a CSV (image,label) or JSONL manifest: local, /gcs/ or gs://"

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.lower().endswith((".csv", ".jsonl"))

    @classmethod
    def problem(cls, source: str) -> str | None:
        return gcs_uri_problem(source) if source.startswith("gs://") else None

    @classmethod
    def preflight(cls, source: str) -> None:
        if "://" not in source and not mounted_gcs_uri(source) and not Path(source).is_file():
            raise DatasetError("this manifest does not exist")

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return _local_path_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_manifest(source)


@register
class GcsFolder(SourceKind):
    name = "gcs-folder"
    form = "gs://BUCKET/PREFIX holding one folder of images per class"

    @classmethod
    def matches(cls, source: str) -> bool:
        return source.startswith("gs://")

    @classmethod
    def problem(cls, source: str) -> str | None:
        return gcs_uri_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_gcs_folder(source)


@register
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
        _classes_from((p.name for p in root.iterdir()
                       if p.is_dir() and not p.name.startswith(".")), "it")

    @classmethod
    def vertex_problem(cls, source: str) -> str | None:
        return _local_path_problem(source)

    @classmethod
    def listing(cls, source: str, image_size: int, per_class: int) -> SourceListing:
        return _list_local_folder(source)


def _local_path_problem(source: str) -> str | None:
    if "://" in source or mounted_gcs_uri(source):
        return None
    return ("a path on this machine, which the pipeline on Vertex AI cannot read; copy it to "
            f"Cloud Storage (gcloud storage cp -r {source} gs://BUCKET/PATH) and give "
            "gs://BUCKET/PATH")


def _tfds_builder(source: str) -> Any:
    """The TFDS builder of a `tfds://` source, checked to be prepared on disk."""
    name = source[len(TFDS_PREFIX):].partition("/")[0]
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"dataset source {source!r} needs tensorflow-datasets: install the "
                           "project with the [tfds] extra") from None
    try:
        builder = tfds.builder(name)
        prepared = os.path.isdir(builder.data_dir) and bool(os.listdir(builder.data_dir))
    except Exception as exc:  # noqa: BLE001 - tfds raises many types for unknown names
        # The first line only: tfds appends every dataset it knows (over 20 KB).
        raise DatasetError(f"TFDS dataset {name!r} cannot be used: {first_line(exc)}") from None
    if not prepared:
        raise DatasetError(f"TFDS dataset {name!r} is not on disk under {builder.data_dir}; "
                           "prepare it first (this stage never downloads)")
    return builder
