"""The batch step as a KFP component: the instances a BatchPredictionJob reads (gcpc's
ModelBatchPredictOp runs the job; `pipelines.serving_stages.batch_on_vertex`)."""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def batch_instances(vertex: dict, promoted: bool, instances: Output[Dataset]) -> NamedTuple(
        "BatchJob", run=bool, uris=list, destination=str, machine_type=str,
        starting_replica_count=int, max_replica_count=int, batch_size=int,
        service_account=str):
    """The images of `vertex.batch_predict.source` as JSONL instances (`{"key", "b64"}`),
    and the BatchPredictionJob's settings; `run` is False when there is nothing to score
    (no source, or the run promoted no model)."""
    from components.serving.batch import prepare_vertex_job
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("batch predict"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        batch = options.batch_predict
        destination = prepare_vertex_job(batch, promoted, instances.path, instances.uri,
                                         log=say)
    return (bool(destination), [instances.uri] if destination else [], destination,
            batch.machine_type, batch.starting_replica_count, batch.max_replica_count,
            batch.batch_size, options.service_account)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def batch_predict_locally(vertex: dict, registry_root: str, job_name: str) -> str:
    """The batch step of a local run: `vertex.batch_predict.source` scored by the model the
    run promoted, with the serving container's predictor; returns the outcome in a line."""
    from components.serving.batch import score_local_run
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("batch predict"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        outcome = score_local_run(registry_root, options, job_name, log=say)
    return "nothing scored" if outcome is None else \
        f"{outcome['predicted']} predicted, {outcome['refused']} refused: {outcome['directory']}"
