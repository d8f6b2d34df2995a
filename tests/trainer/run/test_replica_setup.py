"""The trainer's replica setup: decided once from the options, the cluster and the manifest,
without TensorFlow."""

from __future__ import annotations

import json

import pytest

from trainer.cluster.accelerators import ACCELERATORS
from trainer.cluster.tf_config import cluster_from_env
from trainer.cluster.training_plan import plan_training
from trainer.run.replica_setup import locations, set_up
from trainer.run.training_options import TrainingOptions


@pytest.fixture
def dataset(tmp_path):
    manifest = {"classes": ["a", "b", "c"], "image_size": [224, 224], "image_format": "jpeg",
                "splits": {"train": {"count": 1000, "shards": [
                               {"file": "train-00000-of-00002.tfrecord"},
                               {"file": "train-00001-of-00002.tfrecord"}]},
                           "validation": {"count": 300, "shards": [
                               {"file": "validation-00000-of-00001.tfrecord"}]},
                           "test": {"count": 100, "shards": []}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def _plan(dataset, environ=None, gpus=0, replicas=2, **options):
    environ = environ or {}
    info = cluster_from_env({"TF_CONFIG": json.dumps({
        "cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker",
                                                                    "index": 0}})})
    where = locations("gs://b/job", str(dataset), environ)
    opts = TrainingOptions(**options)
    training = plan_training(info.layout, mixed_precision=opts.mixed_precision, xla=opts.xla,
                             gpu=ACCELERATORS["NVIDIA_TESLA_T4"] if gpus else None, gpus=gpus)
    return set_up(opts, info, training, where, environ, gpus=gpus, replicas=replicas)


def test_batches_and_steps_follow_the_replicas_in_sync(dataset):
    plan = _plan(dataset, batch_size=32, replicas=2)
    assert plan.global_batch == 64
    # Validation reads the whole split, its last batch partial: 300 images are 5 global
    # batches of 64 (the last one of 44), and each of the 2 training machines steps
    # through every replica's piece of them.
    assert plan.info.training_machines == 2
    assert plan.steps_per_epoch == 1000 // 64 and plan.validation_steps == 5 * 2
    assert plan.validation_copies == 2 and plan.evaluation_shards == 0
    assert plan.image_size == 224 and plan.classes == ["a", "b", "c"]
    assert plan.where.job_dir.endswith("/b/job") and plan.where.model_dir.endswith("/job/model")
    assert "global batch 64 (32 per replica x 2), 15 steps per epoch" in plan.describe()
    assert plan.lines() == [f"model: {plan.options.model}", f"data: {plan.describe()}"]


def test_under_parameter_servers_exact_evaluation_counts_each_image_once(dataset):
    info = cluster_from_env({"TF_CONFIG": json.dumps({
        "cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]},
        "task": {"type": "chief", "index": 0}})})
    where = locations("gs://b/job", str(dataset), {})
    training = plan_training(info.layout, mixed_precision="auto", xla="auto", gpu=None, gpus=0)
    plan = set_up(TrainingOptions(), info, training, where, {}, gpus=0, replicas=2)
    assert plan.strategy == "parameter_server"
    # One shard per validation file; the shards run to their end, each image counted once.
    assert plan.evaluation_shards == 1 and plan.validation_steps is None
    assert plan.validation_copies == 1


@pytest.mark.parametrize(("batch_size", "shards"), [(4, 4), (8, 3), (16, 2), (32, 1)])
def test_exact_evaluation_never_has_more_shards_than_the_split_has_batches(
        tmp_path, batch_size, shards):
    # 38 validation images in 4 files (the documents' parameter-server layout on 50 images
    # a class): TensorFlow refuses a shard without a batch, so the shards are the files or
    # the global batches (2 replicas), whichever are fewer: 38 / 8 -> 5 batches, 38 / 16 ->
    # 3, 38 / 32 -> 2, 38 / 64 -> 1.
    manifest = {"classes": ["a", "b"], "image_size": [32, 32], "image_format": "png",
                "splits": {"train": {"count": 140, "shards": []},
                           "validation": {"count": 38, "shards": [
                               {"file": f"validation-0000{i}-of-00004.tfrecord"}
                               for i in range(4)]}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    info = cluster_from_env({"TF_CONFIG": json.dumps({
        "cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]},
        "task": {"type": "chief", "index": 0}})})
    training = plan_training(info.layout, mixed_precision="auto", xla="auto", gpu=None, gpus=0)
    plan = set_up(TrainingOptions(batch_size=batch_size), info, training,
                  locations("gs://b/job", str(tmp_path), {}), {}, gpus=0, replicas=2)
    assert plan.global_batch == 2 * batch_size
    assert plan.evaluation_shards == shards


def test_a_training_split_of_a_few_global_batches_is_warned_about(dataset):
    plan = _plan(dataset, batch_size=256, replicas=2)  # 1000 // 512: 1 step per epoch
    assert plan.steps_per_epoch == 1
    assert plan.lines()[2] == (
        "data: warning: 1 step(s) per epoch (1000 training examples, global batch 512): too "
        "few updates to learn much or to time the steps; a training.batch_size of 62 gives 8 "
        "or more, or add images")
    assert _plan(dataset, batch_size=62, replicas=2).steps_per_epoch >= 8
    # Said once by a cluster: by the chief, not by every replica.
    assert len(plan.lines(advice=False)) == 2


def test_gpu_speed_comes_from_the_training_plan_and_data_handling_is_decided_once(dataset):
    on_cpu = _plan(dataset)
    assert (on_cpu.strategy, on_cpu.mixed_precision, on_cpu.xla) == \
        ("multi_worker_mirrored", "off", False)
    on_gpu = _plan(dataset, gpus=1)  # T4s: tensor cores, no bfloat16, XLA not measured
    assert (on_gpu.mixed_precision, on_gpu.xla) == ("float16", False)
    assert _plan(dataset, gpus=1, xla="on").xla
    assert on_cpu.augment  # JPEG: photos
    assert not _plan(dataset, augment="off").augment
    # 1300 decoded 224x224 images are 196 MB: cached under the default budget, not under 100.
    assert on_cpu.cache and not _plan(dataset, cache_budget_mb=100.0).cache


def test_each_split_is_read_as_the_plan_says(dataset):
    plan = _plan(dataset, environ={"TRAINER_LOCAL_CORES": "0"}, seed=7)
    train, validation = plan.input_spec("train"), plan.input_spec("validation")
    assert len(train.files) == 2 and len(validation.files) == 1
    assert train.augment and not validation.augment
    assert (train.seed, validation.seed) == (7, 8)
    assert train.batch_size == plan.global_batch and train.training_machines == 2
    assert train.threads == 1 and train.image_format == "jpeg"


def test_phases_follow_one_timeline_and_the_linear_scaling_rule(dataset):
    plan = _plan(dataset, model="mobilenet_v3_small", batch_size=32, replicas=4, epochs=3,
                 fine_tune_epochs=2, learning_rate=0.001, fine_tune_learning_rate=1e-5,
                 scale_learning_rate=True, warmup_epochs=1, cosine_decay=True)
    steps = 1000 // 128
    train, tune = plan.phases
    assert (train.first_epoch, train.end_epoch, tune.first_epoch, tune.end_epoch) == (0, 3, 3, 5)
    assert train.learning_rate == pytest.approx(0.004)  # x 4 replicas in sync
    assert tune.learning_rate == pytest.approx(4e-5)
    assert (train.start_step, train.steps, train.warmup_steps) == (0, 3 * steps, steps)
    assert (tune.start_step, tune.steps, tune.warmup_steps) == (3 * steps, 2 * steps, 0)
    assert train.keep_backup and not tune.keep_backup and train.backup != tune.backup
    assert plan.freeze_base  # phase 1 trains the head only before fine-tuning
    unscaled = _plan(dataset, replicas=4, learning_rate=0.001)
    assert [p.learning_rate for p in unscaled.phases] == [0.001]
    assert not unscaled.phases[0].keep_backup


def test_the_schedule_warms_up_then_decays_along_a_cosine_from_its_phase_start():
    tf = pytest.importorskip("tensorflow")
    from trainer.models.learning_rate import PhaseSchedule

    schedule = PhaseSchedule(0.1, start_step=100, steps=50, warmup_steps=10, cosine=True)
    at = {step: float(schedule(tf.constant(step))) for step in (100, 104, 109, 110, 130, 150)}
    assert at[100] == pytest.approx(0.01) and at[104] == pytest.approx(0.05)
    assert at[109] == pytest.approx(0.1) and at[110] == pytest.approx(0.1)
    assert at[130] == pytest.approx(0.05, rel=1e-5)  # half way down the cosine
    assert at[150] == pytest.approx(0.0, abs=1e-7)
    flat = PhaseSchedule(0.1, start_step=0, steps=50, warmup_steps=5)
    assert float(flat(tf.constant(40))) == pytest.approx(0.1)
