"""The dry run's cost estimate from the newest registered model's measured speed on the
machines it trained on (end to end against the emulated Vertex AI in `test_emulated_run`);
here its arithmetic and what it says when there is nothing to estimate from."""

from __future__ import annotations

import json
import types

import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1

from components.capacity.measured_speed import seconds_per_epoch
from components.export.model_files import LINEAGE
from components.prices import shipped_table
from pipelines.vertex.clients import Clients
from pipelines.vertex.cost_estimate import NewestSpeed, estimate_lines
from tests.support.facts import figures, missing
from tests.support.launches import config
from tests.support.prices import N1_STANDARD_4

#: The figures below are computed by hand from the tests' own prices.
pytestmark = pytest.mark.usefixtures("hand_prices")

RATE = 2 * 2 * N1_STANDARD_4  # the default pools: two n1-standard-8 machines (T4s unpriced)


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
    """ModelServiceClient.list_models as Google's client answers: a pager of
    ListModelsResponse pages (one here)."""

    def __init__(self, models=(), refuse=False):
        self.models, self.refuse, self.listed = list(models), refuse, 0

    def list_models(self, request, timeout=None):
        from google.cloud.aiplatform_v1.services.model_service import pagers

        self.listed += 1
        if self.refuse:
            raise exceptions.PermissionDenied("aiplatform.models.list denied")
        return pagers.ListModelsPager(self.list_models, request,
                                      aiplatform_v1.ListModelsResponse(models=self.models))


def _model(version, uri):
    return aiplatform_v1.Model(name="projects/p/locations/us-central1/models/7",
                               version_id=version, artifact_uri=uri)


def _figures(seconds, epochs, images=1200.0):
    return {"cluster": {"train_seconds": seconds, "images_per_second": images},
            "replicas": {"chief-0": {"epochs": [{}] * epochs}, "worker-0": {"epochs": [{}]}}}


def _lineage(specs=None, images=(700, 200)):
    """A lineage record: trained on `specs` (the default pools when None)."""
    return json.dumps({"cluster": {"worker_pool_specs": specs or config().vertex.worker_pool_specs},
                       "dataset": {"counts": {"train": images[0], "validation": images[1]}}})


def _run(uri, seconds, epochs, specs=None):
    """A registered model's files: its efficiency figures and lineage."""
    return {f"{uri}/efficiency.json": json.dumps(_figures(seconds, epochs)),
            f"{uri}/{LINEAGE}": _lineage(specs)}


def test_the_newest_model_with_figures_gives_the_seconds_per_epoch():
    assert seconds_per_epoch(_figures(900.0, 3)) == 300.0
    assert seconds_per_epoch({"cluster": {}, "replicas": {}}) is None
    storage = _Storage(_run("gs://b/m2", 900.0, 3))
    models = _Models([_model("3", "gs://b/m3"), _model("2", "gs://b/m2")])  # 3 has none
    speed = NewestSpeed(config(), Clients(storage=storage, model_api=models))
    head, primary = estimate_lines(config(), speed)
    assert head == "cost estimate (without tuning trials, queueing and provisioning):"
    # The default 10 epochs at 300 s (900 s for 3 epochs): 0.83 h, by the machines' 0.87
    # USD an hour 0.73 USD; the T4s unpriced, named.
    assert figures(primary.split(" (")[1].split(":")[1])[:2] == [0.87, 0.83]
    assert not missing(primary, "300 s", "models/7@2", "0.73 USD",
                       "without a price for NVIDIA_TESLA_T4")


def test_no_measured_speed_is_said_and_never_fails_the_dry_run():
    clients = Clients(storage=_Storage({}), model_api=_Models([_model("1", "gs://b/m1")]))
    _, primary, why = estimate_lines(config(), NewestSpeed(config(), clients))
    # Without a measured speed, the hours are the most the job may run: vertex.timeout.
    assert not missing(primary, "168.00 h", "no measured speed", "vertex.timeout 604800s")
    assert not missing(why, "no measured run", "efficiency.json")
    refused = Clients(storage=_Storage({}), model_api=_Models(refuse=True))
    assert estimate_lines(config(), NewestSpeed(config(), refused))[-1].startswith(
        "  no measured run: listing the Model Registry failed: ")


def _budgeted(budget, measurements="", fallback_region="us-east1"):
    """Two configurations: the default pools (2 x n1-standard-8 with a T4, 1.57 USD an
    hour), and one T4 machine in `fallback_region` (0.57 USD an hour); the GPU benchmark's
    results under `measurements`."""
    found = config(budget_usd=budget, prices={"NVIDIA_TESLA_T4": 0.35}, fallbacks=[{
        "region": fallback_region, "worker_pool_specs": [{"machine_spec": {
            "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
            "accelerator_count": 1}, "replica_count": 1}]}])
    return found.model_copy(update={"training": found.training.model_copy(
        update={"measurements": str(measurements)})})


def test_submit_holds_the_budget_before_anything_is_created(tmp_path):
    from components.capacity.budget import BudgetError
    from pipelines.vertex import runs
    from pipelines.vertex.cost_estimate import hold_budget

    # 1 h an epoch on the default pools, as the newest model measured: its 10 epochs cost
    # 15.74 USD. The fallback's single T4, which trained no registered model, at the
    # speed the GPU benchmark measured there: 1 h an epoch too, 10 epochs 5.68 USD.
    _t4_benchmarked(tmp_path)
    storage = _Storage(_run("gs://b/m1", 10800.0, 3))
    models = _Models([_model("1", "gs://b/m1")])
    clients = Clients(storage=storage, model_api=models)
    lines = []
    unbudgeted = _budgeted(0, tmp_path)
    unread = NewestSpeed(unbudgeted, clients)
    assert hold_budget(unbudgeted, unread, lines.append) == unbudgeted  # no budget
    assert "found" not in vars(unread)  # nor a registry read
    speed = NewestSpeed(_budgeted(20.0, tmp_path), clients)
    kept = hold_budget(_budgeted(20.0, tmp_path), speed, lines.append)
    assert kept == _budgeted(20.0, tmp_path) and lines == []  # both fit
    # A dry run's estimate lines use what the budget's hold read: one registry read.
    assert "1.57 USD an hour" in estimate_lines(kept, speed)[1] and models.listed == 1
    dropped_primary = ("budget: primary dropped: about 15.74 USD passes vertex.budget_usd "
                       "6.00 USD (primary (us-central1): 1.57 USD an hour, about 10.00 h (10 "
                       "epoch(s) at 3600 s, as projects/p/locations/us-central1/models/7@1 "
                       "measured on these machines): 15.74 USD (us-central1 prices of "
                       f"{shipped_table.READ}, from the shipped table; vertex.prices over "
                       "them))")
    # The first configuration that fits is in the run's region: it becomes the primary.
    near = _budgeted(6.0, tmp_path, fallback_region="us-central1")
    fitting = hold_budget(near, NewestSpeed(near, clients), lines.append)
    assert fitting.vertex.region == "us-central1" and fitting.vertex.fallbacks == []
    assert fitting.vertex.worker_pool_specs[0]["machine_spec"]["machine_type"] == \
        "n1-standard-4"
    assert lines == [dropped_primary]
    # In another region: the run stays in its region (its pipeline, bucket, registry and
    # endpoint are there) with the primary, which its training step drops again.
    lines.clear()
    over = _budgeted(6.0, tmp_path)
    far = hold_budget(over, NewestSpeed(over, clients), lines.append)
    assert far == over and far.vertex.region == "us-central1"
    assert lines[0] == dropped_primary and len(lines) == 2
    assert not missing(lines[1], "stays in us-central1", "fallbacks[0] in us-east1")
    # Nothing fits: refused before the permissions are checked, anything uploaded or built
    # (the clients it would need next are not there).
    with pytest.raises(BudgetError) as refused:
        runs.submit(_budgeted(1.0, tmp_path), dry_run=False, clients=clients, log=lines.append)
    # One line per configuration, each with how much it passes what the budget leaves.
    first, primary, fallback, advice = str(refused.value).splitlines()
    assert first == "vertex.budget_usd is 1.00 USD and no configuration fits it:"
    assert primary.startswith("  - primary (us-central1): about ")
    assert fallback.startswith("  - fallbacks[0] (us-east1): about 5.68 USD, 4.68 USD over "
                               "the 1.00 USD the budget leaves (0.57 USD an hour, about 10.00 h")
    assert "raise the budget" in advice


def _t4_benchmarked(folder):
    """The GPU benchmark's results for a T4 in `folder`: 0.25 images/s with the cnn at
    32 px, so the newest model's 900 images an epoch take 3,600 s on one T4."""
    from components.gpu import catalog as cat
    from tests.trainer.cluster.test_measured_plan import results, write

    write(folder, "t4.json", results(cat.T4, "2026-11-28T10:00:00+00:00", (
        "float32", 0.25, {"precision": "off", "image_size": 32}), model="cnn"))


def test_a_study_gets_as_many_trials_as_the_budget_holds_beside_the_training(tmp_path):
    from components.capacity.budget import BudgetError
    from pipelines.config_loading import load_config
    from pipelines.vertex.cost_estimate import hold_budget

    storage = _Storage(_run("gs://b/m1", 10800.0, 3))
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
    # 2 trials and the training: 3 x 15.74 = 47.22 USD within 50; 4 x 15.74 would not be.
    (line,) = lines
    assert not missing(line, "tuning.max_trials", "from 8 to 2", "15.74 USD", "50.00 USD")
    assert hold_budget(tuned(200.0), speed, lines.append).tuning.max_trials == 8
    with pytest.raises(BudgetError, match="not even one trial fits beside the training"):
        hold_budget(tuned(20.0), speed, lines.append)
    # The trials train on the primary's pools in the run's region: a primary over the
    # budget, whose fallback is in another region, leaves them nowhere to train.
    _t4_benchmarked(tmp_path)
    far = load_config(overrides={"vertex": _budgeted(6.0).vertex.model_dump(), "tuning": study,
                                 "training": {"measurements": str(tmp_path)}})
    with pytest.raises(BudgetError) as refused:
        hold_budget(far, speed, lines.append)
    assert not missing(str(refused.value), "vertex.budget_usd is 6.00 USD", "primary",
                       "us-central1", "turn tuning off")
