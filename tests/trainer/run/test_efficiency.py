"""Where the time goes: the step split measured in a real Keras fit, the replicas' series
merged (a restarted replica, a missing one), and the NVML reader."""

from __future__ import annotations

import json
import time
import types

import numpy as np
import pytest

from components.training import efficiency
from components.training.reference_throughput import reference
from trainer.run.efficiency_log import SeriesFile, read_series, replica_path
from trainer.run.sampler import Sampler, read_gpus


def _fit(tmp_path, delay: float):
    """A real fit of a small model, its batches each made `delay` seconds slower, timed
    as the trainer times them; returns the replica's merged figures."""
    import tensorflow as tf
    import tf_keras as keras

    from trainer.run.step_split import StepTimer, stamp_arrivals

    def slow(images, labels):
        time.sleep(delay)
        return images, labels

    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices((
        rng.random((32 * 24, 16, 16, 3), dtype=np.float32),
        rng.integers(0, 4, 32 * 24))).batch(32).repeat()
    data = data.map(lambda x, y: tf.numpy_function(slow, [x, y], [tf.float32, tf.int64]))
    data = data.map(lambda x, y: (tf.ensure_shape(x, [None, 16, 16, 3]),
                                  tf.ensure_shape(y, [None]))).prefetch(1)
    arrivals: list[float] = []
    series = SeriesFile(replica_path(str(tmp_path), "chief-0"))
    model = keras.Sequential([keras.layers.Conv2D(8, 3, input_shape=(16, 16, 3)),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(stamp_arrivals(tf, data, arrivals), epochs=2, steps_per_epoch=10, verbose=0,
              callbacks=[StepTimer(series, arrivals, images_per_step=32)])
    return efficiency.merge(str(tmp_path), ["chief-0"], train_seconds=10.0)


@pytest.mark.slow
def test_a_slowed_input_pipeline_is_called_input_bound(tmp_path):
    # Each batch takes 60 ms to make, the step a few ms to train: the steps wait.
    figures = _fit(tmp_path, delay=0.06)
    replica = figures["replicas"]["chief-0"]
    assert [e["epoch"] for e in replica["epochs"]] == [1, 2]
    assert all(e["steps"] == 10 for e in replica["epochs"])
    assert figures["verdict"] == "input-bound", figures["evidence"]
    assert replica["input_share"] > efficiency.INPUT_BOUND
    assert replica["input_seconds"] <= replica["step_seconds"]
    assert figures["advice"].startswith("feed the steps faster: cache the decoded images")
    lines = efficiency.lines(figures)
    assert lines[0].startswith("efficiency: chief-0: ") and "of the step" in lines[0]
    assert any(line.startswith("efficiency: input-bound: the steps wait") for line in lines)
    # The first step of the fit traced the step function: its extra time is the warm-up,
    # once per fit, not per epoch.
    [warm] = replica["warmups"]
    assert (warm["fit"], warm["epoch"]) == (1, 1)
    assert warm["first_step_seconds"] > warm["steady_step_seconds"] > 0
    assert replica["warmup_seconds"] == warm["warmup_seconds"] > 0
    assert "; warm-up " in lines[0]


def test_the_warm_up_is_the_first_steps_time_beyond_a_steady_step():
    from trainer.run.step_split import warmup_figures

    assert warmup_figures([0.0, 30.0, 30.1, 30.2], [30.0, 30.1, 30.2, 30.4]) == {
        "first_step_seconds": 30.0, "steady_step_seconds": 0.1, "warmup_seconds": 29.9}
    assert warmup_figures([0.0], [2.0])["warmup_seconds"] == 2.0
    assert warmup_figures([], []) is None


def test_a_step_waits_only_for_a_new_batch():
    # Two steps per batch (a worker's batch split between its steps): steps 0, 2, 4 take
    # a new one; the batch of step 2 arrived 0.3 s after the step began, step 4's before.
    from trainer.run.step_split import step_waits

    begins = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert step_waits(begins, 0, [-0.1, 2.3, 3.9], 2) == pytest.approx([0, 0, 0.3, 0, 0])
    # Later in the fit (an epoch from step 5): step 6 takes batch 3, 0.5 s late.
    assert step_waits([10.0, 11.0], 5, [0, 0, 0, 11.5], 2) == pytest.approx([0.0, 0.5])
    assert step_waits(begins, 0, [0.0], 1) is None  # steps without a stamp: not measured


def _epoch(epoch, step, wait, images=1000.0):
    return {"kind": "epoch", "epoch": epoch, "steps": 10, "step_seconds": step,
            "input_seconds": wait, "images_per_second": images}


def test_the_merge_keeps_a_restarted_replicas_last_epoch_and_names_a_missing_one(tmp_path):
    chief = SeriesFile(replica_path(str(tmp_path), "chief-0"))
    for line in (_epoch(1, 0.10, 0.0), _epoch(2, 0.50, 0.40), _epoch(2, 0.10, 0.0)):
        chief.add(**line)
    worker = SeriesFile(replica_path(str(tmp_path), "worker-0"))
    for line in (_epoch(1, 0.10, 0.04), _epoch(2, 0.10, 0.04)):
        worker.add(**line)
    chief.flush()
    worker.flush()
    with open(replica_path(str(tmp_path), "worker-0"), "a") as f:
        f.write('{"kind": "sample", "at": 1')  # cut short by a killed replica: skipped
    figures = efficiency.merge(str(tmp_path), ["chief-0", "worker-0", "worker-1"], 3600.0)
    chief_figures = figures["replicas"]["chief-0"]
    # Epoch 2 ran twice (a restart): its second record counts.
    assert [e["step_seconds"] for e in chief_figures["epochs"]] == [0.10, 0.10]
    assert chief_figures["input_share"] == 0.0
    assert figures["cluster"]["missing_replicas"] == ["worker-1"]
    assert figures["cluster"]["images_per_second"] == 2000.0
    # The worker waits 0.04 s a step for input, the median 0.02 s: by 20% of the step,
    # more than the 15% margin; the cluster waits 20% of its time: compute-bound.
    assert figures["slow_replicas"] == ["worker-0: waits 0.0400 s a step for input, the "
                                        "median replica 0.0200 s"]
    text = "\n".join(efficiency.lines(figures))
    assert "no series from worker-1" in text and "slower than the others: worker-0" in text
    assert json.loads(open(efficiency.write(str(tmp_path), figures)).read())["verdict"] == \
        "compute-bound"


def test_an_epoch_of_one_step_gets_no_verdict_and_a_cached_run_no_cache_advice(tmp_path):
    one_step = SeriesFile(replica_path(str(tmp_path / "small"), "chief-0"))
    one_step.add(**{**_epoch(1, 0.10, 0.10), "steps": 1})
    one_step.flush()
    figures = efficiency.merge(str(tmp_path / "small"), ["chief-0"], 5.0, cache=True)
    assert figures["verdict"] == "unknown"
    assert figures["evidence"] == ("only 1 measured step(s) per replica (at least 5 to "
                                   "judge): a training split of a few global batches")
    waiting = SeriesFile(replica_path(str(tmp_path / "slow"), "chief-0"))
    waiting.add(**_epoch(1, 0.10, 0.09))
    waiting.flush()
    cached = efficiency.merge(str(tmp_path / "slow"), ["chief-0"], 5.0, cache=True)
    assert cached["verdict"] == "input-bound"
    assert "training.cache" not in cached["advice"]
    assert cached["advice"].endswith("(the decoded images are cached already)")
    uncached = efficiency.merge(str(tmp_path / "slow"), ["chief-0"], 5.0)
    assert uncached["advice"].startswith("feed the steps faster: cache the decoded images")
    # The report's section: the step in milliseconds, the chart with its axes and legend.
    from components import charts

    page = efficiency.html(cached, charts.use_over_time(cached["replicas"]))
    assert "<th>step (ms)</th>" in page and "<td>100.0</td>" in page
    assert "CPU (solid) and GPU (dashed) use per replica" in page
    assert "seconds since the first sample" in page and "use (%)" in page
    assert "no CPU or GPU samples were taken" in page  # this replica sampled nothing


class _Nvml(types.SimpleNamespace):
    """NVML's answers for one GPU, as nvidia-ml-py returns them (its ctypes structures for
    utilisation and memory; milliwatts, degrees, MHz, the clock-event bit mask)."""

    def __init__(self):
        import pynvml

        utilization = pynvml.c_nvmlUtilization_t()
        utilization.gpu, utilization.memory = 87, 41
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = 85520809984, 61203283968, 24317526016
        super().__init__(
            NVML_TEMPERATURE_GPU=pynvml.NVML_TEMPERATURE_GPU, NVML_CLOCK_SM=pynvml.NVML_CLOCK_SM,
            nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
            nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
            nvmlDeviceGetUtilizationRates=lambda h: utilization,
            nvmlDeviceGetMemoryInfo=lambda h: memory,
            nvmlDeviceGetPowerUsage=lambda h: 612345,
            nvmlDeviceGetTemperature=lambda h, sensor: 63,
            nvmlDeviceGetClockInfo=lambda h, clock: 1755,
            nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x1 | 0x4)


def test_the_nvml_reader_converts_nvmls_units():
    (gpu,) = read_gpus(_Nvml())
    assert gpu == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization_percent": 87,
                   "memory_used_bytes": 61203283968,
                   "memory_total_bytes": 85520809984, "power_watts": 612.3,
                   "temperature_c": 63, "sm_clock_mhz": 1755,
                   "throttle_reasons": ["sw_power_cap"]}


def test_a_machine_without_nvml_says_unavailable_never_zeros(tmp_path):
    series = SeriesFile(replica_path(str(tmp_path), "worker-0"))
    sampler = Sampler(series, interval=0.05, nvml=None, nvml_missing="NVML cannot start: "
                      "NVML Shared Library Not Found")
    sample = sampler.sample()
    assert sample["gpus"] == {"unavailable": "NVML cannot start: NVML Shared Library Not Found"}
    assert sample["host"]["memory_total_bytes"] > 0
    with Sampler(series, interval=0.05, flush_every=0.1, nvml=_Nvml()):
        time.sleep(0.4)
    (lines,) = read_series(str(tmp_path)).values()
    assert len(lines) >= 3 and all(line["kind"] == "sample" for line in lines)
    figures = efficiency.replica_figures(lines)
    assert figures["gpu"]["utilization_percent"] == 87.0 and figures["gpu"]["count"] == 1
    assert figures["gpu"]["throttle_reasons"] == ["sw_power_cap"]


def _gpu_sample(at, name, busy=90):
    return {"kind": "sample", "at": at, "host": {}, "gpus": [{
        "index": 0, "name": name, "utilization_percent": busy, "memory_used_bytes": 30e9,
        "memory_total_bytes": 40e9, "power_watts": 300.0, "temperature_c": 60,
        "sm_clock_mhz": 1410, "throttle_reasons": []}]}


def test_resnet50_on_an_a100_40gb_is_set_beside_nvidias_figure(tmp_path):
    chief = SeriesFile(replica_path(str(tmp_path), "single-0"))
    for line in (_epoch(1, 0.40, 0.0, images=640.0), _gpu_sample(0.0, "NVIDIA A100-SXM4-40GB"),
                 _gpu_sample(2.0, "NVIDIA A100-SXM4-40GB")):
        chief.add(**line)
    chief.flush()
    figures = efficiency.merge(str(tmp_path), [], 100.0, model="resnet50",
                               mixed_precision="float16")
    assert figures["reference"]["images_per_second_per_gpu"] == 2375.0
    assert figures["reference"]["precision"] == "mixed precision"
    assert figures["cluster"]["images_per_second_per_gpu"] == 640.0
    (said,) = [x for x in efficiency.lines(figures) if "NVIDIA measured" in x]
    assert said.startswith("efficiency: NVIDIA measured ResNet-50 at 2375 images/s per A100 "
                           "40GB (mixed precision, XLA, 224x224); this run 640 images/s per "
                           "GPU (27% of it;")
    # An H100 is set beside MLPerf's figure (another framework), at any precision.
    hopper = reference("resnet50", "NVIDIA H100 80GB HBM3", "off")
    assert (hopper["images_per_second_per_gpu"], hopper["precision"]) == (7006.0,
                                                                          "mixed precision")
    assert "MXNet + DALI" in hopper["source"]
    # No figure for another model, another GPU (an 80GB A100), or bfloat16 off Hopper.
    for model, precision in (("cnn", "float16"), ("resnet50", "bfloat16")):
        assert efficiency.merge(str(tmp_path), [], 100.0, model=model,
                                mixed_precision=precision)["reference"] is None
    assert reference("resnet50", "NVIDIA A100-SXM4-80GB", "off") is None
    assert reference("resnet50", "Tesla V100-SXM2-16GB", "off")["images_per_second_per_gpu"] \
        == 412.0


def test_gpus_that_neither_wait_for_input_nor_stay_busy_are_communication_bound(tmp_path):
    for name in ("chief-0", "worker-0"):
        series = SeriesFile(replica_path(str(tmp_path), name))
        for line in (_epoch(1, 0.40, 0.01, images=80.0), _gpu_sample(0.0, "NVIDIA L4", 41),
                     _gpu_sample(2.0, "NVIDIA L4", 45)):
            series.add(**line)
        series.flush()
    figures = efficiency.merge(str(tmp_path), ["chief-0", "worker-0"], 100.0)
    assert figures["verdict"] == "communication-bound"
    assert "the GPUs are busy only 43% (under 60%): the rest is the all-reduce between the " \
        "2 machines" in figures["evidence"]
    assert figures["advice"].startswith("shorten the all-reduce: a Reduction Server pool")
    # One machine has no all-reduce between machines: the same figures are compute-bound.
    single = tmp_path / "single"
    series = SeriesFile(replica_path(str(single), "single-0"))
    for line in (_epoch(1, 0.40, 0.01), _gpu_sample(0.0, "NVIDIA L4", 41)):
        series.add(**line)
    series.flush()
    assert efficiency.merge(str(single), [], 100.0)["verdict"] == "compute-bound"


def test_a_call_of_several_steps_is_counted_as_its_steps():
    from trainer.run.step_split import epoch_split, per_step

    # Two calls of 4 steps each, 0.4 s a call (the first traced), 64 images a step.
    split = epoch_split([0.0, 1.0, 1.4], [1.0, 1.4, 1.8], [0.0, 0.1, 0.2], 64 * 4)
    figures = per_step(split, 4)
    assert (figures["steps"], figures["step_seconds"]) == (12, 0.1)
    assert figures["images_per_second"] == pytest.approx(640.0)  # 256 images in 0.4 s
    assert figures["input_seconds"] == pytest.approx(0.0375)  # 0.15 s a call, per step
    assert figures["input_share"] == split["input_share"]
    assert per_step(split, 1) is split
