"""`vertex.encryption_key`: refused at load when malformed or out of the run's region (a
fallback elsewhere included), and on everything the project's own code creates: the
CustomJob, the endpoint (against the fake Vertex AI under the org policy that requires a
key) and the Dataflow job. The PipelineJob, the model upload, the batch prediction job
and the whole run are in tests/pipelines/vertex/test_emulated_run.py."""

from __future__ import annotations

import pytest

from components.training.vertex_job import custom_job, custom_job_spec
from pipelines.config import ConfigError
from tests.support.launches import config, missing_images

KEY = "projects/my-proj/locations/us-central1/keyRings/ml/cryptoKeys/pipelines"


@pytest.mark.parametrize(("settings", "problem"), [
    ({"encryption_key": "projects/my-proj/keyRings/ml/cryptoKeys/k"},
     "vertex.encryption_key is 'projects/my-proj/keyRings/ml/cryptoKeys/k'; expected "
     "projects/PROJECT/locations/REGION/keyRings/RING/cryptoKeys/KEY"),
    ({"encryption_key": KEY.replace("us-central1", "europe-west4")},
     "encryption_key is in europe-west4 but region is us-central1; a customer-managed "
     "key must be in the region of the resources it encrypts: use a key in us-central1"),
    ({"encryption_key": KEY, "fallbacks": [{"region": "us-east1"}]},
     "fallbacks[0] is in us-east1 but encryption_key is in us-central1; a "
     "configuration in another region needs a key there, which a fallback cannot give: keep "
     "fallbacks in us-central1 with encryption_key set"),
])
def test_a_key_that_cannot_encrypt_the_run_is_refused_at_load(settings, problem):
    with pytest.raises(ConfigError) as refused:
        config(**settings)
    assert problem in str(refused.value)


def test_the_custom_job_and_the_dataflow_job_carry_the_key():
    from components.dataset.dataflow import dataflow_job
    from components.dataset.dataset_options import DatasetOptions

    cfg = config(encryption_key=KEY, fallbacks=[{"scheduling_strategy": "SPOT"}])
    spec = custom_job_spec(cfg.vertex.pools, missing_images(), dataset_path="/gcs/d",
                           output_uri="gs://b/job", output_path="/gcs/b/job")
    assert custom_job(spec, cfg.vertex, "STANDARD").encryption_spec.kms_key_name == KEY
    assert not custom_job(spec, config().vertex, "STANDARD").encryption_spec.kms_key_name
    job = dataflow_job(DatasetOptions(engine="beam"), project_id="my-proj",
                       region="us-central1", service_account="", sdk_image="i@sha256:0",
                       output_uri="gs://b/root/run/task/dataset", kms_key=KEY)
    assert f"--dataflow_kms_key={KEY}" in job.pipeline_args()


def test_the_endpoint_the_deploy_stage_creates_carries_the_key(apis):
    from google.cloud import aiplatform_v1

    from components.serving.vertex_endpoint import Clients, find_or_create
    from tests.support.google_fakes import rest_client

    clients = Clients(rest_client(aiplatform_v1.EndpointServiceClient, apis), None, None)
    apis.require_cmek = True  # constraints/gcp.restrictNonCmekServices
    with pytest.raises(Exception, match="restrictNonCmekServices"):
        find_or_create(clients, "my-proj", "us-central1", "plain")
    created = find_or_create(clients, "my-proj", "us-central1", "serving", encryption_key=KEY)
    assert created.encryption_spec.kms_key_name == KEY
    (sent,) = [r for r in apis.recorded(r"/endpoints$") if r.body.get("encryptionSpec")]
    assert sent.body["encryptionSpec"] == {"kmsKeyName": KEY}


ATTACHMENT = "projects/my-proj/regions/us-central1/networkAttachments/vertex"


@pytest.mark.parametrize(("settings", "problem"), [
    ({"psc_network_attachment": ATTACHMENT, "network": "projects/123/global/networks/vpc"},
     "network is 'projects/123/global/networks/vpc' and psc_network_attachment is "
     f"'{ATTACHMENT}'; a job is reached through VPC peering or a Private Service Connect "
     "interface, not both: keep one"),
    ({"psc_network_attachment": ATTACHMENT.replace("us-central1", "us-east1")},
     "psc_network_attachment is in us-east1 but region is us-central1"),
    ({"psc_network_attachment": ATTACHMENT, "fallbacks": [{"region": "europe-west4"}]},
     "fallbacks[0] is in europe-west4 but psc_network_attachment is in us-central1"),
    ({"psc_network_attachment": "projects/my-proj/global/networkAttachments/vertex"},
     "expected projects/PROJECT/regions/REGION/networkAttachments/NAME"),
])
def test_a_psc_interface_that_cannot_reach_the_run_is_refused_at_load(settings, problem):
    with pytest.raises(ConfigError) as refused:
        config(**settings)
    assert problem in str(refused.value)


def test_tuning_with_a_psc_interface_is_refused_at_load():
    from pipelines.config_loading import load_config

    with pytest.raises(ConfigError) as refused:
        load_config(overrides={
            "vertex": {"project": "my-proj", "psc_network_attachment": ATTACHMENT},
            "tuning": {"parameters": [{"name": "learning_rate", "type": "DOUBLE",
                                       "min_value": 0.001, "max_value": 0.1}]}})
    assert "the tuning job's trials cannot use a Private Service Connect interface" in \
        str(refused.value)


def test_the_pipeline_job_and_every_custom_job_get_the_psc_interface():
    from google.auth.credentials import AnonymousCredentials

    from pipelines.vertex.runs import create_request, pipeline_job
    from tests.support.paths import ROOT

    cfg = config(psc_network_attachment=ATTACHMENT, encryption_key=KEY)
    spec = custom_job_spec(cfg.vertex.pools, missing_images(), dataset_path="/gcs/d",
                           output_uri="gs://b/job", output_path="/gcs/b/job")
    job = custom_job(spec, cfg.vertex, "STANDARD")
    assert job.job_spec.psc_interface_config.network_attachment == ATTACHMENT
    assert not job.job_spec.network
    # The PipelineJob as `submit` sends it (aiplatform's PipelineJob, from the spec).
    request = create_request(pipeline_job(cfg, ROOT / "compiled" / "gpu_training_pipeline.yaml",
                                          "", AnonymousCredentials()), cfg)
    assert request.pipeline_job.psc_interface_config.network_attachment == ATTACHMENT
    assert request.pipeline_job.encryption_spec.kms_key_name == KEY
    assert not request.pipeline_job.network


def test_the_preflight_reads_whether_vertex_ai_may_use_the_key(apis):
    import requests
    from google.cloud import resourcemanager_v3

    from pipelines.vertex.clients import Clients
    from pipelines.vertex.iam import KEY_ROLE, key_access
    from tests.support.google_fakes import rest_client
    from tests.support.vertex_emulator.apis import PROJECT_NUMBER

    clients = Clients(projects=rest_client(resourcemanager_v3.ProjectsClient, apis),
                      iam=requests.Session(), iam_endpoint=apis.url, kms_endpoint=apis.url)
    cfg = config(encryption_key=KEY)
    agent = f"service-{PROJECT_NUMBER}@gcp-sa-aiplatform.iam.gserviceaccount.com"
    unreadable = key_access(cfg, clients)
    assert unreadable.startswith(f"warning: the IAM policy of {KEY} could not be read (")
    assert unreadable.endswith(f"grant {KEY_ROLE} on {KEY} to serviceAccount:{agent} (gcloud "
                               "kms keys add-iam-policy-binding)")
    apis.key_policies[KEY] = [{"role": "roles/cloudkms.viewer",
                               "members": [f"serviceAccount:{agent}"]}]
    assert key_access(cfg, clients).startswith(
        f"warning: Vertex AI's service agent {agent} has no {KEY_ROLE} on {KEY}")
    apis.key_policies[KEY].append({"role": KEY_ROLE, "members": [f"serviceAccount:{agent}"]})
    assert key_access(cfg, clients) == \
        f"CMEK: Vertex AI's service agent {agent} holds {KEY_ROLE} on {KEY}"
