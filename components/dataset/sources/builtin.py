"""`builtin://shapes`: a small dataset drawn here (`components.dataset.shapes`), the
embedded default of a first run."""

from __future__ import annotations

from typing import Any

from components.dataset.shapes import IDENTITY, SHAPE_CLASSES, draw_identity
from components.dataset.sources.base import Example, SourceKind, SourceListing

BUILTIN_SHAPES = "builtin://shapes"

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
