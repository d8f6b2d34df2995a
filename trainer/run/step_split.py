"""Where each training step's time goes on this replica: waiting for its batch (input), and
the rest (compute and the all-reduce together), per epoch.

How it is measured: the input pipeline's last stage (after its final prefetch) stamps the
moment each batch is handed to the training loop (`stamp_arrivals`); the Keras callback
(`StepTimer`) knows when each step began and ended. The part of step `i` spent waiting is
`max(0, arrival(i) - begin(i))`: a batch that was ready before the step asked for it cost
nothing, one produced while the step waited cost the difference. TensorBoard's profiler
splits a step the same way (its input-pipeline analysis counts the time the step's
`IteratorGetNext` blocks); this needs no trace. Under ParameterServerStrategy the workers
build their datasets remotely, where this process cannot stamp them: the split is then
"unavailable".

Imported after TensorFlow has been set up (`trainer.run.replica`), like
`trainer.run.callbacks`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tf_keras as keras

from trainer.run.efficiency_log import SeriesFile

if TYPE_CHECKING:
    from trainer.run.replica_setup import ReplicaSetup


def stamp_arrivals(tf: Any, dataset: Any, arrivals: list[float]) -> Any:
    """`dataset` with each element's hand-over time appended to `arrivals` (monotonic
    seconds), in order. The stamp runs in the consumer's own `GetNext`, after the
    pipeline's prefetch buffer, so it sees the wait and adds no parallel work; only a
    scalar crosses into Python (the batch is passed on as it is, after the stamp)."""
    import numpy as np

    def stamp() -> Any:
        arrivals.append(time.monotonic())
        return np.int64(len(arrivals))

    def add(*element: Any) -> Any:
        token = tf.numpy_function(stamp, [], tf.int64, stateful=True)
        with tf.control_dependencies([token]):
            return tf.nest.map_structure(tf.identity, element if len(element) > 1
                                         else element[0])

    return dataset.map(add)


def epoch_split(begins: Sequence[float], ends: Sequence[float],
                waits: Sequence[float] | None, images_per_step: int) -> dict[str, Any]:
    """One epoch's figures from its steps' begin and end times and the time each step
    waited for its batch (None: not measured). The first step is left out of the
    averages: it traces the step function (and fills the buffers), which no later step
    pays."""
    steps = len(ends)
    durations = [e - b for b, e in zip(begins, ends, strict=False)]
    timed = durations[1:] or durations
    step_seconds = statistics.fmean(timed) if timed else 0.0
    figures: dict[str, Any] = {
        "steps": steps, "seconds": round(ends[-1] - begins[0], 4) if steps else 0.0,
        "step_seconds": round(step_seconds, 6),
        "step_seconds_p90": round(sorted(timed)[int(0.9 * (len(timed) - 1))], 6)
        if timed else 0.0,
        "images_per_second": round(images_per_step / step_seconds, 2) if step_seconds else 0.0}
    if waits is None or len(waits) < steps:
        figures.update(input_seconds=None, input_share=None)
        return figures
    wait = statistics.fmean(waits[1:] or waits) if waits else 0.0
    figures.update(input_seconds=round(wait, 6),
                   input_share=round(min(1.0, wait / step_seconds), 4) if step_seconds else None)
    return figures


def per_step(split: dict[str, Any], steps_per_call: int) -> dict[str, Any]:
    """An epoch's figures timed per call of the compiled step (`epoch_split`), per step:
    each call ran `steps_per_call` steps (its images per second stand)."""
    if steps_per_call == 1:
        return split
    found = {**split, "steps": split["steps"] * steps_per_call}
    for key in ("step_seconds", "step_seconds_p90", "input_seconds"):
        if found.get(key) is not None:
            found[key] = round(found[key] / steps_per_call, 6)
    return found


def warmup_figures(begins: Sequence[float], ends: Sequence[float]) -> dict[str, Any] | None:
    """What the first step of a `fit` cost beyond a steady one (tracing the step function,
    XLA's compilation, cuDNN's autotuning): `first_step_seconds`, `steady_step_seconds`
    (the median of the others) and `warmup_seconds` (their difference), or None without
    a step."""
    durations = [e - b for b, e in zip(begins, ends, strict=False)]
    if not durations:
        return None
    steady = statistics.median(durations[1:]) if len(durations) > 1 else 0.0
    return {"first_step_seconds": round(durations[0], 3),
            "steady_step_seconds": round(steady, 6),
            "warmup_seconds": round(max(0.0, durations[0] - steady), 3)}


def step_waits(begins: Sequence[float], first_step: int, arrivals: Sequence[float],
               steps_per_batch: int) -> list[float] | None:
    """How long each step (the fit's steps `first_step`, `first_step + 1`, ... beginning at
    `begins`) waited for its batch. With `steps_per_batch` > 1 one batch of the pipeline
    feeds several steps (a worker whose batch the distributed dataset splits between its
    steps): only the step that takes a new batch can wait. None when a step's batch has no
    stamp."""
    waits = []
    for offset, begin in enumerate(begins):
        step = first_step + offset
        if step % steps_per_batch:
            waits.append(0.0)
            continue
        batch = step // steps_per_batch
        if batch >= len(arrivals):
            return None
        waits.append(max(0.0, arrivals[batch] - begin))
    return waits


class StepTimer(keras.callbacks.Callback):
    """Times every training step and writes each epoch's split to the replica's series.

    Args:
        series: The replica's efficiency file.
        arrivals: The training input's stamps (`stamp_arrivals`), or None when its batches
            could not be stamped.
        images_per_step: Training images this replica processes per step.
        memory: Called at each epoch's end: the accelerator's peak memory then, or None.
        compiler: What compiles the step (XLA's PTX compiler, a line), kept with the
            warm-up.
        steps_per_call: Steps each call of the compiled step runs
            (`training.steps_per_execution`): Keras calls the batch callbacks once per
            call, so each timed "step" here is that many, and takes that many batches.

    The first epoch of each `fit` also writes a `warmup` line (`warmup_figures`): each
    `fit` (a phase) traces and compiles its step again.
    """

    def __init__(self, series: SeriesFile, arrivals: list[float] | None,
                 images_per_step: int, memory: Any = lambda: None, compiler: str = "",
                 steps_per_call: int = 1):
        super().__init__()
        # Keras then passes the step's logs on as tensors instead of copying them to the
        # host after every step (a synchronisation the timer does not need).
        self._supports_tf_logs = True
        self.series, self.arrivals = series, arrivals
        self.images_per_step, self.memory = images_per_step, memory
        self.steps_per_call = steps_per_call
        self._begins: list[float] = []
        self._ends: list[float] = []
        self._base = 0  # the first arrival of this fit's iterator
        self._steps = 0  # steps of this fit before the epoch's
        self.compiler = compiler
        self._fits = 0

    def on_train_begin(self, logs=None):
        self._steps = 0
        self._fits += 1

    def on_train_end(self, logs=None):
        # The next `fit` (the next phase) reads through a new iterator: batches this one
        # fetched ahead and never trained on are not the next phase's. (A new iterator
        # starts fetching before `on_train_begin`: hence here.)
        self._base = len(self.arrivals) if self.arrivals is not None else 0

    def on_epoch_begin(self, epoch, logs=None):
        self._begins, self._ends = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self._begins.append(time.monotonic())

    def on_train_batch_end(self, batch, logs=None):
        self._ends.append(time.monotonic())

    def on_epoch_end(self, epoch, logs=None):
        waits = None
        if self.arrivals is not None:
            # A call takes `steps_per_call` batches: it waits only for its first.
            stamped = self.arrivals[self._base:][::self.steps_per_call]
            done = self._steps + len(self._ends)
            # Batches the pipeline handed over per step: 1, or fewer when the distributed
            # dataset splits each of this worker's batches between several steps.
            per_batch = max(1, round(done / len(stamped))) if stamped else 1
            waits = step_waits(self._begins, self._steps, stamped, per_batch)
        warmup = warmup_figures(self._begins, self._ends) if self._steps == 0 else None
        if warmup is not None:
            self.series.add("warmup", fit=self._fits, epoch=epoch + 1, at=time.time(),
                            **warmup, **({"compiler": self.compiler} if self.compiler else {}))
        split = epoch_split(self._begins, self._ends, waits,
                            self.images_per_step * self.steps_per_call)
        self.series.add("epoch", epoch=epoch + 1, at=time.time(),
                        peak_memory_bytes=self.memory(),
                        **per_step(split, self.steps_per_call))
        self.series.flush()
        self._steps += len(self._ends)


def for_replica(tf: Any, setup: ReplicaSetup,
                compiler: str = "") -> tuple[SeriesFile, StepTimer]:
    """This replica's efficiency series (`setup`: its `ReplicaSetup`) and
    the callback that times its steps (`compiler`: the line `trainer.run.gpu_environment`
    says of XLA's compiler, kept with the warm-up); the batches' arrivals are to be stamped
    (`stamp_arrivals` with `timer.arrivals`) except under ParameterServerStrategy, whose
    workers build their datasets where this process cannot see them."""
    from trainer.run.efficiency_log import replica_name, replica_path

    info = setup.info
    series = SeriesFile(replica_path(setup.where.job_dir,
                                     replica_name(info.task_type, info.task_index)))
    arrivals: list[float] | None = [] if setup.strategy != "parameter_server" else None
    gpus = tf.config.list_logical_devices("GPU")

    def peak_memory() -> int | None:
        if not gpus:
            return None
        try:  # an allocator that keeps no statistics raises: then unknown
            peak = tf.config.experimental.get_memory_info(gpus[0].name)["peak"]
            tf.config.experimental.reset_memory_stats(gpus[0].name)
        except (ValueError, RuntimeError, tf.errors.OpError):
            return None
        return int(peak)

    # Each training machine takes its share of the global batch per step.
    images = setup.global_batch // max(1, info.training_machines)
    return series, StepTimer(series, arrivals, images, memory=peak_memory, compiler=compiler,
                             steps_per_call=setup.options.steps_per_execution)
