"""An account per role: the pipeline's (`vertex.service_account`), the training and tuning
jobs' (`vertex.training_service_account`), Cloud Build's (`vertex.build_service_account`)
and the Dataflow workers' (`dataset.dataflow_service_account`), each defaulting to the
pipeline's; `submit` checks that the caller may act as each."""

from __future__ import annotations

from components.training.vertex_job import custom_job, custom_job_spec
from pipelines.config_loading import load_config
from pipelines.vertex import iam
from tests.support.launches import missing_images

PIPELINE = "pipelines@my-proj.iam.gserviceaccount.com"
TRAINING = "training@my-proj.iam.gserviceaccount.com"
BUILD = "builder@my-proj.iam.gserviceaccount.com"
WORKERS = "dataflow@my-proj.iam.gserviceaccount.com"


def _config(vertex=None, dataset=None):
    return load_config(overrides={
        "vertex": {"project": "my-proj", "pipeline_root": "gs://pipelines/root",
                   "image_repository": "us-central1-docker.pkg.dev/my-proj/ml-images",
                   "service_account": PIPELINE, **(vertex or {})},
        "dataset": dataset or {}})


def _acted_as(config):
    return [c.resource.rsplit("/", 1)[-1] for c in iam.checks(config)
            if c.permissions == ("iam.serviceAccounts.actAs",)]


def test_each_role_runs_as_its_own_account_and_the_caller_must_act_as_each():
    config = _config({"training_service_account": TRAINING, "build_service_account": BUILD},
                     {"engine": "beam", "dataflow_service_account": WORKERS})
    assert _acted_as(config) == [PIPELINE, TRAINING, BUILD, WORKERS]
    spec = custom_job_spec(config.vertex.pools, missing_images(), dataset_path="/gcs/d",
                           output_uri="gs://b/job", output_path="/gcs/b/job")
    assert custom_job(spec, config.vertex, "STANDARD").job_spec.service_account == TRAINING
    assert config.vertex.build_settings().service_account == BUILD
    from components.dataset.dataflow import dataflow_job

    job = dataflow_job(config.dataset, project_id="my-proj", region="us-central1",
                       service_account=PIPELINE, sdk_image="i@sha256:0",
                       output_uri="gs://b/root/run/task/dataset")
    assert f"--service_account_email={WORKERS}" in job.pipeline_args()
    lines = iam.unchecked(config)
    assert lines[0].startswith(f"{PIPELINE} (every step): ")
    assert any(line.startswith(f"{TRAINING} (the CustomJob): roles/aiplatform.user")
               for line in lines)
    assert any(line.startswith(f"Cloud Build ({BUILD}): ") for line in lines)
    assert any(line.startswith(f"{WORKERS} (the Dataflow workers): roles/dataflow.worker")
               for line in lines)


def test_without_accounts_of_their_own_every_role_is_the_pipelines():
    config = _config()
    assert _acted_as(config) == [PIPELINE]
    spec = custom_job_spec(config.vertex.pools, missing_images(), dataset_path="/gcs/d",
                           output_uri="gs://b/job", output_path="/gcs/b/job")
    assert custom_job(spec, config.vertex, "STANDARD").job_spec.service_account == PIPELINE
    assert config.vertex.build_settings().service_account == PIPELINE
    assert iam.default_account_warnings(config) == []


def test_the_compute_engine_default_account_gets_a_warning():
    default = "123456789-compute@developer.gserviceaccount.com"
    config = _config({"training_service_account": default})
    assert iam.default_account_warnings(config) == [
        f"warning: vertex.training_service_account is {default}, the Compute Engine default "
        "service account (Editor on its project by default); Google recommends a dedicated "
        "account with the least roles for each role (docs/iam.md)"]
