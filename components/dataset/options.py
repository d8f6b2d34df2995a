"""The dataset stage's options: declared once, used by the config file, the CLI and the
pipeline's `dataset` parameter (see `trainer.schema`)."""

from __future__ import annotations

import pydantic
from pydantic import Field

from components.dataset.sources import BUILTIN_SHAPES
from trainer.schema import STRICT


class DatasetOptions(pydantic.BaseModel):
    """Where the images come from and how they are split and sharded."""

    model_config = STRICT

    source: str = Field(BUILTIN_SHAPES, min_length=1, description=(
        "A folder with one sub-folder of images per class (local, /gcs/ or gs://), a "
        "CSV/JSONL manifest, tfds://NAME[/SPLIT] or builtin://shapes."))
    image_size: int = Field(32, ge=8, le=1024, description=(
        "Images are resized to this width and height."))
    validation_fraction: float = Field(0.2, gt=0, lt=1, description=(
        "Fraction of the examples in the validation split."))
    test_fraction: float = Field(0.1, ge=0, lt=1, description=(
        "Fraction of the examples in the held-out test split (0 for none)."))
    num_shards: int = Field(0, ge=0, le=4096, description=(
        "Shards per split; 0 plans them from the worker count and the data size."))
    max_bad_fraction: float = Field(0.01, ge=0, lt=1, description=(
        "Fail when more images than this fraction cannot be decoded."))

    def problems(self) -> list[str]:
        """Rules between fields (each field's own rules are checked by its declaration)."""
        if self.validation_fraction + self.test_fraction >= 1:
            return [f"test_fraction is {self.test_fraction}; expected validation_fraction + "
                    f"test_fraction < 1 (validation_fraction is {self.validation_fraction})"]
        return []
