"""What measuring costs the step: a real Keras fit timed with and without the efficiency
measurement (the batches' hand-over stamps, the step timer, the sampler thread reading
psutil every 2 s, and NVML where there is one).

In interleaved rounds, the same small CNN on the same in-memory batches, each case in a
fresh process (TensorFlow's state does not carry over): the median step time of the
second epoch. Goal: at most 1.03x the unmeasured step.

Usage: python benchmarks/efficiency_overhead.py [--rounds N] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import common

GOAL = 1.03  # measured step time / unmeasured, at most
STEPS = 60


def child(measured: bool) -> float:
    """One fit in this process; the median step time of its second epoch, in ms."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices((
        rng.random((64 * 16, 32, 32, 3), dtype=np.float32),
        rng.integers(0, 4, 64 * 16))).batch(64).repeat().prefetch(tf.data.AUTOTUNE)
    model = keras.Sequential([
        keras.layers.Conv2D(32, 3, activation="relu", input_shape=(32, 32, 3)),
        keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # no copy of the logs to the host every step
            self.times: list[float] = []

        def on_train_batch_begin(self, batch, logs=None):
            self.begin = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter() - self.begin)

    steps = Steps()
    callbacks = [steps]
    with tempfile.TemporaryDirectory() as work:
        if measured:
            from trainer.run.efficiency_log import SeriesFile
            from trainer.run.sampler import Sampler, load_nvml
            from trainer.run.step_split import StepTimer, stamp_arrivals

            arrivals: list[float] = []
            data = stamp_arrivals(tf, data, arrivals)
            series = SeriesFile(os.path.join(work, "chief-0.jsonl"))
            callbacks.append(StepTimer(series, arrivals, images_per_step=64))
            nvml, missing = load_nvml()
            with Sampler(series, nvml=nvml, nvml_missing=missing):
                model.fit(data, epochs=2, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
        else:
            model.fit(data, epochs=2, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
    second = sorted(steps.times[STEPS:])
    return 1000 * second[len(second) // 2]


def run_child(measured: bool) -> float:
    result = subprocess.run([sys.executable, __file__, "--child",
                             "measured" if measured else "plain"],
                            capture_output=True, text=True, cwd=common.ROOT)
    if result.returncode != 0:
        sys.exit(f"the fit failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["step_ms"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=common.Path)
    parser.add_argument("--child", choices=["measured", "plain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"step_ms": child(args.child == "measured")}))
        return 0
    info = common.machine()
    print(common.describe_machine(info))
    samples = common.interleaved({"plain": lambda: run_child(False),
                                  "measured": lambda: run_child(True)}, args.rounds,
                                 unit=" ms")
    ratio = common.ratio(samples, "measured", "plain")
    print(f"measured / plain median step time: {ratio['median']:.3f}x (rounds "
          f"{ratio['per_round']}); goal at most {GOAL}x: "
          f"{common.verdict(ratio['median'], GOAL, at_most=True)}")
    results = {"machine": info, "steps_per_epoch": STEPS, "samples_ms": samples,
               "medians_ms": common.medians(samples), "measured_over_plain": ratio,
               "goal": GOAL}
    print(f"results: {common.save('efficiency_overhead', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
