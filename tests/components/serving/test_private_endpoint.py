"""A Private Service Connect endpoint: created by the deploy stage with its project
allowlist, and `predict --config` through its PSC address, against Google's clients and
the fake APIs on loopback, where such an endpoint does not answer on Vertex AI's host."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
from google.cloud import aiplatform_v1

from components.serving import online
from components.serving.deploy_options import DeployOptions
from components.serving.vertex_endpoint import Clients, EndpointError, find_or_create
from pipelines.config_loading import ConfigError, load_config
from tests.support.google_fakes import rest_client
from tests.support.paths import ROOT
from trainer.common.errors import InputError

PARENT = "projects/my-proj/locations/us-central1"
PRIVATE = {"project_allowlist": ["my-proj", "client-prj"]}


class Container:
    """The serving container's answers, without loading a model (the container itself is
    tested with the registered model in the emulated run)."""

    def answer(self, body):
        return {"predictions": [{"class_name": "cat", "class_index": 0,
                                 "probabilities": [0.9, 0.1]} for _ in body["instances"]]}


def serving(apis) -> tuple[str, str]:
    """A PSC endpoint the deploy stage created, serving a model; (its name, its model)."""
    endpoints = rest_client(aiplatform_v1.EndpointServiceClient, apis)
    created = find_or_create(Clients(endpoints, None, None), "my-proj", "us-central1",
                             "private", private=DeployOptions(
                                 private_service_connect=PRIVATE).private_service_connect)
    model = f"{PARENT}/models/7"  # registered (the emulated run uploads real ones)
    apis.models.append({"model": model, "version": "1", "request": {"model": {
        "artifactUri": "gs://b/m"}}})
    apis.endpoints.serve(created.name, f"{model}@1")
    apis.endpoints._predictors[f"{model}@1"] = Container()
    return created.name, model


def test_the_deploy_stage_creates_a_psc_endpoint_with_its_allowlist(apis):
    endpoints = rest_client(aiplatform_v1.EndpointServiceClient, apis)
    name, _ = serving(apis)
    (sent,) = [r.body for r in apis.recorded(r"/endpoints$") if r.method == "POST"]
    assert sent["privateServiceConnectConfig"] == {
        "enablePrivateServiceConnect": True, "projectAllowlist": ["my-proj", "client-prj"]}
    read = endpoints.get_endpoint(name=name)
    assert read.private_service_connect_config.service_attachment.startswith("projects/tenant-")
    # Found again by its name: no second endpoint.
    private = DeployOptions(private_service_connect=PRIVATE).private_service_connect
    again = find_or_create(Clients(endpoints, None, None), "my-proj", "us-central1", "private",
                           private=private)
    assert again.name == name and len(apis.endpoints.endpoints) == 1
    # A public endpoint cannot become a private one.
    public = apis.endpoints.add(PARENT, "public")
    with pytest.raises(EndpointError, match="is public, and an endpoint's Private Service "
                                            "Connect setting is fixed when it is created"):
        find_or_create(Clients(endpoints, None, None), "my-proj", "us-central1", public,
                       private=private)


def test_predictions_come_through_the_psc_address_not_vertex_ai_s_host(apis):
    name, model = serving(apis)
    port = apis.url.rsplit(":", 1)[1]
    apis.endpoints.psc_addresses[f"localhost:{port}"] = name  # the user's forwarding rule
    models = rest_client(aiplatform_v1.ModelServiceClient, apis)
    with pytest.raises(InputError, match="is a Private Service Connect endpoint"):
        online.predict(name, "us-central1", [b"png"], models=models,
                       client=rest_client(aiplatform_v1.PredictionServiceClient, apis))
    answer = online.predict(name, "us-central1", [b"png", b"png"], models=models,
                            address=f"http://localhost:{port}", session=requests.Session())
    assert (answer.model, len(answer.predictions)) == (f"{model}@1", 2)
    request = apis.recorded(r":predict$")[-1]
    assert request.path == f"/v1/{name}:predict"
    assert request.body == {"instances": [{"b64": "cG5n"}, {"b64": "cG5n"}]}
    # A PSC address that reaches another endpoint finds nothing.
    other = apis.endpoints.add(PARENT, "other")
    with pytest.raises(online.EndpointNotFound):
        online.predict(other, "us-central1", [b"png"], models=models,
                       address=f"http://localhost:{port}", session=requests.Session())


@pytest.mark.slow
def test_predict_config_sends_through_the_psc_address(apis, tmp_path):
    name, model = serving(apis)
    port = apis.url.rsplit(":", 1)[1]
    apis.endpoints.psc_addresses[f"localhost:{port}"] = name
    (tmp_path / "cat.png").write_bytes(b"png")
    config = ("vertex:\n  project: my-proj\n  region: us-central1\n  deploy:\n"
              "    endpoint: private\n    private_service_connect:\n"
              f"      project_allowlist: [my-proj]\n      address: http://localhost:{port}\n")
    (tmp_path / "config.yaml").write_text(config)
    site = ROOT / "tests/support/vertex_emulator/site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "EMULATED_GOOGLE_APIS": apis.url, "EMULATED_GCS_MOUNT": str(tmp_path / "gcs"),
           "GOOGLE_CLOUD_PROJECT": "my-proj", "no_proxy": "*"}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "cat.png",
                           "--config", "config.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[:2] == [
        f"{name}: deployed model {apis.endpoints.endpoints[name]['deployedModels'][0]['id']} "
        f"({model}@1)", "cat.png: class 0 0.900, class 1 0.100"]
    assert apis.recorded(r":predict$")[-1].host == ""  # not through Vertex AI's host
    # The dry run shows where it would go; without the address, a clear refusal.
    dry = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "cat.png",
                          "--config", "config.yaml", "--dry-run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert dry.stdout.startswith(f"POST http://localhost:{port}/v1/projects/my-proj/locations/"
                                 "us-central1/endpoints/<the ID of the endpoint named 'private'>"
                                 ":predict (the endpoint's Private Service Connect address)")
    (tmp_path / "config.yaml").write_text(config.replace(f"http://localhost:{port}", "''"))
    refused = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "cat.png",
                              "--config", "config.yaml"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "set its address (the IP address or DNS name of the forwarding rule" in \
        refused.stderr


@pytest.mark.parametrize("psc, expected", [
    ({"address": "10.0.0.5"}, "project_allowlist is empty"),
    ({"project_allowlist": ["Not A Project"]}, "a project ID"),
    ({"project_allowlist": ["p-123456"], "address": "10.0.0.5/x"}, "an IP address or DNS")])
def test_malformed_psc_settings_are_refused_at_load(psc, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(overrides={"vertex": {"deploy": {"endpoint": "e",
                                                     "private_service_connect": psc}}})
