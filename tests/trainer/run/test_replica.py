"""Trainer building blocks in one process: precision, reports, paths, atomic dirs (the
models themselves: tests/trainer/models/test_models.py)."""

from __future__ import annotations

import errno
import json
import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from trainer.common.committed_dirs import (  # noqa: E402
    MARKER,
    NotCommittedError,
    commit_directory,
    committed,
    require_committed,
)
from trainer.models.factory import build_model  # noqa: E402
from trainer.run import history as report  # noqa: E402
from trainer.run import paths  # noqa: E402
from trainer.run.data import fits_in_cache  # noqa: E402


@pytest.fixture
def float32_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_small_cnn_is_the_default_and_outputs_probabilities():
    model = build_model(keras, "cnn", 32, 4, 0.01)
    probs = model(tf.zeros([2, 32, 32, 3]))
    assert probs.shape == (2, 4)
    assert abs(float(tf.reduce_sum(probs[0])) - 1.0) < 1e-5


def test_mixed_precision_keeps_the_output_in_float32(float32_policy):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = build_model(keras, "cnn", 32, 4, 0.01)
    assert model.layers[1].compute_dtype == "float16"
    assert model.get_layer("probabilities").compute_dtype == "float32"
    assert model(tf.zeros([1, 32, 32, 3])).dtype == tf.float32
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)


def test_the_model_takes_uint8_pixels_and_converts_them_itself(float32_policy):
    import numpy as np

    model = build_model(keras, "cnn", 32, 4, 0.01)
    pixels = tf.random.uniform([2, 32, 32, 3], 0, 256, tf.int32, seed=1)
    as_uint8 = model(tf.cast(pixels, tf.uint8)).numpy()
    np.testing.assert_allclose(as_uint8, model(tf.cast(pixels, tf.float32)).numpy(), atol=1e-6)
    scaled = model.get_layer("scale")(tf.cast(pixels, tf.float32)).numpy()
    assert 0.0 <= scaled.min() and scaled.max() <= 1.0


@pytest.mark.slow
def test_local_step_logs_keep_the_keys_keras_overrides_at_epoch_end(float32_policy):
    """Per-step logs without collectives keep the metric keys, so Keras replaces the last
    step's logs with the model's metrics at the end of the epoch (here one process: the
    same values)."""
    from trainer.run.step_logs import keep_step_logs_local

    model = build_model(keras, "cnn", 32, 4, 0.01)
    keep_step_logs_local(tf, model)
    assert model.distribute_reduction_method == "first"
    images = tf.random.uniform([16, 32, 32, 3], 0, 256, tf.int32, seed=2)
    labels = tf.random.uniform([16], 0, 4, tf.int64, seed=3)
    steps = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps.append(dict(logs))

    history = model.fit(images, labels, batch_size=4, epochs=1, verbose=0,
                        validation_data=(images, labels), callbacks=[Steps()])
    assert set(steps[-1]) == set(model.get_metrics_result()) == {"loss", "accuracy",
                                                                 "examples"}
    assert set(history.history) == {"loss", "accuracy", "examples", "val_loss",
                                    "val_accuracy", "val_examples"}
    assert history.history["val_examples"] == [16.0]  # every image counted
    assert history.history["loss"][0] == pytest.approx(float(steps[-1]["loss"]), rel=1e-5)


def test_history_survives_restarts_and_is_reported(tmp_path):
    job = str(tmp_path)
    for epoch in range(3):
        report.record_epoch(job, epoch, {"loss": 1.0 / (epoch + 1), "accuracy": 0.3 * epoch})
    # A restart redoes epoch 2 (it was partial): the new logs replace the old ones.
    history = report.record_epoch(job, 2, {"loss": 0.2, "accuracy": 0.9})
    assert [h["epoch"] for h in history] == [0, 1, 2] and history[-1]["loss"] == 0.2
    assert report.final_metrics(history) == {"loss": 0.2, "accuracy": 0.9,
                                             "epochs_completed": 3.0}
    report.write_reports(job, {"task": "chief:0"})
    assert json.loads((tmp_path / "metrics.json").read_text())["epochs_completed"] == 3.0
    written = json.loads((tmp_path / "training_report.json").read_text())
    assert written == {"task": "chief:0", "history": history}


def test_cache_decision():
    assert fits_in_cache(1000, 32, budget_mb=3)        # 3.1 MB of pixels
    assert not fits_in_cache(1000, 224, budget_mb=100)  # 150 MB of pixels


def test_vertex_output_variables():
    env = {"AIP_CHECKPOINT_DIR": "gs://b/j/checkpoints", "AIP_TENSORBOARD_LOG_DIR": "gs://b/tb"}
    assert paths.checkpoint_dir("/job", env) == "/gcs/b/j/checkpoints"
    assert paths.tensorboard_dir("/job", env) == "/gcs/b/tb"
    assert paths.checkpoint_dir("/job", {}) == "/job/checkpoints"
    assert paths.tensorboard_dir("/job", {}, "/x") == "/x"


def test_commit_publishes_a_complete_directory_or_none(tmp_path):
    dest = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with commit_directory(dest) as staging:
            open(os.path.join(staging, "half"), "w").close()
            raise RuntimeError("crash")
    assert committed(dest) is None and os.listdir(dest) == []
    (dest / "v-19990101T000000-deadbeef").mkdir()  # left by a process that was killed
    with commit_directory(dest, written_by="test") as staging:
        open(os.path.join(staging, "whole"), "w").close()
    assert committed(dest) == staging and os.listdir(staging) == ["whole"]
    assert sorted(os.listdir(dest)) == sorted([MARKER, os.path.basename(staging)])
    assert json.loads((dest / MARKER).read_text())["written_by"] == "test"
    # A second commit replaces the first; readers never see a partial one.
    with commit_directory(dest) as second:
        assert committed(dest) == staging
    assert committed(dest) == second and not os.path.exists(staging)
    with pytest.raises(NotCommittedError, match="holds no complete output"):
        require_committed(tmp_path / "elsewhere")


def test_commit_never_renames_a_directory(tmp_path, monkeypatch):
    # Cloud Storage FUSE refuses directory renames (rename-dir-limit 0 on flat buckets).
    real_rename, real_replace = os.rename, os.replace

    def refuse_directories(rename):
        def wrapped(src, dst, *args, **kwargs):
            if os.path.isdir(src):
                raise OSError(errno.ENOTSUP, "directory rename refused", str(src))
            return rename(src, dst, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(os, "rename", refuse_directories(real_rename))
    monkeypatch.setattr(os, "replace", refuse_directories(real_replace))
    with commit_directory(tmp_path / "model") as staging:
        os.makedirs(os.path.join(staging, "variables"))
    assert os.path.isdir(os.path.join(committed(tmp_path / "model"), "variables"))


@pytest.mark.slow
def test_file_sharding_needs_a_file_per_worker(small_dataset, caplog):
    from trainer.common.contract import load_manifest, shard_paths
    from trainer.run.data import InputSpec, make_dataset

    files = tuple(shard_paths(small_dataset, load_manifest(small_dataset), "train"))
    policy = tf.data.experimental.AutoShardPolicy
    by_file = make_dataset(tf, InputSpec(files, 32, 8, training=True, training_machines=4))
    assert by_file.options().experimental_distribute.auto_shard_policy == policy.FILE
    with caplog.at_level("WARNING", logger="trainer"):
        by_data = make_dataset(tf, InputSpec(files[:1], 32, 8, training=True, training_machines=2))
    assert by_data.options().experimental_distribute.auto_shard_policy == policy.DATA
    # The validation split is read whole by every worker: not sharded.
    whole = make_dataset(tf, InputSpec(files, 32, 8, training=False, training_machines=4))
    assert whole.options().experimental_distribute.auto_shard_policy == policy.OFF
    # ParameterServerStrategy's exact evaluation cuts it by element into its shards.
    exact = make_dataset(tf, InputSpec(files, 32, 8, training=False, exact=True))
    assert exact.options().experimental_distribute.auto_shard_policy == policy.DATA
    assert "1 files for 2 workers: sharding by data" in caplog.text
    images, labels = next(iter(by_file))
    # uint8 pixels: the model converts them (on the accelerator), not the input pipeline.
    assert images.dtype == tf.uint8 and int(tf.reduce_max(images)) > 1
    assert images.shape[1:] == (32, 32, 3) and labels.dtype == tf.int64


def test_augmented_jpeg_pipeline_crops_flips_and_keeps_shape(tmp_path):
    """Training input from JPEG shards: random crops (decoded by window) resized back, and
    flips; values stay images; validation input is not augmented."""
    import numpy as np
    from PIL import Image

    from components.dataset.prepare import prepare_source
    from trainer.common.contract import load_manifest, shard_paths
    from trainer.run.data import InputSpec, make_dataset

    src = tmp_path / "src"
    for label in ("a", "b"):
        (src / label).mkdir(parents=True)
        for i in range(6):  # a left-to-right ramp: flips and crops change it visibly
            ramp = np.tile(np.linspace(0, 255, 80, dtype=np.uint8)[None, :, None], (80, 1, 3))
            Image.fromarray(ramp).save(src / label / f"{i}.png")
    data = tmp_path / "data"
    prepare_source(str(src), data, image_size=64, validation_fraction=0.2, test_fraction=0.0,
                   image_format="jpeg")
    files = tuple(shard_paths(data, load_manifest(data), "train"))
    plain = make_dataset(tf, InputSpec(files, 64, 8, training=False, cache=False,
                                       image_format="jpeg"))
    reference = next(iter(plain))[0].numpy()
    for cache in (False, True):  # crop at decode, and crop of cached decoded images
        ds = make_dataset(tf, InputSpec(files, 64, 8, training=True, cache=cache,
                                        image_format="jpeg", augment=True, threads=1))
        batches = [b[0].numpy() for b in ds.take(4)]
        assert all(b.dtype == np.uint8 for b in batches)
        images = np.concatenate(batches).astype(np.float32)
        assert images.shape[1:] == (64, 64, 3) and images.max() > 200
        slopes = np.sign(images[:, 32, -1, 0] - images[:, 32, 0, 0])
        assert (slopes > 0).any() and (slopes < 0).any()  # some flipped, some not
        # crops stretch a part of the ramp over the whole width: its steps get smaller
        assert np.abs(np.diff(images[:, 32, :, 0], axis=1)).mean() < \
            np.abs(np.diff(reference[:, 32, :, 0], axis=1)).mean() * 0.95
    options = ds.options()
    assert options.autotune.enabled is False and options.threading.private_threadpool_size == 1


def test_local_cores_are_read_and_refused_when_malformed():
    from trainer.cluster.local import local_cores, pin_local_cores
    from trainer.cluster.roles import ClusterConfigError

    assert local_cores({}) == [] and local_cores({"TRAINER_LOCAL_CORES": " "}) == []
    assert local_cores({"TRAINER_LOCAL_CORES": "1,0,1"}) == [0, 1]
    for bad in ("x", "-1", "0,,1"):
        with pytest.raises(ClusterConfigError, match="TRAINER_LOCAL_CORES is"):
            local_cores({"TRAINER_LOCAL_CORES": bad})
    with pytest.raises(ClusterConfigError, match="this machine has cores"):
        pin_local_cores({"TRAINER_LOCAL_CORES": "4096"})
    assert os.sched_getaffinity(0)  # unchanged by the refused pin


def test_untuned_device_datasets_turns_autotuning_off_once():
    from tensorflow.python.data.ops import multi_device_iterator_ops as ops

    from trainer.run.data import untuned_device_datasets

    original = ops._create_device_dataset
    try:
        untuned_device_datasets(tf)
        patched = ops._create_device_dataset
        untuned_device_datasets(tf)
        assert ops._create_device_dataset is patched  # not wrapped twice
        iterator = ops.MultiDeviceIterator(tf.data.Dataset.range(4), ["/cpu:0"])
        assert int(iterator.get_next()[0]) == 0
        device_ds = patched(iterator._prototype_device_datasets[0], 0, 1, False)
        assert device_ds.options().autotune.enabled is False
    finally:
        ops._create_device_dataset = original
