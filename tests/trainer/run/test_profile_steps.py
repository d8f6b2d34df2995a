"""`training.profile_steps`: a real TensorBoard profiler trace of K steps of a real fit,
written where TensorBoard's profile plugin reads it, on the chief and the first worker
only."""

from __future__ import annotations

import logging
import types

import numpy as np

from trainer.cluster.tf_config import ClusterInfo
from trainer.run.profile_steps import ProfileSteps, for_replica


def test_the_asked_for_steps_are_traced_where_tensorboard_reads_profiles(tmp_path, caplog):
    import tensorflow as tf
    import tf_keras as keras

    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices((
        rng.random((8 * 20, 8, 8, 3), dtype=np.float32),
        rng.integers(0, 2, 8 * 20))).batch(8).repeat()
    model = keras.Sequential([keras.layers.Conv2D(4, 3, input_shape=(8, 8, 3)),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    profiler = ProfileSteps(tf, str(tmp_path / "tensorboard"), steps=3, steps_per_epoch=10)
    with caplog.at_level(logging.INFO, logger="trainer.run.profile_steps"):
        model.fit(data, epochs=2, steps_per_epoch=10, verbose=0, callbacks=[profiler])
    traces = list((tmp_path / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0  # one trace: epoch 1 only
    assert "profile: steps 6-8 traced into" in caplog.text


def test_more_steps_than_an_epoch_holds_trace_the_whole_epoch():
    profiler = ProfileSteps(None, "", steps=50, steps_per_epoch=12)
    assert (profiler.start_at, profiler.stop_at) == (0, 12)


def _plan(task_type, index, cluster, steps=4):
    info = ClusterInfo(task_type, index, cluster)
    return types.SimpleNamespace(
        info=info, options=types.SimpleNamespace(profile_steps=steps), steps_per_epoch=100,
        where=types.SimpleNamespace(tensorboard_dir="/job/tensorboard"))


def test_the_chief_and_the_first_worker_trace_and_no_one_else():
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"], "evaluator": ["d:1"]}
    (chief,) = for_replica(None, _plan("chief", 0, cluster))
    (worker,) = for_replica(None, _plan("worker", 0, cluster))
    assert (chief.logdir, worker.logdir) == ("/job/tensorboard", "/job/tensorboard/worker-0")
    assert for_replica(None, _plan("worker", 1, cluster)) == []
    assert for_replica(None, _plan("chief", 0, cluster, steps=0)) == []
    # Without a chief in the cluster, worker 0 is the chief and worker 1 the first worker.
    no_chief = {"worker": ["b:1", "c:1", "e:1"]}
    assert for_replica(None, _plan("worker", 0, no_chief))[0].logdir == "/job/tensorboard"
    assert for_replica(None, _plan("worker", 1, no_chief))[0].logdir == \
        "/job/tensorboard/worker-1"
    assert for_replica(None, _plan("worker", 2, no_chief)) == []
