"""Vertex AI training: the CustomJob's worker pools for the validated machines.

Only training differs between Vertex and local runs (`components.training.local_cluster`);
see `pipelines.pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from components.durations import duration_seconds
from components.gpu.worker_pool import WorkerPool
from components.images import TRAINER_COMMAND
from components.training.job_names import (
    JOB_NAME_SUFFIX,
    unique_job_name,
    validate_job_name,
)
from trainer.common.errors import InputError
from trainer.run.xla_compile import IMAGE_VARIABLE

if TYPE_CHECKING:
    from components.vertex_options import VertexOptions
    from trainer.run.training_options import TrainingOptions

#: Vertex AI sets AIP_MODEL_DIR to `<base_output_directory>/model`.
MODEL_SUBDIR = "model"


class TrainingSpecError(InputError):
    """The worker pools or image cannot make a CustomJob."""


def trainer_flags(options: TrainingOptions, training_plan: Mapping[str, Any]) -> list[str]:
    """The trainer's flags: the training options (`TrainingOptions`) with the strategy
    stage 1's plan chose (the one decision: the replica's `--strategy` agrees with its
    `--training-plan`, a Reduction Server's pool 2 included), and the plan itself."""
    from trainer.cluster.training_plan import TrainingPlan
    from trainer.common.schema import to_flags

    plan = TrainingPlan.from_dict(training_plan)
    chosen = options.strategy if plan.strategy == "single" else plan.strategy
    return [*to_flags(options.model_copy(update={"strategy": chosen})),
            "--training-plan", plan.to_json()]


def custom_job_spec(pools: Sequence[WorkerPool | None], images: Mapping[str, Any], *,
                    dataset_path: str, output_uri: str, output_path: str,
                    trainer_args: Sequence[str] = (),
                    job_name: str = "gpu_training") -> dict[str, Any]:
    """Adds the trainer container to validated worker pools.

    Every used pool runs the trainer with the same arguments (the chief trains or
    coordinates, workers train or serve, parameter servers serve, the evaluator evaluates:
    roles from the TF_CONFIG Vertex sets), except a Reduction Server pool, which keeps its
    own image. Pools with GPUs run the GPU image and are told how many GPUs each replica
    has (`--expected-gpus`: the trainer stops before training when TensorFlow sees fewer,
    instead of training on the CPUs of a machine billed for GPUs); pools without run the
    CPU image, a fraction of the size. Images are named by digest alone, as Vertex AI
    requires. Paths given to the trainer are `/gcs/` paths (Cloud Storage FUSE on Vertex),
    read with plain file APIs.

    Args:
        pools: The checked pools (None where one is unused).
        images: The build stage's images: `gpu` and `cpu`, each with its `reference`.
        dataset_path: Local (FUSE) path of the prepared dataset.
        output_uri: `gs://` URI for the job's outputs (base_output_directory).
        output_path: The same location as a local (FUSE) path.
        trainer_args: Further trainer flags (`trainer.common.schema.to_flags` of the options).
        job_name: Base of the job's display name; a date/time suffix makes it unique.

    Returns:
        `worker_pool_specs`, `base_output_directory`, `model_uri` and `display_name` for
        the CustomJob.

    Raises:
        TrainingSpecError: No images, no chief pool, or an invalid job name.
    """
    problems = validate_job_name(job_name, "job_name", reserve=JOB_NAME_SUFFIX)
    if problems:
        raise TrainingSpecError("; ".join(problems))
    missing = [key for key in ("gpu", "cpu") if not (images.get(key) or {}).get("reference")]
    if missing:
        raise TrainingSpecError(f"images has no reference for {', '.join(missing)}; a Vertex "
                                "CustomJob needs the images the build stage made")
    if not pools or not pools[0]:
        raise TrainingSpecError("worker_pool_specs has no chief pool (pool 0)")
    args = ["--job-dir", output_path, "--data-dir", dataset_path, *map(str, trainer_args)]
    specs = []
    for pool in pools:
        spec = pool.to_api() if pool else {}
        if pool and not pool.reduction_server:  # which runs Vertex AI's own image
            gpus = pool.gpus_per_machine
            image = images["gpu" if gpus else "cpu"]["reference"]
            spec["container_spec"] = {
                "image_uri": image, "command": list(TRAINER_COMMAND),
                "args": [*args, "--expected-gpus", str(gpus)] if gpus else list(args),
                # XLA's cache is kept per GPU type and image (trainer.run.xla_compile).
                "env": [{"name": IMAGE_VARIABLE, "value": image}]}
        specs.append(spec)
    base = output_uri.rstrip("/")
    return {"worker_pool_specs": specs, "base_output_directory": base,
            "model_uri": f"{base}/{MODEL_SUBDIR}", "display_name": unique_job_name(job_name)}


def _seconds(value: str) -> Any:
    from google.protobuf import duration_pb2

    return duration_pb2.Duration(seconds=int(duration_seconds(value) or 0))


def custom_job(spec: Mapping[str, Any], options: VertexOptions, scheduling: str,
               labels: Mapping[str, str] | None = None) -> Any:
    """The `aiplatform_v1.CustomJob` of `custom_job_spec`'s output, with the run's
    settings (`VertexOptions`) and a scheduling strategy; the fields gcpc's
    CustomTrainingJobOp would fill from the same values. `labels` replace
    `options.labels` (the launcher's add the run's and the step's)."""
    from google.cloud import aiplatform_v1

    from components.cloud_names import encryption_spec

    pools = [dict(p) for p in spec["worker_pool_specs"]]
    while pools and not pools[-1]:
        pools.pop()  # trailing unused pools (stage 1 refuses gaps between used ones)
    timing = {"timeout": _seconds(options.timeout),
              "restart_job_on_worker_restart": options.restart_job_on_worker_restart,
              "strategy": scheduling}
    if options.max_wait_duration and scheduling == "FLEX_START":
        timing["max_wait_duration"] = _seconds(options.max_wait_duration)
    job_spec = {"worker_pool_specs": pools, "scheduling": timing,
                "base_output_directory": {"output_uri_prefix": spec["base_output_directory"]},
                "service_account": options.training_account, "network": options.network,
                "tensorboard": options.tensorboard,
                "persistent_resource_id": options.persistent_resource_id}
    if options.psc_network_attachment:
        job_spec["psc_interface_config"] = {
            "network_attachment": options.psc_network_attachment}
    return aiplatform_v1.CustomJob(display_name=spec["display_name"], job_spec=job_spec,
                                   labels=dict(options.labels if labels is None else labels),
                                   encryption_spec=encryption_spec(options.encryption_key))
