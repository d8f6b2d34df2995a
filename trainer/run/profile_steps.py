"""A TensorBoard profiler trace of `training.profile_steps` steps on the chief and the
first worker: the step time split into input, compute, device-to-device communication
and idle, which the efficiency report's own split (`trainer.run.step_split`) cannot tell
apart.

`tf.profiler.experimental.start(logdir)` writes `<logdir>/plugins/profile/<run>/
<host>.xplane.pb`, where TensorBoard's profile plugin (and Vertex AI TensorBoard, reading
the job's AIP_TENSORBOARD_LOG_DIR) finds it: the chief's under the TensorBoard directory,
the worker's under `worker-<index>/` in it. The trace starts after WARMUP steps of the first
epoch the replica runs (the first steps trace and compile the function) and stops after
the asked-for steps or at the epoch's end, whichever comes first; a profiler another
part of the process already runs is left alone, said in the log.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import tf_keras as keras

if TYPE_CHECKING:
    from trainer.run.replica_setup import ReplicaSetup

log = logging.getLogger(__name__)

#: Steps run before the trace starts.
WARMUP = 5


class ProfileSteps(keras.callbacks.Callback):
    """Traces `steps` steps of the first epoch into `logdir`."""

    def __init__(self, tf: Any, logdir: str, steps: int, steps_per_epoch: int):
        super().__init__()
        self.tf, self.logdir, self.steps = tf, logdir, steps
        self.start_at = min(WARMUP, max(0, steps_per_epoch - steps))
        self.stop_at = min(steps_per_epoch, self.start_at + steps)
        self.running = self.done = False

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        # With steps_per_execution > 1 the calls' first steps skip by N: the trace starts
        # at the first call at or past `start_at`.
        if self.done or self.running or batch < self.start_at:
            return
        try:
            self.tf.profiler.experimental.start(self.logdir)
        except self.tf.errors.AlreadyExistsError:
            log.warning("profile: not traced: another profiler is running in this process")
            self.done = True
            return
        self.running = True

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.running and batch + 1 >= self.stop_at:
            self._stop()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.running:
            self._stop()

    def on_train_end(self, logs: Any = None) -> None:
        if self.running:
            self._stop()

    def _stop(self) -> None:
        self.tf.profiler.experimental.stop()
        self.running, self.done = False, True
        # The Profile tab is TensorBoard's profile plugin, which the project does not
        # install (xprof: about 50 MB with its own dependencies).
        log.info("profile: steps %d-%d traced into %s (TensorBoard's Profile tab, after "
                 "`pip install tensorboard-plugin-profile` in TensorBoard's environment)",
                 self.start_at + 1, self.stop_at, self.logdir)


def for_replica(tf: Any, setup: ReplicaSetup) -> list[ProfileSteps]:
    """The profiler callback of this replica (`setup`: its `ReplicaSetup`):
    on the chief and the first worker when `training.profile_steps` asks for steps."""
    steps = setup.options.profile_steps
    info = setup.info
    # Worker 0 is the chief of a cluster without one: then the first worker is worker 1.
    first_worker = ("worker", 0 if "chief" in info.cluster else 1)
    if not steps or (not info.is_chief and (info.task_type, info.task_index) != first_worker):
        return []
    where = setup.where.tensorboard_dir if info.is_chief else \
        os.path.join(setup.where.tensorboard_dir, f"worker-{info.task_index}")
    return [ProfileSteps(tf, where, steps, setup.steps_per_epoch)]
