"""Input pipeline: the dataset stage's sharded TFRecords -> batched tf.data datasets."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from trainer.contract import FEATURE_IMAGE, FEATURE_LABEL, feature_spec
from trainer.model import preprocess

log = logging.getLogger("trainer")

def fits_in_cache(examples: int, image_size: int, budget_mb: float) -> bool:
    """Whether `examples` decoded uint8 images of the given size fit the cache budget."""
    return examples * image_size * image_size * 3 <= budget_mb * 2**20


def make_dataset(tf: Any, files: Sequence[str], image_size: int, batch_size: int, *,
                 training: bool, num_workers: int, seed: int = 0, cache: bool = True,
                 shuffle_buffer: int = 4096, shard: tuple[int, int] | None = None) -> Any:
    """Builds the dataset of (images, labels) batches.

    Files are read in parallel (interleave); each record is parsed and decoded once, and
    the decoded uint8 images are cached when `cache` is set, so later epochs skip the
    decoding; batching comes before the float conversion, which then runs vectorised on
    whole batches; prefetch overlaps input with training. Sharded by file across workers
    when there are at least as many files as workers (each worker reads only its own
    files), by data otherwise.

    Args:
        tf: The tensorflow module.
        files: TFRecord shard paths.
        image_size: Height and width of the stored images.
        batch_size: Global batch size (per-replica batch x replicas in sync).
        training: Shuffle and repeat for training; single pass otherwise.
        num_workers: Machines in the cluster.
        seed: Shuffle seed.
        cache: Keep decoded images in memory (see `fits_in_cache`).
        shuffle_buffer: Examples in the shuffle buffer.
        shard: (input pipelines, this one's index) to read a share of the data explicitly
            (ParameterServerStrategy's dataset functions); by file when there are enough
            files, by record otherwise.

    Returns:
        A tf.data.Dataset.
    """
    autotune = tf.data.AUTOTUNE
    features = feature_spec(tf)

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_png(example[FEATURE_IMAGE], channels=3)
        image = tf.ensure_shape(image, [image_size, image_size, 3])
        return image, example[FEATURE_LABEL]

    files = list(files)
    by_record = None
    if shard is not None and shard[0] > 1:
        count, index = shard
        if len(files) >= count:
            files = files[index::count]
        else:
            by_record = shard
    ds = tf.data.Dataset.from_tensor_slices(files)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8),
                       num_parallel_calls=autotune, deterministic=False)
    if by_record is not None:
        ds = ds.shard(*by_record)
    ds = ds.map(parse, num_parallel_calls=autotune, deterministic=False)
    if cache:
        ds = ds.cache()
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=training, num_parallel_calls=autotune)
    ds = ds.map(lambda x, y: (preprocess(tf, x), y), num_parallel_calls=autotune)
    ds = ds.prefetch(autotune)

    options = tf.data.Options()
    policy = tf.data.experimental.AutoShardPolicy
    if num_workers > 1 and len(files) < num_workers:
        log.warning("%d files for %d workers: sharding by data (every worker reads every "
                    "file); prepare at least %d shards for file sharding",
                    len(files), num_workers, num_workers)
        options.experimental_distribute.auto_shard_policy = policy.DATA
    else:
        options.experimental_distribute.auto_shard_policy = policy.FILE
    return ds.with_options(options)
