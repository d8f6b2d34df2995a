"""An emulated Vertex AI on loopback for the tests that run the compiled spec end to end
(`tests/pipelines/vertex/test_emulated_*.py`): Cloud Storage's emulator, the fake Google
APIs and Dataflow, and `emulated_vertex`, which submits a run with `submit`'s own code and
runs its request's spec task by task. Each test module starts its own (a module fixture),
so that `make test`'s processes run the modules side by side."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from pathlib import Path
from unittest import mock

import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import (
    aiplatform_v1,
    artifactregistry_v1,
    billing_v1,
    cloudquotas_v1,
    resourcemanager_v3,
)
from google.cloud.devtools import cloudbuild_v1
from google.oauth2.credentials import Credentials

from components import images
from pipelines.config_loading import load_config
from pipelines.vertex import runs
from pipelines.vertex.clients import Clients
from tests.support.billing_catalog import FAMILIES, GPUS
from tests.support.dataflow_fake import FakeDataflow
from tests.support.google_fakes import RecordingApi
from tests.support.paths import ROOT
from tests.support.vertex_emulator.apis import PROJECT_NUMBER, FakeGoogleApis, image_entrypoints
from tests.support.vertex_emulator.mount import StandInMount
from tests.support.vertex_emulator.pipelines import EmulatedPipelines, TaskFailed, environment

REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
ACCOUNT = "trainer@my-proj.iam.gserviceaccount.com"
KEY = "projects/my-proj/locations/us-central1/keyRings/ml/cryptoKeys/pipelines"
# The fake price catalog's us-central1 prices (`tests.support.billing_catalog`), which the
# run reads with Google's client: an n1-standard-8 (8 vCPUs, 30 GB), a T4, the pipeline's
# default step machine e2-standard-4 (4 vCPUs, 16 GB), and an n1-standard-4 prediction node.
N1_CORE, N1_RAM = FAMILIES["N1 Predefined"]
N1_8 = 8 * N1_CORE + 30 * N1_RAM
T4_USD = GPUS["NVIDIA_TESLA_T4"][1]
E2_4 = 4 * FAMILIES["E2"][0] + 16 * FAMILIES["E2"][1]
PREDICTION_N1_4 = (4 * N1_CORE + 15 * N1_RAM) * 1.05
CATALOG_PRICES = r"us-central1 prices of [0-9-]+, from the Cloud Billing Catalog API"
# The first run's Vertex AI TensorBoard (its Experiments run's curves go there).
TENSORBOARD = "projects/my-proj/locations/us-central1/tensorboards/4711"
STORE = "projects/my-proj/locations/us-central1/metadataStores/default"
BIN = Path(sys.executable).parent / "gpu-pipeline"


@contextlib.contextmanager
def _storage_emulator():
    """The Cloud Storage emulator on loopback, owned by the emulated project, with this
    process's client pointed at it; yields (its URL, the client)."""
    from gcp_storage_emulator.server import create_server

    from tests.support.vertex_emulator.apis import PROJECT_NUMBER, _free_ports
    from trainer.common import gcs

    (port,) = _free_ports(1)
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=None,
                           project_number=PROJECT_NUMBER)
    server.start()
    storage_host = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")}
    os.environ.update(STORAGE_EMULATOR_HOST=storage_host, GOOGLE_CLOUD_PROJECT="my-proj")
    gcs.reset_client()
    try:
        yield storage_host, gcs.storage_client()
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        gcs.reset_client()


def in_region(bucket, region: str):
    """`bucket` in `region`: the storage emulator creates every bucket in the US
    multi-region and takes a location only from a patch."""
    bucket._patch_property("location", region.upper())
    bucket.patch()
    return bucket


@contextlib.contextmanager
def emulated_vertex(work: Path):
    """An emulated Vertex AI on loopback; yields `run(vertex, training)`, which submits a
    small run with the real Vertex path and runs it there (one Model Registry throughout)."""
    with _storage_emulator() as (storage_host, storage):
        in_region(storage.create_bucket("pipelines"), "us-central1")
        mount = StandInMount(work / "gcs", storage)
        apis = FakeGoogleApis(work, image_entrypoints(REPO, ROOT), checkout=ROOT)
        apis.bucket_location = lambda name: getattr(storage.lookup_bucket(name), "location",
                                                    None)
        # The project's custom-training quotas, as Cloud Quotas reports them.
        apis.quotas = {"custom_model_training_nvidia_t4_gpus": {"us-central1": 8},
                       "custom_model_training_nvidia_l4_gpus": {"us-central1": 4},
                       "custom_model_training_cpus": {"us-central1": 64}}
        # `PipelineJob.submit` checks that the pipeline root's bucket belongs to the
        # project with its own Resource Manager client (gcs_utils._verify_bucket_ownership);
        # here it asks the fake instead of the unreachable API (39 s of retries).
        projects = functools.partial(resourcemanager_v3.ProjectsClient, transport="rest",
                                     client_options={"api_endpoint": apis.url})
        # The fake Dataflow runs a job's pipeline in this process, whose Cloud Storage
        # client then needs credentials that need no account.
        with apis, FakeDataflow("run") as dataflow, mock.patch(
                "google.auth.default", lambda *a, **k: (Credentials(token="t"), "my-proj")), \
                mock.patch("google.cloud.aiplatform.utils.resource_manager_utils."
                           "resourcemanager.ProjectsClient", projects):
            env = environment(apis.url, mount, storage_host, "my-proj")
            env["EMULATED_DATAFLOW"] = dataflow.endpoint
            env["EMULATED_MONITORING"] = apis.start_monitoring()
            (work / "tmp").mkdir()
            env["TMPDIR"] = str(work / "tmp")
            apis.environment = env
            clients = _clients(storage, apis.url)

            def run(vertex: dict, training: dict, tuning: dict | None = None,
                    dataset: dict | None = None, faults: tuple[str, ...] = (),
                    kill_when: dict | None = None, fails: bool = False,
                    cmek: bool = False) -> dict:
                config = load_config(overrides={
                    "vertex": {"project": "my-proj", "region": "us-central1",
                               "pipeline_root": "gs://pipelines/root",
                               "image_repository": REPO, "service_account": ACCOUNT,
                               "accuracy_threshold": 0.3, "job_name": "emulated", **vertex},
                    "training": training, "tuning": tuning or {}, "dataset": dataset or {}})
                # The org policy that refuses every create without a key, for this run.
                apis.require_cmek = clients.pipeline_api.require_cmek = cmek
                dataflow.require_cmek = cmek
                try:
                    runs.submit(config, dry_run=False, clients=clients,
                                credentials=AnonymousCredentials(), log=lambda line: None)
                except Exception:
                    apis.require_cmek = clients.pipeline_api.require_cmek = False
                    dataflow.require_cmek = False
                    raise
                request = clients.pipeline_api.calls[-1]
                apis.get_faults = list(faults)  # what the training step's looks meet
                started = time.monotonic()
                emulated = EmulatedPipelines(work / f"run{len(clients.pipeline_api.calls)}",
                                             mount, env, image_problem=apis.image_problem,
                                             kill_when=kill_when, published=apis.pipeline_jobs,
                                             metadata=apis.metadata)
                failure = ""
                try:
                    tasks = emulated.run(request)
                except TaskFailed as exc:
                    if not fails:
                        raise
                    tasks, failure = emulated.tasks, str(exc)
                finally:
                    apis.require_cmek = clients.pipeline_api.require_cmek = False
                    dataflow.require_cmek = False
                return {"tasks": tasks, "failure": failure, "pipelines": emulated, "apis": apis,
                        "request": request, "mount": mount,
                        "storage": storage, "env": env, "work": work, "clients": clients,
                        "dataflow": dataflow, "seconds": time.monotonic() - started}

            run.storage, run.apis = storage, apis
            yield run


def _clients(storage, url: str) -> Clients:
    """`submit`'s clients, every Google API but Vertex AI's pointed at the fakes at `url`
    (the pipeline request is recorded)."""
    endpoint = {"api_endpoint": url}
    return Clients(
        storage=storage,
        build=cloudbuild_v1.CloudBuildClient(transport="rest", client_options=endpoint,
                                             credentials=AnonymousCredentials()),
        registry=artifactregistry_v1.ArtifactRegistryClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        pipeline_api=RecordingApi(),
        projects=resourcemanager_v3.ProjectsClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        iam=requests.Session(), iam_endpoint=url, kms_endpoint=url,
        compute=requests.Session(), compute_endpoint=url,
        quotas=cloudquotas_v1.CloudQuotasClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        jobs=aiplatform_v1.JobServiceClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        persistent=aiplatform_v1.PersistentResourceServiceClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        model_api=aiplatform_v1.ModelServiceClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()),
        billing=lambda: billing_v1.CloudCatalogClient(
            transport="rest", client_options=endpoint, credentials=AnonymousCredentials()))


LABELS = {"team": "vision", "cost-center": "ml-42"}


def built(apis, image) -> str:
    """The reference of a project image the fake Cloud Build pushed: by digest alone."""
    (tag_name,) = [t for t in apis.tags if f"/packages/{image.name}/tags/" in t]
    return images.reference(REPO, image, apis.tags[tag_name].rsplit("/", 1)[1])


def allow_key(apis) -> None:
    """The run's customer-managed key, usable by Vertex AI's service agent (under the org
    policy that requires one on every create)."""
    apis.key_policies[KEY] = [{
        "role": "roles/cloudkms.cryptoKeyEncrypterDecrypter",
        "members": [f"serviceAccount:service-{PROJECT_NUMBER}@gcp-sa-aiplatform.iam."
                    "gserviceaccount.com"]}]
