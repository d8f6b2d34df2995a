"""Input pipeline: the dataset stage's sharded TFRecords -> batched tf.data datasets."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from trainer.common.contract import FEATURE_IMAGE, FEATURE_LABEL, feature_spec

log = logging.getLogger("trainer")


def fits_in_cache(examples: int, image_size: int, budget_mb: float) -> bool:
    """Whether `examples` decoded uint8 images of the given size fit the cache budget."""
    return examples * image_size * image_size * 3 <= budget_mb * 2**20


#: Random crops cover this fraction of the image area, at aspect ratios in CROP_ASPECT
#: (Inception-style crops, with a floor that suits small datasets).
CROP_AREA = (0.35, 1.0)
CROP_ASPECT = (3 / 4, 4 / 3)


def crop_window(tf: Any, shape: Any, seed: int) -> Any:
    """A random crop window [y, x, height, width] of an image of `shape` (Inception-style)."""
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape, bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seed,
        min_object_covered=0.0, aspect_ratio_range=CROP_ASPECT, area_range=CROP_AREA,
        max_attempts=10, use_image_if_no_bounding_boxes=True)
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def resize_and_flip(tf: Any, image: Any, image_size: int, seed: int) -> Any:
    """A cropped uint8 image resized back to the model's size and flipped left-right half
    of the time, still uint8 (flipped as uint8, a quarter of the float bytes).

    Bilinear interpolation stays within the input's range, so adding 0.5 before the
    truncating cast rounds without clipping.
    """
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return tf.image.random_flip_left_right(tf.cast(image + 0.5, tf.uint8), seed)


def augment_decoded(tf: Any, image: Any, image_size: int, seed: int) -> Any:
    """A decoded uint8 image's random crop, resized back and maybe flipped."""
    window = crop_window(tf, tf.shape(image), seed)
    image = tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])
    return resize_and_flip(tf, image, image_size, seed)


def augment_jpeg(tf: Any, data: Any, image_size: int, seed: int) -> Any:
    """An encoded JPEG's random crop, decoding only the window, resized back and maybe
    flipped (the TF Model Garden's ImageNet input)."""
    window = crop_window(tf, tf.io.extract_jpeg_shape(data), seed)
    image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
    return resize_and_flip(tf, image, image_size, seed)


def untuned_device_datasets(tf: Any) -> None:
    """Turns tf.data autotuning off in the per-device datasets of distributed iterators.

    Under MultiWorkerMirroredStrategy Keras reads through a multi-device iterator whose
    per-device datasets take default options, so each runs tf.data's autotuning thread;
    destroying the iterator at the end of `fit` waits for that thread's next wake-up, up
    to ~10 s late when the wake-up is missed. In a local cluster on CPU the per-device
    datasets only pass batches through, so there is nothing for autotuning to tune.
    Applied once per process; the input pipeline itself is sized by `make_dataset`.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as ops

    create = ops._create_device_dataset
    if getattr(create, "untuned", False):
        return

    def untuned(*args, **kwargs):
        options = tf.data.Options()
        options.autotune.enabled = False
        return create(*args, **kwargs).with_options(options)

    untuned.untuned = True
    ops._create_device_dataset = untuned


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """How one split is read: everything `make_dataset` needs besides TensorFlow.

    Attributes:
        files: TFRecord shard paths.
        image_size: Height and width of the stored images.
        batch_size: Global batch size (per-replica batch x replicas in sync).
        training: Shuffle and repeat for training; single pass otherwise.
        training_machines: The chief and the workers (each reads its own files).
        seed: Shuffle seed.
        cache: Keep decoded images in memory (see `fits_in_cache`).
        shuffle_buffer: Examples in the shuffle buffer.
        image_format: How the shards store images (the manifest's `image_format`).
        augment: Random crops and flips (training only).
        threads: Cores this process owns (a local cluster): parallelism fixed to it and
            tf.data's autotuning off. Autotuning sizes for the whole machine, and its
            background thread delays the end of multi-worker `fit` by up to ~10 s (the
            distributed iterator's destructor waits for it to wake).
        exact: Read by ParameterServerStrategy's exact evaluation: whole and once, cut
            into its shards.
    """

    files: tuple[str, ...]
    image_size: int
    batch_size: int
    training: bool
    training_machines: int = 1
    seed: int = 0
    cache: bool = True
    shuffle_buffer: int = 4096
    image_format: str = "png"
    augment: bool = False
    threads: int | None = None
    exact: bool = False


def make_dataset(tf: Any, spec: InputSpec, shard: tuple[int, int] | None = None) -> Any:
    """Builds the dataset of (images, labels) batches.

    Files are read in parallel (interleave). With `cache` each record is parsed and decoded
    once and the decoded uint8 images are kept in memory, so later epochs skip the
    decoding; without, the encoded records are shuffled and decoded every epoch. Images
    stay uint8 to the end: the model converts them to float on the accelerator, so the
    host neither converts them nor copies four times the bytes to it; prefetch overlaps
    input with training. Sharded by file across workers when there are at least as many
    files as workers (each worker reads only its own files), by data otherwise.

    With `augment`, each training image is a random crop (a fraction CROP_AREA of it,
    resized back) flipped left-right at random. Without a cache, JPEG crops are decoded
    with `decode_and_crop_jpeg`, which decodes only the window (the TF Model Garden's
    ImageNet input); with a cache, the whole image is decoded once and cropped each epoch.
    benchmarks/input_pipeline.py measures each stage.

    Args:
        tf: The tensorflow module.
        spec: What to read and how.
        shard: (input pipelines, this one's index) to read a share of the data explicitly
            (ParameterServerStrategy's dataset functions); by file when there are enough
            files, by record otherwise.

    Returns:
        A tf.data.Dataset of (uint8 images [batch, size, size, 3], int64 labels).
    """
    threads, training, cache = spec.threads, spec.training, spec.cache
    parallel = threads or tf.data.AUTOTUNE
    augment = spec.augment and training
    crop_at_decode = augment and not cache and spec.image_format == "jpeg"
    parse = _parser(tf, spec, crop_at_decode)

    def crop(image, label):
        return augment_decoded(tf, image, spec.image_size, spec.seed), label

    files, by_record = _share(list(spec.files), shard)
    ds = _records(tf, files, parallel)
    if by_record is not None:
        ds = ds.shard(*by_record)
    if cache:  # decoded once, shuffled as images
        ds = ds.map(parse, num_parallel_calls=parallel, deterministic=False).cache()
    if training:
        ds = ds.shuffle(spec.shuffle_buffer, seed=spec.seed,
                        reshuffle_each_iteration=True).repeat()
    if not cache:  # shuffled as encoded records (smaller), decoded every epoch
        ds = ds.map(parse, num_parallel_calls=parallel, deterministic=False)
    if augment and not crop_at_decode:
        ds = ds.map(crop, num_parallel_calls=parallel, deterministic=False)
    # uint8 batches: the model converts them on the accelerator
    # (`trainer.models.factory.PIXEL_MAX`).
    ds = ds.batch(spec.batch_size, drop_remainder=training, num_parallel_calls=parallel)
    ds = ds.prefetch(2 if threads else tf.data.AUTOTUNE)
    return ds.with_options(_options(tf, threads, len(files), spec.training_machines,
                                    whole=not training, exact=spec.exact))


def _parser(tf: Any, spec: InputSpec, crop_at_decode: bool) -> Any:
    """A record -> (uint8 image, label) function: decoded whole, or (`crop_at_decode`) only
    a random crop's window of the JPEG."""
    features = feature_spec(tf)
    decode = tf.io.decode_jpeg if spec.image_format == "jpeg" else tf.io.decode_png

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        data, label = example[FEATURE_IMAGE], example[FEATURE_LABEL]
        if crop_at_decode:
            return augment_jpeg(tf, data, spec.image_size, spec.seed), label
        image = tf.ensure_shape(decode(data, channels=3),
                                [spec.image_size, spec.image_size, 3])
        return image, label
    return parse


def _records(tf: Any, files: list[str], parallel: Any) -> Any:
    """The files' records, read up to 8 files at a time."""
    ds = tf.data.Dataset.from_tensor_slices(files)
    cycle = min(len(files), 8)
    # A fixed parallelism may not exceed the cycle (tf.data refuses it: one file on a
    # process pinned to two cores).
    return ds.interleave(tf.data.TFRecordDataset, cycle_length=cycle,
                         num_parallel_calls=parallel if parallel == tf.data.AUTOTUNE
                         else min(parallel, cycle), deterministic=False)


def _share(files: list[str], shard: tuple[int, int] | None) -> tuple[list[str], Any]:
    """(the files this input pipeline reads, (count, index) to shard by record or None):
    by file when there are enough files, by record otherwise."""
    if shard is None or shard[0] <= 1:
        return files, None
    count, index = shard
    return (files[index::count], None) if len(files) >= count else (files, shard)


def _options(tf: Any, threads: int | None, files: int, training_machines: int,
             whole: bool = False, exact: bool = False) -> Any:
    """The dataset's options: fixed parallelism on a local cluster's cores, and how
    MultiWorkerMirroredStrategy shards it across workers (by file when every worker gets
    a file; not at all for a `whole` split, the validation split: every worker reads all
    of it, so each runs as many steps, the last batch partial, and every image counts in
    the epoch's validation metrics, each as many times as there are workers). An `exact`
    split (ParameterServerStrategy's exact evaluation) is shardable by element: with OFF,
    each of its shards read the whole split (every image counted 4 times on 2 workers and 2
    shards, tests/components/training/test_local_cluster.py); with DATA, once."""
    options = tf.data.Options()
    if threads:
        options.autotune.enabled = False
        options.threading.private_threadpool_size = threads
    policy = tf.data.experimental.AutoShardPolicy
    if exact:
        options.experimental_distribute.auto_shard_policy = policy.DATA
    elif whole:
        options.experimental_distribute.auto_shard_policy = policy.OFF
    elif training_machines > 1 and files < training_machines:
        log.warning("%d files for %d workers: sharding by data (every worker reads every "
                    "file); prepare at least %d shards for file sharding",
                    files, training_machines, training_machines)
        options.experimental_distribute.auto_shard_policy = policy.DATA
    else:
        options.experimental_distribute.auto_shard_policy = policy.FILE
    return options


def build_inputs(tf: Any, keras: Any, spec: InputSpec, strategy: str) -> Any:
    """The input of `fit` for a split read as `spec` under `strategy`: a dataset, or
    under ParameterServerStrategy a dataset function that every worker runs on its own
    share of the files (training); its validation split is a dataset of the whole split,
    which its exact evaluation cuts into shards by file (`ReplicaSetup.evaluation_shards`)."""
    if strategy != "parameter_server":
        return make_dataset(tf, spec)
    if not spec.training:
        return make_dataset(tf, dataclasses.replace(spec, training_machines=1, exact=True))

    def dataset_fn(context: Any) -> Any:
        return make_dataset(tf, dataclasses.replace(spec, training_machines=1),
                            shard=(context.num_input_pipelines, context.input_pipeline_id))

    return keras.utils.experimental.DatasetCreator(dataset_fn)
