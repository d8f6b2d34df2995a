"""Shared fixtures: a small prepared dataset and a model trained by 2 real workers."""

from __future__ import annotations

import os

import pytest

from components.dataset import BUILTIN_SHAPES, prepare_dataset

# TensorFlow's C++ start-up chatter makes failing tests hard to read.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """The builtin shapes, 80 images per class, in 4 shards per split."""
    out = tmp_path_factory.mktemp("data") / "dataset"
    prepare_dataset(BUILTIN_SHAPES, out, image_size=32, validation_fraction=0.25,
                    num_shards=4, builtin_images_per_class=80)
    return out
