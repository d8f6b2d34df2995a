"""Vertex AI training: the CustomJob's worker pools for the validated machines.

Only training differs between Vertex and local runs (`components.training.local_cluster`);
see `pipelines.pipeline`.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from components.training.job_names import (
    JOB_NAME_SUFFIX,
    unique_job_name,
    validate_job_name,
)
from components.training.layout import is_reduction_server
from trainer.errors import InputError

#: Vertex AI sets AIP_MODEL_DIR to `<base_output_directory>/model`.
MODEL_SUBDIR = "model"


class TrainingSpecError(InputError):
    """The worker pools or image cannot make a CustomJob."""


def custom_job_spec(worker_pool_specs: Sequence[dict[str, Any]], image_uri: str, *,
                    dataset_path: str, output_uri: str, output_path: str,
                    trainer_args: Sequence[str] = (),
                    job_name: str = "gpu_training") -> dict[str, Any]:
    """Adds the trainer container to validated worker pools.

    Every used pool runs the same image and arguments (the chief trains or coordinates,
    workers train or serve, parameter servers serve, the evaluator evaluates: roles from
    the TF_CONFIG Vertex sets), except a Reduction Server pool, which keeps its own image.
    Paths given to the trainer are `/gcs/` paths (Cloud Storage FUSE on Vertex), read with
    plain file APIs.

    Args:
        worker_pool_specs: Normalised pools from the validation stage.
        image_uri: The trainer image.
        dataset_path: Local (FUSE) path of the prepared dataset.
        output_uri: `gs://` URI for the job's outputs (base_output_directory).
        output_path: The same location as a local (FUSE) path.
        trainer_args: Further trainer flags (`trainer.schema.to_flags` of the options).
        job_name: Base of the job's display name; a date/time suffix makes it unique.

    Returns:
        `worker_pool_specs`, `base_output_directory`, `model_uri` and `display_name` for
        the CustomJob.

    Raises:
        TrainingSpecError: No image, no chief pool, or an invalid job name.
    """
    problems = validate_job_name(job_name, "job_name", reserve=JOB_NAME_SUFFIX)
    if problems:
        raise TrainingSpecError("; ".join(problems))
    if not image_uri:
        raise TrainingSpecError("image_uri is empty; a Vertex CustomJob needs the trainer image")
    if not worker_pool_specs or not worker_pool_specs[0]:
        raise TrainingSpecError("worker_pool_specs has no chief pool (pool 0)")
    args = ["--job-dir", output_path, "--data-dir", dataset_path, *map(str, trainer_args)]
    reduction = any(is_reduction_server(p) for p in worker_pool_specs)
    if reduction and "--strategy" in args:  # pool 2 is not parameter servers then
        args[args.index("--strategy") + 1] = "multi_worker_mirrored"
    pools = []
    for pool in worker_pool_specs:
        pool = copy.deepcopy(dict(pool))
        if pool and not is_reduction_server(pool):  # which runs Vertex AI's own image
            pool["container_spec"] = {"image_uri": image_uri, "args": list(args)}
        pools.append(pool)
    base = output_uri.rstrip("/")
    return {"worker_pool_specs": pools, "base_output_directory": base,
            "model_uri": f"{base}/{MODEL_SUBDIR}", "display_name": unique_job_name(job_name)}
