"""What every kind of dataset source shares: the kind's interface (`SourceKind`), the
registry (`register`, `KINDS`, `kind_of`), what a listing holds, and the checks of image
files and class names that several kinds apply."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from trainer.common.errors import InputError
from trainer.common.gcs import mounted_gcs_uri, read_bytes
from trainer.common.schema import short

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


def classes_from(labels: Iterable[str], where: str) -> list[str]:
    """The class names, sorted; at least two, else a DatasetError naming `where`."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DatasetError(f"{where} has {len(classes)} class(es) ({', '.join(classes) or 'none'});"
                           " classification needs at least 2")
    return classes


def check_extension(name: str, where: str, unknown: list[str]) -> bool:
    """Whether `name` is an image file; if not, it joins `unknown`."""
    suffix = Path(name).suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return True
    unknown.append(f"{where}/{name}" if where else name)
    return False


def raise_unknown(unknown: list[str], where: str) -> None:
    """Refuses a source holding files of unknown type, naming the first few."""
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5
                                          else "")
        raise DatasetError(f"{where} holds {len(unknown)} file(s) of unknown type ({shown}); "
                           f"image files end in {', '.join(IMAGE_EXTENSIONS)}: remove or "
                           "convert the others")


def local_path_problem(source: str) -> str | None:
    """Why the pipeline on Vertex AI cannot read a path on this machine; None for Cloud
    Storage (`gs://` or Vertex AI's `/gcs/` mount)."""
    if "://" in source or mounted_gcs_uri(source):
        return None
    return ("a path on this machine, which the pipeline on Vertex AI cannot read; copy it to "
            f"Cloud Storage (gcloud storage cp -r {source} gs://BUCKET/PATH) and give "
            "gs://BUCKET/PATH")


class SourceKind:
    """One kind of dataset source; subclasses set `name` and `form` and implement `matches`
    and `listing`, and override the other checks where they have something to say.

    Attributes:
        name: The kind, as manifests record it (`source_kind`).
        form: How a user writes such a source, for messages.
        fallback: Tried after every other kind (a plain path).
        reads_files: Its examples' refs are files (a local, `/gcs/` or `gs://` path) that
            `load` reads, rather than names of images it makes.
        one_stream: The kind reads its images itself, in one stream and in its own order
            (`bulk_results`), so no engine can split the reading among workers: the Beam
            engine refuses it, as the dataset options do.
    """

    name: ClassVar[str]
    form: ClassVar[str]
    fallback: ClassVar[bool] = False
    reads_files: ClassVar[bool] = True
    one_stream: ClassVar[bool] = False

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


def source_fingerprint(source: str, image_size: int = 32,
                       builtin_images_per_class: int = 400) -> str:
    """A cheap key of the source's current state (names, sizes, times or checksums).

    The pipeline passes it to the preparation stage, so KFP's cache reuses the prepared
    data exactly when the source is unchanged.
    """
    return list_source(source, image_size, builtin_images_per_class).fingerprint
