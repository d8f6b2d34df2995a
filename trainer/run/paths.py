"""Output locations of the trainer, from flags and the variables Vertex AI sets.

`gs://` locations are used through Vertex AI's Cloud Storage mount (`trainer.common.gcs`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainer.common.gcs import to_mount_path

#: The per-epoch checkpoints, inside the checkpoint directory: the chief's callbacks write
#: them, the sidecar evaluator reads them.
EPOCHS_DIR = "epochs"
#: Written there by the chief before training: how to turn optimizer iterations into epochs.
PLAN_FILE = "plan.json"


def _choose(explicit: str | None, environ: Mapping[str, str], variable: str,
            default: str) -> str:
    return to_mount_path(explicit or environ.get(variable) or default)


def model_dir(job_dir: str, environ: Mapping[str, str], explicit: str | None = None) -> str:
    """Final SavedModel: `--model-dir`, else Vertex's AIP_MODEL_DIR, else <job-dir>/model."""
    return _choose(explicit, environ, "AIP_MODEL_DIR", os.path.join(job_dir, "model"))


def checkpoint_dir(job_dir: str, environ: Mapping[str, str], explicit: str | None = None) -> str:
    """Checkpoints and the restart backup: `--checkpoint-dir`, else AIP_CHECKPOINT_DIR,
    else <job-dir>/checkpoints."""
    return _choose(explicit, environ, "AIP_CHECKPOINT_DIR", os.path.join(job_dir, "checkpoints"))


def tensorboard_dir(job_dir: str, environ: Mapping[str, str], explicit: str | None = None) -> str:
    """TensorBoard logs: `--tensorboard-dir`, else AIP_TENSORBOARD_LOG_DIR, else
    <job-dir>/tensorboard."""
    return _choose(explicit, environ, "AIP_TENSORBOARD_LOG_DIR",
                   os.path.join(job_dir, "tensorboard"))
