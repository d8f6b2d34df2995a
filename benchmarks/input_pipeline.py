"""Input pipeline throughput: synthetic data vs our TFRecord pipeline vs the lab's pipeline.

In one run, on the same model (the trainer's default CNN) and the same source images
(a folder of generated shapes, larger than the model's input, as photos are):

  (a) synthetic in-memory batches: the upper bound the model allows;
  (b) the trainer's pipeline (trainer.data.make_dataset) over the shards the dataset stage
      prepared from the folder (resized once, at preparation);
  (c) the multi-worker lab's pipeline from the source documents over TFRecords of the
      original images, as TFDS stores them: decode, then per-element map (resize +
      cast), shuffle(1000), batch, prefetch, DATA auto-sharding.

Each is timed with model.fit over the same number of steps after a warm-up epoch
(tracing, and for (b) filling its cache), in several interleaved rounds after a warm-up
fit; medians are reported. Then the trainer runs as 1 worker and as 2 worker processes
on localhost over the same number of examples.

Usage: python benchmarks/input_pipeline.py [--images-per-class N] [--epochs N]
       [--output FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GOAL_B_OVER_A = 0.95
GOAL_B_OVER_C = 1.5


def write_original_records(tf, source: Path, out: Path, shards: int) -> list[str]:
    """TFRecords of the original encoded images with labels, as TFDS stores a dataset."""
    from components.dataset.sources import list_image_folder
    from trainer.contract import FEATURE_IMAGE, FEATURE_LABEL

    _, examples = list_image_folder(source)
    out.mkdir(parents=True)
    paths = [str(out / f"original-{i:05d}.tfrecord") for i in range(shards)]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    for i, (rel, label) in enumerate(examples):
        feature = {
            FEATURE_IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[(source / rel).read_bytes()])),
            FEATURE_LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        writers[i % shards].write(tf.train.Example(
            features=tf.train.Features(feature=feature)).SerializeToString())
    for w in writers:
        w.close()
    return paths


def lab_dataset(tf, files, image_size, batch_size):
    """The lab's create_dataset() over TFRecords of the original images."""
    from trainer.contract import FEATURE_IMAGE, FEATURE_LABEL

    features = {FEATURE_IMAGE: tf.io.FixedLenFeature([], tf.string),
                FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64)}

    def decode(record):  # what TFDS does for an image feature (in parallel, as TFDS does)
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_image(example[FEATURE_IMAGE], channels=3, expand_animations=False)
        return image, example[FEATURE_LABEL]

    def preprocess_data(image, label):  # the lab's function, at our image size
        image = tf.image.resize(image, (image_size, image_size))
        return tf.cast(image, tf.float32) / 255., label

    data = tf.data.TFRecordDataset(files).map(decode,
                                              num_parallel_calls=tf.data.experimental.AUTOTUNE)
    data = data.map(preprocess_data, num_parallel_calls=tf.data.experimental.AUTOTUNE)
    data = data.shuffle(1000).repeat()
    data = data.batch(batch_size)
    data = data.prefetch(tf.data.experimental.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = \
        tf.data.experimental.AutoShardPolicy.DATA
    return data.with_options(options)


def examples_per_second(tf, keras, dataset, image_size, classes, steps, epochs, batch):
    """Trains a fresh CNN; returns examples/s over the epochs after the first."""
    from trainer.model import build_model

    keras.utils.set_random_seed(0)
    model = build_model(keras, "cnn", image_size, classes, 0.003)
    times = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(dataset, epochs=epochs + 1, steps_per_epoch=steps, callbacks=[Timer()], verbose=0)
    return steps * batch * epochs / sum(times[1:])


def cluster_seconds(workers, data_dir, job_root, epochs, global_batch):
    """Wall time of the trainer as `workers` processes over the same examples."""
    from components.local_training import run_local_cluster

    job = Path(job_root) / f"{workers}-workers"
    started = time.perf_counter()
    run_local_cluster(workers, ["--job-dir", str(job), "--data-dir", str(data_dir),
                                "--epochs", str(epochs),
                                "--batch-size", str(global_batch // workers)],
                      out=io.StringIO())
    wall = time.perf_counter() - started
    report = json.loads((job / "training_report.json").read_text())
    return wall, report["train_seconds"], report["global_batch_size"] * report[
        "steps_per_epoch"] * epochs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images-per-class", type=int, default=750)
    parser.add_argument("--image-size", type=int, default=32, help="Model input size.")
    parser.add_argument("--source-size", type=int, default=128,
                        help="Size of the original images in the source folder.")
    parser.add_argument("--epochs", type=int, default=6, help="Timed epochs after warm-up.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    import tensorflow as tf
    import tf_keras as keras

    from components.dataset.prepare import prepare_dataset
    from components.dataset.shapes import generate_shapes
    from trainer.contract import shard_paths
    from trainer.data import make_dataset

    with tempfile.TemporaryDirectory(prefix="bench-input-") as work:
        source = generate_shapes(Path(work) / "source", args.images_per_class,
                                 image_size=args.source_size)
        data_dir = Path(work) / "dataset"
        manifest = prepare_dataset(str(source), data_dir, image_size=args.image_size,
                                   validation_fraction=0.01, num_shards=8)
        files = shard_paths(data_dir, manifest, "train")
        originals = write_original_records(tf, source, Path(work) / "originals", 8)
        count = manifest["splits"]["train"]["count"]
        size, classes, batch = args.image_size, len(manifest["classes"]), args.batch_size
        steps = count // batch
        print(f"data: {count} training images; originals {args.source_size}x"
              f"{args.source_size} PNG, model input {size}x{size}; batch {batch}, {steps} steps "
              f"per epoch, {args.epochs} timed epochs x {args.rounds} rounds", flush=True)

        images = tf.random.uniform([batch, size, size, 3])
        labels = tf.random.uniform([batch], maxval=classes, dtype=tf.int64)
        pipelines = {
            "a_synthetic": lambda: tf.data.Dataset.from_tensors((images, labels)).repeat(),
            "b_ours": lambda: make_dataset(tf, files, size, batch, training=True,
                                           num_workers=1),
            "c_lab": lambda: lab_dataset(tf, originals, size, batch),
        }
        # The first fit of a process runs slower (thread pools, allocator): warm up first.
        examples_per_second(tf, keras, pipelines["a_synthetic"](), size, classes, steps, 1,
                            batch)
        samples: dict[str, list[float]] = {name: [] for name in pipelines}
        for round_ in range(args.rounds):
            for name, make in pipelines.items():
                samples[name].append(examples_per_second(tf, keras, make(), size, classes,
                                                         steps, args.epochs, batch))
            print(f"round {round_ + 1}: " + ", ".join(
                f"{n} {v[-1]:.0f}" for n, v in samples.items()) + " examples/s", flush=True)
        rates = {name: statistics.median(values) for name, values in samples.items()}

        one = cluster_seconds(1, data_dir, work, args.epochs, batch)
        two = cluster_seconds(2, data_dir, work, args.epochs, batch)

    results = {
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python "
                   f"{platform.python_version()}, TensorFlow {tf.__version__}",
        "images": count, "image_size": size, "source_size": args.source_size,
        "batch_size": batch, "timed_epochs": args.epochs, "rounds": args.rounds,
        "examples_per_second": {k: round(v, 1) for k, v in rates.items()},
        "samples": {k: [round(x, 1) for x in v] for k, v in samples.items()},
        "b_over_a": round(rates["b_ours"] / rates["a_synthetic"], 3),
        "b_over_c": round(rates["b_ours"] / rates["c_lab"], 3),
        "workers": {
            "1": {"wall_seconds": round(one[0], 1), "train_seconds": one[1], "examples": one[2]},
            "2": {"wall_seconds": round(two[0], 1), "train_seconds": two[1], "examples": two[2]},
        },
    }
    print(f"b/a = {results['b_over_a']:.3f} (goal >= {GOAL_B_OVER_A}), "
          f"b/c = {results['b_over_c']:.3f} (goal >= {GOAL_B_OVER_C})")
    print(f"1 worker: {one[1]:.1f} s training ({one[0]:.1f} s wall) for {one[2]} examples; "
          f"2 workers: {two[1]:.1f} s training ({two[0]:.1f} s wall) for {two[2]} examples")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
