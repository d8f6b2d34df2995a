"""The dry run's cost estimate from the newest registered model's measured speed (end to
end against the emulated Vertex AI in `test_emulated_run`); here its arithmetic and what it
says when there is nothing to estimate from."""

from __future__ import annotations

import json
import types

from google.api_core import exceptions

from pipelines.vertex.clients import Clients
from pipelines.vertex.cost_estimate import estimate_lines, seconds_per_epoch
from tests.support.launches import config

RATE = 2 * 2 * 0.21849885  # the default pools: two n1-standard-8 machines (T4s unpriced)


class _Storage:
    def __init__(self, objects):
        self.objects = objects

    def bucket(self, bucket):
        objects = self.objects

        class Blob:
            def __init__(self, path):
                self.key = f"gs://{bucket}/{path}"

            def exists(self):
                return self.key in objects

            def download_as_text(self):
                return objects[self.key]
        return types.SimpleNamespace(blob=Blob)


class _Models:
    def __init__(self, models=(), refuse=False):
        self.models, self.refuse = list(models), refuse

    def list_models(self, request):
        if self.refuse:
            raise exceptions.PermissionDenied("aiplatform.models.list denied")
        return self.models


def _model(version, uri):
    return types.SimpleNamespace(name="projects/p/locations/us-central1/models/7",
                                 version_id=version, artifact_uri=uri)


def _figures(seconds, epochs, images=1200.0):
    return {"cluster": {"train_seconds": seconds, "images_per_second": images},
            "replicas": {"chief-0": {"epochs": [{}] * epochs}, "worker-0": {"epochs": [{}]}}}


def test_the_newest_model_with_figures_gives_the_seconds_per_epoch():
    assert seconds_per_epoch(_figures(900.0, 3)) == 300.0
    assert seconds_per_epoch({"cluster": {}, "replicas": {}}) is None
    storage = _Storage({"gs://b/m2/efficiency.json": json.dumps(_figures(900.0, 3))})
    models = _Models([_model("3", "gs://b/m3"), _model("2", "gs://b/m2")])  # 3 has none
    head, estimate = estimate_lines(config(), Clients(storage=storage, model_api=models))
    assert head == (f"cost estimate: the primary configuration's machines cost {RATE:.2f} USD "
                    "an hour (prices of 2026-10-07; without a price for NVIDIA_TESLA_T4: "
                    "give it in vertex.prices)")
    hours = 300.0 * 10 / 3600  # the default 10 epochs
    assert estimate == (f"  10 epoch(s) at 300 s each, as projects/p/locations/us-central1/"
                        f"models/7@2 measured (1200 images/s on its cluster): about "
                        f"{hours:.2f} h, {RATE * hours:.2f} USD (without tuning trials, "
                        "queueing and provisioning)")


def test_no_measured_speed_is_said_and_never_fails_the_dry_run():
    clients = Clients(storage=_Storage({}), model_api=_Models([_model("1", "gs://b/m1")]))
    assert estimate_lines(config(), clients)[1].startswith("  no measured speed yet: ")
    refused = Clients(storage=_Storage({}), model_api=_Models(refuse=True))
    assert estimate_lines(config(), refused)[1].startswith(
        "  no measured speed: listing the Model Registry failed: ")
