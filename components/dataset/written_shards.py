"""What an engine wrote: the shards (with their counts, sizes and hashes) and the skipped
images. Both engines return it; the stage turns it into the manifest."""

from __future__ import annotations

import dataclasses
from typing import Any

from components.dataset.sources import DatasetError


@dataclasses.dataclass(frozen=True)
class Shard:
    """One written shard file.

    Attributes:
        split: Its split.
        file: Its name in the output directory.
        count: Examples in it.
        bytes: Its size.
        sha256: The SHA-256 of its content, in hex.
        per_class: Examples of each class (by label index).
    """

    split: str
    file: str
    count: int
    bytes: int
    sha256: str
    per_class: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """As a JSON object (the Beam engine's results travel as JSON lines)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shard:
        return cls(**{**data, "per_class": tuple(data["per_class"])})


#: One written image's facts as the statistics read them: its split, identity and label,
#: then its `image_facts.Facts` (width, height, format, exact, thumb).
Noted = tuple[str, str, int, int, int, str, str, str]


@dataclasses.dataclass
class Written:
    """Every shard written, the images that could not be (file and reason), and the
    written images' facts (`Noted`)."""

    shards: list[Shard]
    skipped: list[dict[str, str]]
    dataflow: dict[str, Any] | None = None  # the Dataflow job that wrote them (its usage)
    facts: list[Noted] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        # In file order, whichever order the engine met them in.
        self.skipped = sorted(self.skipped, key=lambda s: s["file"])

    def count(self, split: str) -> int:
        """Examples written into `split`."""
        return sum(s.count for s in self.shards if s.split == split)

    def split_entry(self, split: str, classes: list[str]) -> dict[str, Any]:
        """The manifest's entry of a split (its shards in file order)."""
        shards = sorted((s for s in self.shards if s.split == split), key=lambda s: s.file)
        per_class = [sum(s.per_class[i] for s in shards) for i in range(len(classes))]
        return {"count": self.count(split),
                "per_class": dict(zip(classes, per_class, strict=True)),
                "shards": [{"file": s.file, "count": s.count, "bytes": s.bytes,
                            "sha256": s.sha256} for s in shards]}

    def check(self, splits: list[str], total: int, max_bad_fraction: float) -> None:
        """Raises DatasetError when too many images were skipped, or a whole split."""
        bad_fraction = len(self.skipped) / total if total else 0.0
        if bad_fraction > max_bad_fraction:
            skipped = self.skipped
            first = "; ".join(f"{s['file']}: {s['reason']}" for s in skipped[:5])
            raise DatasetError(f"{len(skipped)} of {total} images ({bad_fraction:.1%}) could "
                               f"not be decoded, above max_bad_fraction "
                               f"{max_bad_fraction:.1%}: {first}"
                               f"{' ...' if len(skipped) > 5 else ''}; fix or remove them, "
                               "or raise max_bad_fraction")
        for split in splits:
            if not self.count(split):
                raise DatasetError(f"every image of the {split} split was skipped")

