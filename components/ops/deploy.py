"""Stage 6 as KFP components: the promoted model rolled out on the endpoint, on Vertex AI
and locally (`components.serving.deploy_stage`)."""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from google_cloud_pipeline_components.types.artifact_types import VertexModel
from kfp import dsl
from kfp.dsl import Dataset, Input

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def deploy_on_vertex_ai(project: str, vertex: dict, model: Input[VertexModel], model_uri: str,
                        job_name: str, pipeline_job: str = ""
                        ) -> NamedTuple("Deployed", outcome=str, promoted=bool):
    """Stage 6 on Vertex AI: `model` (the version just registered: its resource name,
    `projects/.../models/ID@VERSION`, is in its metadata) as a canary beside what
    `vertex.deploy.endpoint` serves, then promoted or rolled back on its measured figures;
    the rollout is written beside the exported SavedModel (`model_uri`). Under
    `vertex.budget_usd` the canary's window is what the run leaves, its steps so far read
    from `pipeline_job` (the run's resource name). Returns the outcome in one line, and
    whether the new model serves all the traffic now."""
    from components.serving.deploy_stage import deploy_on_vertex, record_beside_model
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.gcs import to_mount_path
    from trainer.common.schema import validate

    with stage_errors("deploy"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        record = deploy_on_vertex(project, options, model.metadata["resourceName"], job_name,
                                  log=say, pipeline_job=pipeline_job)
        record_beside_model(to_mount_path(model_uri), record)
    return record.summary(), record.serves_new


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def deploy_locally(vertex: dict, registry_root: str, job_name: str,
                   dataset: Input[Dataset]) -> str:
    """Stage 6 locally: the version the gate made the default, as a canary in a model
    server beside the local champion's, behind a weighted router that the test split is
    sent through; promoted (made the registry's default) or rolled back; every server
    stopped afterwards. Returns the outcome in one line."""
    from components.serving.deploy_stage import deploy_locally as roll_out_here
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("deploy"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        record = roll_out_here(registry_root, options, job_name, dataset.path, log=say)
    return record.summary() if record is not None else "not deployed"
