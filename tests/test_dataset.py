"""Dataset stage: generated source, TFRecord shards, manifest, splits and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from components.dataset import (BUILTIN_SHAPES, DatasetError, generate_shapes, load_manifest,
                                prepare_dataset, shard_paths, split_of)


def test_generated_shapes_are_deterministic(tmp_path):
    a = generate_shapes(tmp_path / "a", images_per_class=3, image_size=16, seed=1)
    b = generate_shapes(tmp_path / "b", images_per_class=3, image_size=16, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*.png"))
    assert len(files) == 12 and sorted(p.relative_to(b) for p in b.rglob("*.png")) == files
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_manifest_and_shards(small_dataset):
    manifest = load_manifest(small_dataset)
    assert manifest["classes"] == ["circle", "cross", "square", "triangle"]
    assert manifest["image_size"] == [32, 32, 3]
    train, val = manifest["splits"]["train"], manifest["splits"]["validation"]
    assert train["count"] + val["count"] == 320
    assert 0.15 < val["count"] / 320 < 0.35
    for split in (train, val):
        assert len(split["shards"]) == 4
        assert sum(s["count"] for s in split["shards"]) == split["count"]
        assert sum(split["per_class"].values()) == split["count"]
        for shard in split["shards"]:
            data = (small_dataset / shard["file"]).read_bytes()
            assert len(data) == shard["bytes"]
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert sorted(os.listdir(small_dataset)) == sorted(
        ["manifest.json"] + [s["file"] for s in train["shards"] + val["shards"]])


def test_records_decode_to_labelled_images(small_dataset):
    import tensorflow as tf

    manifest = load_manifest(small_dataset)
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
                "image/id": tf.io.FixedLenFeature([], tf.string)}
    ids = []
    for record in tf.data.TFRecordDataset(shard_paths(small_dataset, manifest, "validation")):
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_png(example["image/encoded"], channels=3)
        assert image.shape == (32, 32, 3)
        label = int(example["image/class/label"])
        identity = example["image/id"].numpy().decode()
        assert identity.startswith(manifest["classes"][label] + "/")
        assert split_of(identity, 0.25) == "validation"
        ids.append(identity)
    assert len(ids) == len(set(ids)) == manifest["splits"]["validation"]["count"]


def test_split_is_stable_when_images_are_added():
    ids = [f"cls/{i}.png" for i in range(2000)]
    before = {i: split_of(i, 0.2) for i in ids}
    more = ids + [f"cls/new{i}.png" for i in range(500)]
    assert all(split_of(i, 0.2) == before[i] for i in ids)
    share = sum(split_of(i, 0.2) == "validation" for i in more) / len(more)
    assert 0.17 < share < 0.23


def _folder(root, classes):
    generate_shapes(root, images_per_class=6, image_size=16, seed=3)
    for extra in set(os.listdir(root)) - set(classes):
        shutil.rmtree(root / extra)
    return root


def test_folder_source(tmp_path):
    src = _folder(tmp_path / "src", ["circle", "square"])
    manifest = prepare_dataset(str(src), tmp_path / "out", image_size=16, num_shards=2,
                               validation_fraction=0.3)
    assert manifest["classes"] == ["circle", "square"]
    assert manifest["splits"]["train"]["count"] + manifest["splits"]["validation"]["count"] == 12
    assert manifest["source_fingerprint"] != BUILTIN_SHAPES


@pytest.mark.parametrize("setup,message", [
    (lambda root: None, "is not a directory"),
    (lambda root: _folder(root, ["circle"]), "has 1 class folder(s) (circle)"),
    (lambda root: (_folder(root, ["circle", "square"]), (root / "empty").mkdir()),
     "holds no image"),
])
def test_bad_sources(tmp_path, setup, message):
    setup(tmp_path / "src")
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prepare_dataset(str(tmp_path / "src"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_parameters_and_nonempty_output(tmp_path):
    with pytest.raises(DatasetError, match="validation_fraction is 1.0"):
        prepare_dataset(BUILTIN_SHAPES, tmp_path / "a", validation_fraction=1.0)
    with pytest.raises(DatasetError, match="num_shards is 0"):
        prepare_dataset(BUILTIN_SHAPES, tmp_path / "a", num_shards=0)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(DatasetError, match="is not empty"):
        prepare_dataset(BUILTIN_SHAPES, tmp_path / "full")
    assert os.listdir(tmp_path / "full") == ["keep.txt"]


def test_failure_midway_leaves_nothing_behind(tmp_path):
    src = _folder(tmp_path / "src", ["circle", "square"])
    (src / "square" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(Exception):
        prepare_dataset(str(src), tmp_path / "out", image_size=16)
    assert not (tmp_path / "out").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".dataset-")] == []
