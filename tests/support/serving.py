"""Helpers of the tests that serve a model: a free loopback port, and the held-out images
a prediction client would send."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def held_out_images(dataset_dir, count=24):
    """(PNG bytes, label) of the held-out test split, as the dataset stage stored them."""
    import tensorflow as tf

    from trainer.common.contract import (
        FEATURE_IMAGE,
        FEATURE_LABEL,
        feature_spec,
        load_manifest,
        shard_paths,
    )

    records = tf.data.TFRecordDataset(shard_paths(dataset_dir, load_manifest(dataset_dir),
                                                  "test")).take(count)
    parsed = [tf.io.parse_single_example(r, feature_spec(tf)) for r in records]
    return [(p[FEATURE_IMAGE].numpy(), int(p[FEATURE_LABEL].numpy())) for p in parsed]
