"""The rollout on an emulated Vertex AI endpoint: Google's own clients (endpoints, models,
Cloud Monitoring) against the fake APIs, which refuse what Vertex AI refuses; a clock
that moves only when the rollout waits."""

from __future__ import annotations

import google.api_core.exceptions as api
import pytest
from google.cloud import aiplatform_v1, monitoring_v3

from components.serving.deploy_options import DeployOptions
from components.serving.rollout import Figures, judge, roll_out
from components.serving.vertex_endpoint import (
    Clients,
    VertexEndpoint,
    find_or_create,
    restore_champion,
)
from tests.support.google_fakes import monitoring_client, rest_client
from tests.support.vertex_emulator.apis import FakeGoogleApis
from tests.support.vertex_emulator.endpoints import Behaviour

PARENT = "projects/my-proj/locations/us-central1"
MODEL = f"{PARENT}/models/7"
RULE = DeployOptions(endpoint="serving", canary_percent=10, watch_window="600s",
                     check_interval="60s", min_requests=50, grace_period="0s")


class Clock:
    """Seconds that move by what the rollout sleeps (and the fake's series with them)."""

    def __init__(self, apis):
        self.apis, self.now, self.slept = apis, 1_800_000_000.0, []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.apis.endpoints.elapsed += seconds


@pytest.fixture
def apis(tmp_path):
    with FakeGoogleApis(tmp_path, {}) as fake:
        for version in ("1", "2"):
            fake.models.append({"model": MODEL, "version": version, "request": {"model": {}}})
        fake.set_default(MODEL, "1")
        yield fake


def _clients(apis) -> Clients:
    return Clients(rest_client(aiplatform_v1.EndpointServiceClient, apis),
                   rest_client(aiplatform_v1.ModelServiceClient, apis),
                   monitoring_client(apis))


def _serving_champion(apis, clients) -> tuple[str, str]:
    """An endpoint the user made, serving version 1 with all the traffic."""
    name = apis.endpoints.add(PARENT, "serving")
    deployed = clients.endpoints.deploy_model(
        endpoint=name, traffic_split={"0": 100}, deployed_model=aiplatform_v1.DeployedModel(
            model=f"{MODEL}@1", dedicated_resources=aiplatform_v1.DedicatedResources(
                machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-standard-4"),
                min_replica_count=1, max_replica_count=1))).result()
    return name, deployed.deployed_model.id


def _roll_out(apis, clients, rule=RULE, sleep=None):
    clock = Clock(apis)
    endpoint = find_or_create(clients, "my-proj", "us-central1", rule.endpoint)
    target = VertexEndpoint(clients, endpoint, f"{MODEL}@2", rule, "run-1", clock=clock.time)
    lines: list[str] = []
    record = roll_out(target, rule, log=lines.append, sleep=sleep or clock.sleep,
                      clock=clock.time)
    return record, lines, clients.endpoints.get_endpoint(name=endpoint.name), clock


def test_a_healthy_canary_is_promoted_and_the_old_model_undeployed(apis):
    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    apis.endpoints.behaviour[f"{MODEL}@2"] = Behaviour(100, 0.0, 42.0)
    record, lines, endpoint, clock = _roll_out(apis, clients)
    assert record.outcome == "promoted", lines
    canary = next(s["deployment"] for s in record.steps if s["step"] == "canary")
    canary_id = canary.split()[2]
    # The canary was deployed with "0" for itself and the champion's own ID, summing to 100.
    deploy = apis.recorded(r":deployModel$")[-1].body
    assert deploy["trafficSplit"] == {"0": 10, champion: 90}
    assert deploy["deployedModel"]["model"] == f"{MODEL}@2"
    assert deploy["deployedModel"]["dedicatedResources"]["machineSpec"] == {
        "machineType": "n1-standard-4"}
    # Watched for the whole window, read every minute, from Cloud Monitoring per model.
    assert clock.slept == [60.0] * 10
    reads = [r.query["filter"][0] for r in apis.recorded(r"/timeSeries$", "GET")]
    assert any(f'metric.labels.deployed_model_id="{canary_id}"' in f
               and "prediction/online/error_count" in f for f in reads)
    assert any('metric.labels.latency_type="total"' in f for f in reads)
    # 100 % to the canary, the default alias moved, then the old model undeployed by ID.
    patch = apis.recorded(rf"{name}$", "PATCH")[-1]
    assert patch.body["trafficSplit"] == {canary_id: 100, champion: 0}
    assert apis.defaults[MODEL] == "2"
    undeploy = apis.recorded(r":undeployModel$")[-1].body
    assert undeploy == {"deployedModelId": champion, "trafficSplit": {canary_id: 100}}
    assert [d.id for d in endpoint.deployed_models] == [canary_id]
    assert dict(endpoint.traffic_split) == {canary_id: 100}


@pytest.mark.slow
def test_no_step_waits_out_the_grace_period_the_next_rollout_undeploys_the_old_model(apis):
    """A promotion with a grace period keeps the old model at 0 % and records until when in
    the endpoint's labels; the step ends at once. A later rollout undeploys it only once
    the grace period is over."""
    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    apis.models.append({"model": MODEL, "version": "3", "request": {"model": {}}})
    for version in ("2", "3"):
        apis.endpoints.behaviour[f"{MODEL}@{version}"] = Behaviour(100, 0.0, 42.0)
    rule = RULE.model_copy(update={"grace_period": "3600s"})
    record, lines, endpoint, clock = _roll_out(apis, clients, rule)
    assert record.outcome == "promoted" and clock.slept == [60.0] * 10
    assert not apis.recorded(r":undeployModel$")
    until = int(clock.now) + 3600
    assert dict(endpoint.labels) == {f"gpu-pipeline-retire-{champion}": str(until)}
    assert apis.recorded(rf"{name}$", "PATCH")[-1].query["updateMask"] == ["labels"]
    assert record.steps[-1]["step"] == "old model kept"
    assert lines[-1].startswith("deploy: the old model stays at 0% until 2027-01-15T09:10:00Z ")
    assert lines[-1].endswith("(deploy.grace_period 3600s); the next run's deploy step "
                              "undeploys it after that")

    def next_rollout(at: float, version: str):
        clock = Clock(apis)
        clock.now = at
        found = find_or_create(clients, "my-proj", "us-central1", "serving")
        target = VertexEndpoint(clients, found, f"{MODEL}@{version}", RULE, "run-2",
                                clock=clock.time)
        seen: list[str] = []
        done = roll_out(target, RULE, log=seen.append, sleep=clock.sleep, clock=clock.time)
        return done, seen, clients.endpoints.get_endpoint(name=name)

    done, seen, endpoint = next_rollout(until - 10, "3")  # still in its grace period
    assert champion in [d.id for d in endpoint.deployed_models]
    assert f"gpu-pipeline-retire-{champion}" in dict(endpoint.labels)
    assert not any("grace period over" in line for line in seen)
    undeployed = [r.body for r in apis.recorded(r":undeployModel$")]
    assert all(u["deployedModelId"] != champion for u in undeployed)
    done, seen, endpoint = next_rollout(until + 10, "2")
    assert done.steps[0]["step"] == "old model undeployed"
    assert seen[0] == (f"deploy: the old model {champion} ({MODEL}@1) is undeployed, its "
                       f"grace period over since {done.steps[0]['deployment'].split()[-1]}")
    assert champion not in [d.id for d in endpoint.deployed_models]
    assert {"deployedModelId": champion} in [r.body for r in
                                             apis.recorded(r":undeployModel$")]
    assert not any(k.startswith("gpu-pipeline-retire-") and k.endswith(f"-{champion}")
                   for k in dict(endpoint.labels))


def test_a_canary_with_30_percent_errors_is_rolled_back_at_the_first_reading(apis):
    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    apis.endpoints.behaviour[f"{MODEL}@2"] = Behaviour(100, 0.3, 42.0)
    record, lines, endpoint, clock = _roll_out(apis, clients)
    assert record.outcome == "rolled back"
    assert "error rate 30.0%" in record.reason and "max_error_rate 1.0%" in record.reason
    assert clock.slept == [60.0]  # not the whole window
    canary_id = apis.recorded(r":deployModel$")[-1]
    undeploy = apis.recorded(r":undeployModel$")[-1].body
    assert undeploy["trafficSplit"] == {champion: 100}
    assert [d.id for d in endpoint.deployed_models] == [champion]
    assert dict(endpoint.traffic_split) == {champion: 100}
    assert apis.defaults[MODEL] == "1"  # the alias never moved
    assert not apis.recorded(r":mergeVersionAliases$") and canary_id


def test_a_slow_canary_is_rolled_back_and_a_quiet_one_follows_the_policy(apis):
    clients = _clients(apis)
    _serving_champion(apis, clients)
    apis.endpoints.behaviour[f"{MODEL}@1"] = Behaviour(900, 0.0, 40.0)
    apis.endpoints.behaviour[f"{MODEL}@2"] = Behaviour(100, 0.0, 400.0)
    record, *_ = _roll_out(apis, clients)
    assert record.outcome == "rolled back" and "p95 latency 0.400 s" in record.reason
    apis.endpoints.behaviour[f"{MODEL}@2"] = Behaviour(2, 0.0, 40.0)  # 20 requests in 10 min
    record, lines, *_ = _roll_out(apis, clients)
    assert record.outcome == "rolled back" and "inconclusive" in record.reason, lines
    record, *_ = _roll_out(apis, clients, RULE.model_copy(update={"inconclusive": "promote"}))
    assert record.outcome == "promoted" and apis.defaults[MODEL] == "2"


@pytest.mark.parametrize("stop", ["interrupt", "sigterm"])
@pytest.mark.slow
def test_a_rollout_stopped_mid_canary_gives_the_traffic_back(apis, stop):
    """Ctrl-C, or SIGTERM as a cancelled run's pod gets it: the canary is rolled back
    before the step ends."""
    import os
    import signal

    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    before = signal.getsignal(signal.SIGTERM)

    def stopped(seconds):
        if stop == "interrupt":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt if stop == "interrupt" else SystemExit):
        _roll_out(apis, clients, sleep=stopped)
    endpoint = clients.endpoints.get_endpoint(name=name)
    assert dict(endpoint.traffic_split) == {champion: 100}
    assert [d.id for d in endpoint.deployed_models] == [champion]
    assert signal.getsignal(signal.SIGTERM) is before  # the step's own handling, restored


def test_the_exit_handler_restores_the_champion_after_a_killed_step(apis):
    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    endpoint = clients.endpoints.get_endpoint(name=name)
    target = VertexEndpoint(clients, endpoint, f"{MODEL}@2", RULE, "run-1")
    target.deploy(10)  # and the step is killed: nothing of it runs any more
    left = clients.endpoints.get_endpoint(name=name)
    assert restore_champion(clients, left, "another-run") is None
    done = restore_champion(clients, left, "run-1")
    assert done == (f"the canary {target.canary_id} was undeployed and deployed model "
                    f"{champion} has all the traffic again")
    assert dict(clients.endpoints.get_endpoint(name=name).traffic_split) == {champion: 100}


def test_an_endpoint_named_by_display_name_is_created_once_and_served_whole(apis):
    clients = _clients(apis)
    record, lines, endpoint, _ = _roll_out(apis, clients)
    assert record.outcome == "deployed" and endpoint.display_name == "serving"
    assert list(endpoint.traffic_split.values()) == [100]
    again = find_or_create(clients, "my-proj", "us-central1", "serving")
    assert again.name == endpoint.name and len(apis.recorded(r"/endpoints$")) == 1


def test_the_fake_refuses_what_vertex_ai_refuses(apis):
    clients = _clients(apis)
    name, champion = _serving_champion(apis, clients)
    resources = aiplatform_v1.DedicatedResources(
        machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-standard-4"),
        min_replica_count=1, max_replica_count=1)
    model = aiplatform_v1.DeployedModel(model=f"{MODEL}@2", dedicated_resources=resources)
    with pytest.raises(api.BadRequest, match="add up to 100"):
        clients.endpoints.deploy_model(endpoint=name, deployed_model=model,
                                       traffic_split={"0": 10, champion: 80})
    with pytest.raises(api.BadRequest, match="not deployed models"):
        clients.endpoints.deploy_model(endpoint=name, deployed_model=model,
                                       traffic_split={"0": 10, "999": 90})
    with pytest.raises(api.BadRequest, match="dedicated_resources"):
        clients.endpoints.deploy_model(endpoint=name, traffic_split={"0": 100},
                                       deployed_model=aiplatform_v1.DeployedModel(
                                           model=f"{MODEL}@2"))
    canary = clients.endpoints.deploy_model(endpoint=name, deployed_model=model,
                                            traffic_split={"0": 10, champion: 90}).result()
    with pytest.raises(api.BadRequest, match="still has 90%"):
        clients.endpoints.undeploy_model(endpoint=name, deployed_model_id=champion).result()
    with pytest.raises(api.BadRequest, match="aligner"):
        list(clients.metrics.list_time_series(request=monitoring_v3.ListTimeSeriesRequest(
            name="projects/my-proj", filter='metric.type="aiplatform.googleapis.com/'
            'prediction/online/error_count"', interval={"end_time": {"seconds": 1}},
            aggregation={"alignment_period": {"seconds": 60},
                         "per_series_aligner": "ALIGN_PERCENTILE_95"})))
    assert canary.deployed_model.id


def test_the_rule():
    rule = DeployOptions(min_requests=100, max_error_rate=0.01, max_latency_ratio=1.5,
                         latency_slack_seconds=0.05)
    champion = Figures(1000, 1, 0.1)
    assert judge(Figures(99, 50, 0.1), champion, rule, final=False).outcome == "watching"
    assert judge(Figures(100, 2, 0.1), champion, rule, final=False).outcome == "rollback"
    assert judge(Figures(100, 1, 0.2), champion, rule, final=True).outcome == "promote"
    assert judge(Figures(100, 1, 0.21), champion, rule, final=False).outcome == "rollback"
    assert judge(Figures(99, 0, 0.1), champion, rule, final=True).outcome == "inconclusive"
    assert judge(Figures(100, 0, 9.0), None, rule, final=True).outcome == "promote"


def test_a_canary_the_serving_quota_refuses_is_not_deployed(apis):
    from google.cloud import cloudquotas_v1

    from components.serving.deploy_stage import deploy_on_vertex
    from components.vertex_options import VertexOptions

    clients = _clients(apis)
    _serving_champion(apis, clients)
    before = len(apis.recorded(r":deployModel$"))
    apis.quotas = {"custom_model_serving_nvidia_t4_gpus": {"us-central1": 1}}
    options = VertexOptions(deploy={
        **RULE.model_dump(), "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1,
        "max_replica_count": 2})
    lines: list[str] = []
    record = deploy_on_vertex("my-proj", options, f"{MODEL}@2", "run-1", lines.append,
                              clients=clients,
                              quotas=rest_client(cloudquotas_v1.CloudQuotasClient, apis))
    assert record.outcome == "not deployed"
    assert ("aiplatform.googleapis.com/custom_model_serving_nvidia_t4_gpus in us-central1: "
            "needs 2 (2 x 1 NVIDIA_TESLA_T4) but the quota allows 1") in record.reason
    assert len(apis.recorded(r":deployModel$")) == before
    assert lines == [f"deploy: not deployed; {record.reason}; the champion keeps serving"]


def test_the_canary_is_held_to_what_the_budget_leaves(apis):
    """Under `vertex.budget_usd` the deploy stage prices the canary's nodes (PREDICTION:
    prices) for its window beside what the run has cost so far: the window is shortened to
    fit, or, when not even two looks fit or the nodes have no price, the canary is skipped
    and nothing is deployed (the champion keeps serving)."""
    from google.cloud import cloudquotas_v1

    from components.serving.deploy_stage import canary_budget, deploy_on_vertex
    from components.vertex_options import VertexOptions

    rule = {**RULE.model_dump(), "watch_window": "3600s", "check_interval": "60s",
            "max_replica_count": 2, "grace_period": "0s"}

    def options(budget, grace="0s", **prices):
        return VertexOptions(budget_usd=budget, deploy={**rule, "grace_period": grace},
                             prices={f"PREDICTION:{k}": v for k, v in prices.items()})

    # No budget: the whole window, and nothing read.
    assert canary_budget(options(0.0), spent=lambda: 1 / 0) == (3600.0, "")
    # Two n1-standard-4 nodes at 0.25 USD an hour: 0.50 an hour; 0.25 USD left: 30 min.
    window, why = canary_budget(options(1.0, **{"n1-standard-4": 0.25}), spent=lambda: 0.75)
    assert window == pytest.approx(1800.0)
    assert why == ("budget: the canary's watch window shortened from 3600 s to 1800 s: "
                   "vertex.budget_usd 1.00 USD leaves 0.25 USD (the run has cost about "
                   "0.75 USD), and its nodes cost 0.50 USD an hour")
    assert canary_budget(options(10.0, **{"n1-standard-4": 0.25}), spent=lambda: 0.75) == \
        (3600.0, "")  # it fits: the whole window
    # The old model kept 15 minutes after a promotion, on the same nodes: 0.125 USD held
    # beside the window, which is 15 minutes shorter.
    window, why = canary_budget(options(1.0, "900s", **{"n1-standard-4": 0.25}),
                                spent=lambda: 0.75)
    assert window == pytest.approx(900.0)
    assert "the old model's 900 s of deploy.grace_period after a promotion 0.12 USD" in why
    # What the run cost could not be read: held against the whole budget, and said.
    window, why = canary_budget(options(0.25, **{"n1-standard-4": 0.25}), spent=lambda: None)
    assert window == pytest.approx(1800.0) and "could not be read; held against the " \
        "whole budget" in why
    # Not even two looks (120 s) fit, or no price: no canary.
    window, why = canary_budget(options(1.0, **{"n1-standard-4": 0.25}), spent=lambda: 0.99)
    assert window is None and "not even two looks (120 s) fit" in why
    window, why = canary_budget(options(1.0), spent=lambda: 0.0)
    assert window is None and why.startswith(
        "budget: no canary: no price for PREDICTION:n1-standard-4 (give it in vertex.prices)")
    # Through the stage: skipped before anything is deployed.
    clients = _clients(apis)
    _serving_champion(apis, clients)
    before = len(apis.recorded(r":deployModel$"))
    lines: list[str] = []
    record = deploy_on_vertex("my-proj", options(1.0), f"{MODEL}@2", "run-1", lines.append,
                              clients=clients,
                              quotas=rest_client(cloudquotas_v1.CloudQuotasClient, apis),
                              spent=lambda: 0.1)
    assert (record.outcome, record.reason) == ("not deployed", why.removeprefix("budget: "))
    assert len(apis.recorded(r":deployModel$")) == before and lines == [why]
