"""Each configuration's hours come from what measured it (`training_hours`): the newest
registered model where it trained on the same machines, else the GPU benchmark's case for
its GPU, model and image size, else `vertex.timeout`; one configuration's speed is never
lent to another."""

from __future__ import annotations

import pytest

from components.capacity.measured_speed import Registered
from components.capacity.training_hours import Evidence, hours_for
from components.gpu import catalog as cat
from tests.support.facts import missing
from tests.support.launches import L4, config, pools
from tests.trainer.cluster.test_measured_plan import results
from trainer.cluster.measurements import Measurements, parse_results, shipped

T4_POOLS = config().vertex.worker_pool_specs  # the default: 2 x n1-standard-8 with a T4


def registered(seconds: float, specs, counts=(700, 200)) -> Registered:
    """A registered model that trained 10 epochs in `seconds` on `specs`."""
    return Registered("models/7@3", {"cluster": {"train_seconds": seconds},
                                     "replicas": {"chief-0": {"epochs": [{}] * 10}}},
                      {"cluster": {"worker_pool_specs": list(specs)},
                       "dataset": {"counts": {"train": counts[0], "validation": counts[1],
                                              "test": 100}}})


def measured(*files) -> Measurements:
    return Measurements(tuple(parse_results(data, name, user=True) for name, data in files))


def evidence(**kwargs) -> Evidence:
    return Evidence(**{"epochs": 10, "timeout": "7200s", "model": "cnn", "batch": 64,
                       "image_size": 32, **kwargs})


def test_a_registered_run_counts_only_for_the_machines_it_trained_on():
    cfg = config(fallbacks=[{"worker_pool_specs": pools(L4)}])
    primary, l4 = cfg.alternatives()
    found = evidence(registered=registered(1800.0, T4_POOLS), images=900)
    # 1,800 s for 10 epochs of the same 900 images: 180 s an epoch, 0.5 h.
    assert hours_for(primary, found).hours == 0.5
    assert not missing(hours_for(primary, found).basis, "180 s", "models/7@3")
    # The L4 fallback did not train it: its speed is not lent, the timeout bounds it.
    other = hours_for(l4, found)
    assert (other.hours, other.measured) == (2.0, False)
    assert not missing(other.basis, "2 x NVIDIA_L4", "vertex.timeout 7200s")
    # A dataset twice the size: the epoch takes twice as long.
    bigger = hours_for(primary, evidence(registered=registered(1800.0, T4_POOLS),
                                         images=1800))
    assert bigger.hours == 1.0 and not missing(bigger.basis, "900", "1,800")


def test_a_benchmarked_gpu_gives_its_case_closest_to_the_plan_times_the_gpus():
    cfg = config(worker_pool_specs=pools(L4))
    (l4,) = cfg.alternatives()
    assert (l4.plan.mixed_precision, l4.plan.xla) == ("bfloat16", False)
    file = results(cat.L4, "2026-11-28T10:00:00+00:00",
                   ("bfloat16", 900.0, {"precision": "bfloat16", "image_size": 32,
                                       "warmup_seconds": 60.0}),
                   ("bfloat16+tfrecords", 800.0, {"precision": "bfloat16", "image_size": 32,
                                                 "input": "tfrecords",
                                                 "warmup_seconds": 60.0}),
                   ("float32", 500.0, {"precision": "off", "image_size": 32}),
                   ("bfloat16-224", 100.0, {"precision": "bfloat16", "image_size": 224}),
                   model="cnn")
    found = hours_for(l4, evidence(measurements=measured(("l4.json", file)), images=16000,
                                   images_from="the prepared dataset"))
    # The run's own TFRecords agree with the plan more than synthetic batches do: 160,000
    # images at 800 images/s a GPU, the second machine taken at half of one (1,200
    # images/s: not measured, said), are 133.3 s, and the 60 s warm-up.
    assert found.hours * 3600 == pytest.approx(193.33, abs=0.01)
    assert found.basis.startswith("at most: ")
    assert not missing(found.basis, "800 images/s", "bfloat16+tfrecords", "l4.json",
                       "2 GPUs taken at 1.5 x one (not measured")
    # A quarter of them validation images: every training machine reads them all, so they
    # go at one machine's speed: 120,000 at 1,200 (100 s) and 40,000 at 800 (50 s), 60 s.
    split = hours_for(l4, evidence(measurements=measured(("l4.json", file)), images=16000,
                                   validation_images=4000, images_from="the dataset"))
    assert split.hours * 3600 == pytest.approx(210.0)
    # Another image size, another model or no dataset size yet: not measured.
    for other in (evidence(measurements=measured(("l4.json", file)), images=16000,
                           image_size=64),
                  evidence(measurements=measured(("l4.json", file)), images=16000,
                           model="resnet50"),
                  evidence(measurements=measured(("l4.json", file)))):
        assert not hours_for(l4, other).measured
    unsized = hours_for(l4, evidence(measurements=measured(("l4.json", file))))
    assert unsized.hours == 2.0 and not missing(unsized.basis, "NVIDIA_L4", "dataset's size")


def test_an_h100_stands_in_from_an_h200_and_a_cpu_measurement_never_counts():
    cfg = config(worker_pool_specs=[{"machine_spec": {
        "machine_type": "a3-highgpu-1g", "accelerator_type": cat.H100_80GB,
        "accelerator_count": 1}, "replica_count": 1}])
    (h100,) = cfg.alternatives()
    shipped_only = evidence(model="resnet50", image_size=224, images=1_281_167 + 50_000,
                            images_from="ImageNet's", measurements=shipped())
    found = hours_for(h100, shipped_only)
    assert found.measured and "GPUs taken at" not in found.basis  # one GPU: no scaling
    # Its plan runs float32, its own file's fastest case, which speaks for it: the plan
    # and the budget read the same case of the same file.
    assert h100.plan.mixed_precision == "off"
    assert h100.plan.measured["mixed_precision"] == ("trainer/cluster/measured/"
                                                     "gpu-h100-2026-11-26.json",)
    # 10 epochs of 1,331,167 images at 1,525.2 images/s, and 42.8 s of warm-up: 8,771 s
    # by hand.
    assert found.hours * 3600 == pytest.approx(8771, rel=1e-3)
    assert not missing(found.basis, "1,525 images/s", "43 s", "float32",
                       "gpu-h100-2026-11-26.json")
    # Without it, the H200's figures stand in, and are said to.
    h200_only = Measurements(tuple(f for f in shipped().files if f.accelerator == cat.H200))
    stand_in = hours_for(h100, evidence(model="resnet50", image_size=224, images=1000,
                                        measurements=h200_only)).basis
    assert "(extrapolated from an NVIDIA H200" in stand_in, stand_in
    on_cpu = {**results(cat.H100_80GB, "2026-11-28T10:00:00+00:00",
                        ("float16", 12.0, {"precision": "float16", "image_size": 224}),
                        model="resnet50"), "device": "cpu"}
    with_cpu = evidence(model="resnet50", image_size=224, images=1000,
                        measurements=measured(("cpu.json", on_cpu)))
    assert not hours_for(h100, with_cpu).measured


def test_the_training_step_estimates_from_the_prepared_dataset_and_says_an_unread_registry(
        tmp_path, monkeypatch):
    import json

    from components.capacity import measured_speed
    from components.capacity.vertex_launch import step_evidence
    from trainer.common.cloud_calls import CloudCallError
    from trainer.common.contract import MANIFEST_NAME

    (tmp_path / MANIFEST_NAME).write_text(json.dumps({
        "format_version": 2, "image_size": [48, 48],
        "splits": {"train": {"count": 700}, "validation": {"count": 200},
                   "test": {"count": 100}}}))

    def unreadable(*args):
        raise CloudCallError("listing the Model Registry failed: 403 denied")

    monkeypatch.setattr(measured_speed, "newest_measured", unreadable)
    cfg = config()
    lines = []
    found = step_evidence(cfg.vertex, cfg.training, "my-proj", str(tmp_path), lines.append)
    assert (found.images, found.image_size, found.registered) == (900, 48, None)
    assert found.images_from == "the prepared dataset"
    assert found.measurements.files == shipped().files  # training.measurements unset
    (line,) = lines
    assert line.startswith("budget: ") and "403 denied" in line


def test_two_a3_highgpu_8g_are_estimated_at_most_with_their_scaling_said():
    """16 H100s on 2 machines from the shipped files: the H100's own float32 case (1,525.2
    images/s, 42.8 s warm-up), each machine's 8 GPUs at 1 + 7 x 0.8 = 6.6 of one and the
    second machine at half: 9.9 of one, not 16. 10 epochs of 1,281,167 training images at
    1,525.2 x 9.9 images/s are 848.5 s; 50,000 validation images at one machine's
    1,525.2 x 6.6, every epoch, 49.7 s; with the warm-up 940.9 s, by hand. Linear
    scaling, all at 16 GPUs, would say 10 x 1,331,167 / (1,525.2 x 16) + 42.8 = 588.3 s."""
    eight = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type":
                              cat.H100_80GB, "accelerator_count": 8}}
    (two,) = config(worker_pool_specs=[{**eight, "replica_count": 1},
                                       {**eight, "replica_count": 1}]).alternatives()
    found = hours_for(two, evidence(model="resnet50", image_size=224, batch=256,
                                    images=1_281_167 + 50_000, validation_images=50_000,
                                    images_from="ImageNet's", measurements=shipped()))
    assert found.hours * 3600 == pytest.approx(940.9, abs=0.5)
    assert found.hours * 3600 > 588.3
    assert found.basis.startswith("at most: ")
    assert not missing(found.basis, "16 GPUs taken at 9.9 x one (not measured",
                       "each machine beyond the first 50% of one",
                       "50,000 validation images at one machine's")
