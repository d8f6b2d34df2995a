"""The dataset stage's options: declared once, used by the config file, the CLI and the
pipeline's `dataset` parameter (see `trainer.common.schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, Field

from components.cloud_names import ServiceAccount
from components.dataset.sources import (
    BUILTIN_SHAPES,
    DatasetError,
    accepted_forms,
    kind_of,
)
from trainer.common.schema import STRICT


def _source(value: str) -> str:
    # The kind's own format check (no I/O): see `components.dataset.sources`.
    try:
        kind = kind_of(value)
    except DatasetError:
        scheme = value.split("://", 1)[0] + "://" if "://" in value else value
        raise ValueError(f"the scheme {scheme} is not read; expected {accepted_forms()}") from None
    problem = kind.problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: `image_format: auto` stores JPEG from this image size up (photos), lossless PNG below
#: (thumbnails), where PNG's size is small and decoding costs little anyway.
JPEG_MIN_SIZE = 64


def stored_format(image_format: str, source: str, image_size: int) -> str:
    """The format images are stored in: `png` or `jpeg`, with `auto` resolved.

    `auto` picks JPEG for photos (at 224x224 a fifth of PNG's bytes, prepared 2.3x and read
    2.3x as fast with random crops: benchmarks/dataset_prep.py, input_pipeline.py) and PNG for
    the synthetic builtin shapes (flat colours, which PNG compresses losslessly better than
    JPEG) and for images smaller than JPEG_MIN_SIZE.
    """
    if image_format != "auto":
        return image_format
    if source == BUILTIN_SHAPES or image_size < JPEG_MIN_SIZE:
        return "png"
    return "jpeg"


class DatasetOptions(pydantic.BaseModel):
    """Where the images come from and how they are split and sharded."""

    model_config = STRICT

    @pydantic.model_validator(mode="before")
    @classmethod
    def _without_dropped(cls, data: Any) -> Any:
        # Specs compiled before near duplicates were found by thumbnails still pass the
        # hash's bit count; the config loader says it is ignored (`DROPPED_KEYS`).
        if isinstance(data, dict) and "near_duplicate_distance" in data:
            data = {k: v for k, v in data.items() if k != "near_duplicate_distance"}
        return data

    source: Annotated[str, AfterValidator(_source)] = Field(BUILTIN_SHAPES, description=(
        f"Where the images come from: {accepted_forms()}."))
    image_size: int = Field(32, ge=8, le=1024, description=(
        "Images are resized to this width and height."))
    validation_fraction: float = Field(0.2, gt=0, lt=1, description=(
        "Fraction of the examples in the validation split."))
    test_fraction: float = Field(0.1, ge=0, lt=1, description=(
        "Fraction of the examples in the held-out test split (0 for none)."))
    num_shards: int = Field(0, ge=0, le=4096, description=(
        "Shards per split; 0 sizes them from the input pipelines and the data size."))
    image_format: Literal["auto", "png", "jpeg"] = Field("auto", description=(
        "How the shards store images: jpeg (quality 95) or lossless png; auto: jpeg for "
        f"photos of {JPEG_MIN_SIZE}x{JPEG_MIN_SIZE} and up, png for smaller or builtin images."))
    max_bad_fraction: float = Field(0.01, ge=0, lt=1, description=(
        "Fail when more images than this fraction cannot be decoded."))
    engine: Literal["local", "beam"] = Field("local", description=(
        "Who prepares the dataset: local (this machine's or the component's cores) or beam "
        "(Apache Beam: in this process locally, a Dataflow job on Vertex AI)."))
    dataflow_max_workers: int = Field(10, ge=1, le=1000, description=(
        "With engine beam on Vertex AI: most Dataflow workers (autoscaling up to it)."))
    dataflow_machine_type: str = Field(
        "n2-standard-4", pattern=r"^[a-z][a-z0-9]*-[a-z0-9-]+$", description=(
            "With engine beam on Vertex AI: the Dataflow workers' Compute Engine machine "
            "type."), json_schema_extra={"valid": "a Compute Engine machine type, e.g. "
                                                  "n2-standard-4 or n2-highcpu-16"})
    dataflow_flexrs: bool = Field(False, description=(
        "With engine beam on Vertex AI: Dataflow FlexRS (cost-optimized; the job may start "
        "up to 6 hours later, on preemptible and regular VMs)."))
    dataflow_network: str = Field("", pattern=r"^([a-z]([-a-z0-9]{0,61}[a-z0-9])?)?$",
                                  description=(
        "With engine beam on Vertex AI: the VPC network of the Dataflow workers, by name "
        "(empty: default)."), json_schema_extra={
        "valid": "a network name (lowercase letters, digits and hyphens, at most 63) or "
                 "empty"})
    dataflow_service_account: ServiceAccount = Field("", description=(
        "With engine beam on Vertex AI: the account the Dataflow workers run as (empty: "
        "vertex.service_account)."))
    dataflow_subnetwork: str = Field(
        "", pattern=r"^((https://www\.googleapis\.com/compute/v1/projects/[^/]+/)?regions/"
                    r"[a-z0-9-]+/subnetworks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?)?$",
        description=("With engine beam on Vertex AI: the workers' subnetwork, "
                     "regions/REGION/subnetworks/NAME or its full URL (a Shared VPC's)."),
        json_schema_extra={"valid": "regions/REGION/subnetworks/NAME, https://www.googleapis"
                                    ".com/compute/v1/projects/PROJECT/regions/REGION/"
                                    "subnetworks/NAME, or empty"})

    near_duplicate_difference: float = Field(6.0, ge=0, le=64, description=(
        "Two images are near duplicates when their 8x8 colour thumbnails differ by at most "
        "this much on average (0-255; resized and re-encoded copies differ by under 4, "
        "distinct images by 6 and more, docs/retraining.md); 0 counts only identical "
        "thumbnails."))
    drift: Literal["warn", "fail"] = Field("warn", description=(
        "What the data checks do when the data drifted from the champion's or test images "
        "duplicate training images: warn (a line each, the run goes on) or fail (the run "
        "stops before training)."))
    drift_share: float = Field(0.05, gt=0, le=1, description=(
        "Most a class's or an image format's share of the images may move from the "
        "champion's data (the L-infinity distance of the shares)."))
    drift_sizes: float = Field(0.1, gt=0, le=1, description=(
        "Most the image sizes' distribution (the longer side, by octave) may move from the "
        "champion's data (Jensen-Shannon divergence, base 2: 0 the same, 1 disjoint)."))

    def workers_account(self, pipeline_account: str) -> str:
        """The account the Dataflow workers run as: `dataflow_service_account`, else the
        pipeline's (`vertex.service_account`; empty: the project's default)."""
        return self.dataflow_service_account or pipeline_account

    def problems(self) -> list[str]:
        """Rules between fields (each field's own rules are checked by its declaration)."""
        problems = []
        if self.validation_fraction + self.test_fraction >= 1:
            problems.append(f"test_fraction is {self.test_fraction}; expected "
                            "validation_fraction + test_fraction < 1 (validation_fraction "
                            f"is {self.validation_fraction})")
        kind = kind_of(self.source)
        if self.engine == "beam" and kind.one_stream:
            problems.append(f"engine is 'beam', but the source {self.source} is a "
                            f"{kind.name} source, which is read in one stream; "
                            "expected engine 'local' for it (TFDS builds large datasets with "
                            "Beam itself)")
        return problems
