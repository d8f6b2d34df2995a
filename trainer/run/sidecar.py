"""The sidecar evaluator (worker pool 3 on Vertex AI): evaluates each new checkpoint of the
training on the validation split, beside the training, and records what it measured.

It runs tf-keras' `SidecarEvaluator` on the per-epoch checkpoints the chief writes
(`ckpt-<epoch>`), records each evaluation in the job directory (`evaluations.json`, which the
training report shows as a curve) and writes TensorBoard summaries; it ends after
evaluating the last epoch's checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from trainer.cluster.tf_config import ClusterInfo
from trainer.common.errors import StageError
from trainer.run.paths import EPOCHS_DIR, PLAN_FILE

log = logging.getLogger("trainer")



class EvaluatorError(StageError):
    """The evaluator found no training to follow."""


def wait_for_plan(checkpoint_dir: str, timeout_seconds: float = 1800) -> dict[str, Any]:
    """The chief's plan (epochs, steps per epoch), once it exists."""
    path = os.path.join(checkpoint_dir, EPOCHS_DIR, PLAN_FILE)
    deadline = time.monotonic() + timeout_seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise EvaluatorError(f"no training plan at {path!r} after {timeout_seconds:.0f} s; "
                                 "is the chief running with the same --checkpoint-dir?")
        time.sleep(1)
    with open(path) as f:
        return json.load(f)


def run_sidecar(keras: Any, model: Any, data: Any, checkpoint_dir: str, job_dir: str,
                tensorboard_dir: str, info: ClusterInfo) -> int:
    """Evaluates every new checkpoint until the last epoch's; returns evaluations done."""
    from trainer.run.callbacks import RecordEvaluation

    plan = wait_for_plan(checkpoint_dir)
    record = RecordEvaluation(job_dir, info.name, int(plan["steps_per_epoch"]))
    evaluator = keras.utils.SidecarEvaluator(
        model, data=data, checkpoint_dir=os.path.join(checkpoint_dir, EPOCHS_DIR),
        max_evaluations=int(plan["epochs"]),
        callbacks=[record, keras.callbacks.TensorBoard(
            log_dir=os.path.join(tensorboard_dir, "sidecar_evaluator"))])
    evaluator.start()
    return len(record.done)
