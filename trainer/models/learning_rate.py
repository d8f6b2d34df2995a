"""The learning rate of a phase: linear warm-up, then constant or cosine decay.

A Keras `LearningRateSchedule` of the optimizer's global step, offset by the step its
phase starts at: phase 2 (fine-tuning) continues phase 1's step count, and a restart
under BackupAndRestore restores that count, so the schedule resumes where it was.
Imported only after TensorFlow has been set up (`trainer.run.replica`).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf
import tf_keras as keras


class PhaseSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up over `warmup_steps` from `peak / warmup_steps` to `peak`, then `peak`
    (constant) or a cosine decay to 0 at the phase's last step.

    Args:
        peak: The phase's learning rate (after the linear scaling rule).
        start_step: Global step the phase starts at.
        steps: Steps in the phase.
        warmup_steps: Steps of linear warm-up (0: none).
        cosine: Decay along a half cosine after the warm-up.
    """

    def __init__(self, peak: float, start_step: int, steps: int, warmup_steps: int = 0,
                 cosine: bool = False):
        super().__init__()
        self.peak, self.start_step, self.steps = float(peak), int(start_step), int(steps)
        self.warmup_steps, self.cosine = int(warmup_steps), bool(cosine)

    def __call__(self, step: Any) -> Any:
        step = tf.cast(step, tf.float32) - float(self.start_step)
        peak = tf.constant(self.peak, tf.float32)
        warm = peak * (step + 1.0) / float(max(self.warmup_steps, 1))
        if self.cosine:
            span = float(max(self.steps - self.warmup_steps, 1))
            progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            after = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        else:
            after = peak
        return tf.where(step < float(self.warmup_steps), warm, after)

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "start_step": self.start_step, "steps": self.steps,
                "warmup_steps": self.warmup_steps, "cosine": self.cosine}


def learning_rate(phase: Any) -> Any:
    """The optimizer's learning rate for a `trainer.run.replica_setup.Phase`: a plain number
    when it is constant (as before schedules existed), else a `PhaseSchedule`."""
    if not phase.warmup_steps and not phase.cosine:
        return phase.learning_rate
    return PhaseSchedule(phase.learning_rate, phase.start_step, phase.steps,
                         phase.warmup_steps, phase.cosine)
