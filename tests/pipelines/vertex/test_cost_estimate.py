"""The dry run's cost estimate from the newest registered model's measured speed (end to
end against the emulated Vertex AI in `test_emulated_run`); here its arithmetic and what it
says when there is nothing to estimate from."""

from __future__ import annotations

import json
import types

import pytest
from google.api_core import exceptions

from components.capacity.measured_speed import seconds_per_epoch
from pipelines.vertex.clients import Clients
from pipelines.vertex.cost_estimate import NewestSpeed, estimate_lines
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
        self.models, self.refuse, self.listed = list(models), refuse, 0

    def list_models(self, request):
        self.listed += 1
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
    speed = NewestSpeed(config(), Clients(storage=storage, model_api=models))
    head, primary = estimate_lines(config(), speed)
    assert head == ("cost estimate (prices of 2026-10-07, without tuning trials, queueing "
                    "and provisioning):")
    hours = 300.0 * 10 / 3600  # the default 10 epochs
    assert primary == (f"  primary (us-central1): {RATE:.2f} USD an hour, about {hours:.2f} h "
                       "(10 epoch(s) at 300 s, as projects/p/locations/us-central1/models/7@2 "
                       f"measured): {RATE * hours:.2f} USD; without a price for "
                       "NVIDIA_TESLA_T4: give it in vertex.prices")


def test_no_measured_speed_is_said_and_never_fails_the_dry_run():
    clients = Clients(storage=_Storage({}), model_api=_Models([_model("1", "gs://b/m1")]))
    _, primary, why = estimate_lines(config(), NewestSpeed(config(), clients))
    # Without a measured speed, the hours are the most the job may run: vertex.timeout.
    assert primary.startswith(f"  primary (us-central1): {RATE:.2f} USD an hour, about "
                              "168.00 h (no measured speed: vertex.timeout 604800s, the "
                              "longest the job may run): ")
    assert why == ("  no measured speed: the first registered model carries efficiency.json, "
                   "and the next dry run estimates from it")
    refused = Clients(storage=_Storage({}), model_api=_Models(refuse=True))
    assert estimate_lines(config(), NewestSpeed(config(), refused))[-1].startswith(
        "  no measured speed: listing the Model Registry failed: ")


def _budgeted(budget, fallback_region="us-east1"):
    """Two configurations: the default pools (2 x n1-standard-8 with a T4, 1.57 USD an
    hour), and one T4 machine in `fallback_region` (0.57 USD an hour)."""
    return config(budget_usd=budget, prices={"NVIDIA_TESLA_T4": 0.35}, fallbacks=[{
        "region": fallback_region, "worker_pool_specs": [{"machine_spec": {
            "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1}, "replica_count": 1}]}])


def test_submit_holds_the_budget_before_anything_is_created():
    from components.capacity.budget import BudgetError
    from pipelines.vertex import runs
    from pipelines.vertex.cost_estimate import hold_budget

    # 1 h an epoch, as the newest model measured: the default 10 epochs cost 15.74 USD on
    # the first, 5.68 USD on the second.
    storage = _Storage({"gs://b/m1/efficiency.json": json.dumps(_figures(10800.0, 3))})
    models = _Models([_model("1", "gs://b/m1")])
    clients = Clients(storage=storage, model_api=models)
    lines = []
    unread = NewestSpeed(_budgeted(0), clients)
    assert hold_budget(_budgeted(0), unread, lines.append) == _budgeted(0)  # no budget
    assert "found" not in vars(unread)  # nor a registry read
    speed = NewestSpeed(_budgeted(20.0), clients)
    kept = hold_budget(_budgeted(20.0), speed, lines.append)
    assert kept == _budgeted(20.0) and lines == []  # both fit
    # A dry run's estimate lines use what the budget's hold read: one registry read.
    assert "1.57 USD an hour" in estimate_lines(kept, speed)[1] and models.listed == 1
    dropped_primary = ("budget: primary dropped: about 15.74 USD passes vertex.budget_usd "
                       "6.00 USD (primary (us-central1): 1.57 USD an hour, about 10.00 h (10 "
                       "epoch(s) at 3600 s, as projects/p/locations/us-central1/models/7@1 "
                       "measured): 15.74 USD)")
    # The first configuration that fits is in the run's region: it becomes the primary.
    near = _budgeted(6.0, fallback_region="us-central1")
    fitting = hold_budget(near, NewestSpeed(near, clients), lines.append)
    assert fitting.vertex.region == "us-central1" and fitting.vertex.fallbacks == []
    assert fitting.vertex.worker_pool_specs[0]["machine_spec"]["machine_type"] == \
        "n1-standard-4"
    assert lines == [dropped_primary]
    # In another region: the run stays in its region (its pipeline, bucket, registry and
    # endpoint are there) with the primary, which its training step drops again.
    lines.clear()
    far = hold_budget(_budgeted(6.0), NewestSpeed(_budgeted(6.0), clients), lines.append)
    assert far == _budgeted(6.0) and far.vertex.region == "us-central1"
    assert lines == [dropped_primary, (
        "budget: the run stays in us-central1 (vertex.region: its pipeline, bucket, Model "
        "Registry and endpoint are there); its training step drops the primary again and "
        "starts with fallbacks[0] in us-east1")]
    # Nothing fits: refused before the permissions are checked, anything uploaded or built
    # (the clients it would need next are not there).
    with pytest.raises(BudgetError) as refused:
        runs.submit(_budgeted(1.0), dry_run=False, clients=clients, log=lines.append)
    assert str(refused.value).startswith("vertex.budget_usd is 1.00 USD and no "
                                         "configuration fits it: primary (us-central1): ")
    assert "fallbacks[0] (us-east1): 0.57 USD an hour, about 10.00 h" in str(refused.value)


def test_a_study_gets_as_many_trials_as_the_budget_holds_beside_the_training():
    from components.capacity.budget import BudgetError
    from pipelines.config_loading import load_config
    from pipelines.vertex.cost_estimate import hold_budget

    storage = _Storage({"gs://b/m1/efficiency.json": json.dumps(_figures(10800.0, 3))})
    speed = NewestSpeed(config(), Clients(storage=storage,
                                          model_api=_Models([_model("1", "gs://b/m1")])))
    study = {"max_trials": 8, "parallel_trials": 4, "max_failed_trials": 5, "parameters": [
        {"name": "learning_rate", "type": "DOUBLE", "min_value": 0.001, "max_value": 0.1}]}

    def tuned(budget):
        vertex = _budgeted(budget).vertex.model_dump()
        return load_config(overrides={"vertex": {**vertex, "fallbacks": []}, "tuning": study})

    # Each trial trains as the primary does (15.74 USD); 50 USD hold the training after the
    # study and two trials.
    lines = []
    bounded = hold_budget(tuned(50.0), speed, lines.append)
    assert (bounded.tuning.max_trials, bounded.tuning.parallel_trials,
            bounded.tuning.max_failed_trials) == (2, 2, 2)
    assert lines == ["budget: tuning.max_trials lowered from 8 to 2: each trial trains as the "
                     "primary does, about 15.74 USD, and the training after the study as "
                     "much; 3 x 15.74 USD fit vertex.budget_usd 50.00 USD"]
    assert hold_budget(tuned(200.0), speed, lines.append).tuning.max_trials == 8
    with pytest.raises(BudgetError, match="not even one trial fits beside the training"):
        hold_budget(tuned(20.0), speed, lines.append)
    # The trials train on the primary's pools in the run's region: a primary over the
    # budget, whose fallback is in another region, leaves them nowhere to train.
    far = load_config(overrides={"vertex": _budgeted(6.0).vertex.model_dump(), "tuning": study})
    with pytest.raises(BudgetError) as refused:
        hold_budget(far, speed, lines.append)
    assert str(refused.value).startswith(
        "vertex.budget_usd is 6.00 USD and the primary passes it (primary (us-central1): ")
    assert str(refused.value).endswith(
        "a study's trials train as the primary does, in the run's region (us-central1): "
        "raise the budget, lower the epochs or vertex.timeout, put a configuration that "
        "fits in that region first, or turn tuning off")
