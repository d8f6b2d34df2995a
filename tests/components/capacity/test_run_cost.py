"""The run's itemised cost (`components.capacity.run_cost`) from resources as Vertex AI
returns them (REST field names): what is billed, at which price, and what is named as
unpriced or not counted."""

from __future__ import annotations

import pytest

from components.capacity import cost_item, pipeline_job_cost, run_cost
from components.prices.price_list import PriceBook
from tests.support.prices import N1_STANDARD_4

#: The figures below are computed by hand from the tests' own prices.
pytestmark = pytest.mark.usefixtures("hand_prices")

T4_POOLS = [{"machineSpec": {"machineType": "n1-standard-8", "acceleratorType":
                             "NVIDIA_TESLA_T4", "acceleratorCount": 1}, "replicaCount": "2"}]


def _job(name, state, seconds, pools=T4_POOLS):
    return {"name": name, "state": state, "startTime": "2026-11-27T10:00:00Z",
            "endTime": f"2026-11-27T10:{seconds // 60:02d}:{seconds % 60:02d}Z",
            "jobSpec": {"workerPoolSpecs": pools}}


def test_every_resource_is_priced_for_its_billed_time_and_the_rest_is_named():
    prices = PriceBook({"NVIDIA_TESLA_T4": 0.35, "PREDICTION:n1-standard-4": 0.25})
    study = {"name": "studies/1", "trialJobSpec": {"workerPoolSpecs": T4_POOLS},
             "trials": [{"state": "SUCCEEDED", "startTime": "2026-11-27T09:00:00Z",
                         "endTime": "2026-11-27T09:30:00Z"},
                        {"state": "INFEASIBLE", "startTime": "2026-11-27T09:30:00Z",
                         "endTime": "2026-11-27T09:40:00Z"}]}
    batch = {"name": "batch/5000", "state": "JOB_STATE_SUCCEEDED",
             "startTime": "2026-11-27T11:00:00Z", "endTime": "2026-11-27T11:06:00Z",
             "dedicatedResources": {"machineSpec": {"machineType": "n1-standard-4"},
                                    "startingReplicaCount": 1, "maxReplicaCount": 3}}
    cost = run_cost.itemise(
        training=[_job("jobs/1", "JOB_STATE_FAILED", 600), _job("jobs/2", "JOB_STATE_SUCCEEDED",
                                                                 1800)],
        studies=[study], batch=[batch], book=prices)
    rate = 2 * (2 * N1_STANDARD_4 + 0.35)  # two n1-standard-8 with a T4 each
    failed, trained, tuning, scored, fee = cost["items"]
    assert (failed["usd"], failed["basis"]) == (0.0, "failed, not billed")
    assert trained["usd"] == pytest.approx(rate / 2, abs=1e-4) and trained["hours"] == 0.5
    # The infeasible trial is not billed: half an hour of trials.
    assert (tuning["usd"], tuning["basis"]) == (pytest.approx(rate / 2, abs=1e-4),
                                                "1 billed trial(s) of 2")
    # Batch prediction at its most nodes (3) for its 6 minutes, at the prediction price.
    assert scored["usd"] == pytest.approx(3 * 0.25 * 0.1) and scored["unpriced"] == []
    assert fee["usd"] == run_cost.PIPELINE_RUN_USD
    assert cost["usd"] == pytest.approx(rate + 0.075 + 0.03, abs=1e-3)
    assert cost["by_kind"]["training"] == trained["usd"]
    said = run_cost.line(cost)
    assert said.startswith(f"cost: about {cost['usd']:.2f} USD (training ")
    assert "; not counted: the champion's own serving nodes" in said
    # Without a prediction price, the batch job is named, never taken as free.
    unpriced = run_cost.itemise(training=[], studies=[], batch=[batch], book=PriceBook())
    assert unpriced["unpriced"] == ["PREDICTION:n1-standard-4"]
    assert "without a price for PREDICTION:n1-standard-4: give it in vertex.prices" in \
        run_cost.line(unpriced)


def test_a_canary_and_the_old_model_kept_are_billed_for_their_time_on_the_rule_s_nodes():
    from components.serving.deploy_options import DeployOptions

    nodes = DeployOptions(machine_type="n1-standard-4", max_replica_count=2).nodes()
    promoted = {"steps": [{"step": "canary", "at": "2026-11-27T10:00:00Z"},
                          {"step": "check", "at": "2026-11-27T10:10:00Z"},
                          {"step": "promoted", "at": "2026-11-27T10:30:00Z"},
                          {"step": "old model kept", "at": "2026-11-27T10:30:00Z",
                           "until": "2026-11-27T11:30:00Z"}]}
    rolled_back = {"steps": [{"step": "canary", "at": "2026-11-27T12:00:00Z"},
                             {"step": "rolled back", "at": "2026-11-27T12:06:00Z"}]}
    killed = {"steps": [{"step": "canary", "at": "2026-11-27T13:00:00Z"}]}  # no end: left out
    prices = PriceBook({"PREDICTION:n1-standard-4": 0.25}).region("us-central1")
    canary, grace, back = run_cost.rollout_items(
        [("m@2", promoted), ("m@3", rolled_back), ("m@4", killed)], nodes, prices)
    # Two nodes at 0.25 USD an hour: half an hour of canary, an hour kept, 6 minutes.
    assert (canary.kind, canary.usd) == ("canary", pytest.approx(0.25))
    assert grace.kind == "grace period" and grace.usd == pytest.approx(0.5)
    assert grace.basis.startswith("2 x n1-standard-4 node(s) at 0% until 2026-11-27T11:30:00Z")
    assert (back.name, back.usd, back.basis) == (
        "m@3's canary", pytest.approx(0.05), "2 x n1-standard-4 node(s) from its deployment "
        "until rolled back")
    # Unpriced, they are named.
    (alone,) = run_cost.rollout_items([("m@3", rolled_back)], nodes,
                                         PriceBook().region("us-central1"))
    assert (alone.usd, alone.unpriced) == (0.0, ["PREDICTION:n1-standard-4"])


def _step(name, start, end, container=True):
    detail = {"containerDetail": {"mainJob": f"jobs/{name}"}} if container else {}
    return {"taskName": name, "startTime": start, **({"endTime": end} if end else {}),
            "executorDetail": detail}


def test_the_pipeline_s_own_steps_are_billed_on_their_machines_while_they_ran():
    """Each container task of the run (GetPipelineJob) from its start to its end, on the
    machine Vertex AI Pipelines gives a step; a DAG or importer task has no machine, and
    the summary's own step, still running, is not counted."""
    job = {"name": "projects/p/locations/us-central1/pipelineJobs/run-1", "jobDetail": {
        "taskDetails": [
            _step("prepare-dataset", "2026-11-27T10:00:00Z", "2026-11-27T10:06:00Z"),
            _step("exit-handler-1", "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z",
                  container=False),
            _step("train", "2026-11-27T10:06:00Z", "2026-11-27T10:30:00Z"),
            _step("summarize-run", "2026-11-27T10:31:00Z", "")]}}
    assert pipeline_job_cost.STEP_MACHINE == "e2-standard-4"  # Vertex AI Pipelines' default
    priced_steps = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job,
                                    book=PriceBook({"e2-standard-4": 0.2}))
    steps, fee = priced_steps["items"]
    assert (steps["kind"], steps["name"], steps["hours"]) == (
        "pipeline steps", job["name"], 0.5)
    assert steps["usd"] == pytest.approx(0.1) and steps["unpriced"] == []
    assert steps["basis"] == ("2 step(s) on e2-standard-4 machines (2 on e2-standard-4, "
                              "Vertex AI Pipelines' default: their jobs were not read), each "
                              "from its start to its end; 1 still running (the step reading "
                              "the run among them), not counted")
    # Each step on the machine of the job it ran as, where that job can be read.
    machines = {"jobs/prepare-dataset": "e2-standard-8"}
    read = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job,
                            book=PriceBook({"e2-standard-4": 0.2, "e2-standard-8": 0.4}),
                            machine_of=lambda name: machines.get(name, ""))
    (steps_read, _) = read["items"]
    # prepare-dataset's 6 minutes on an e2-standard-8, train's 24 on an e2-standard-4.
    assert steps_read["usd"] == pytest.approx(0.1 * 0.4 + 0.4 * 0.2)
    assert steps_read["basis"].startswith("2 step(s) on e2-standard-8, e2-standard-4 machines "
                                          "(1 on e2-standard-4, Vertex AI Pipelines' default")
    assert priced_steps["usd"] == pytest.approx(0.1 + run_cost.PIPELINE_RUN_USD)
    # Without a price for the step machine, the steps are named, never taken as free.
    unpriced = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job,
                                book=PriceBook())
    assert unpriced["items"][0]["usd"] == 0.0 and unpriced["unpriced"] == ["e2-standard-4"]
    # No run read (a summary that could not name it): no step item.
    assert [i["kind"] for i in run_cost.itemise(training=[], studies=[], batch=[],
                                                book=PriceBook())["items"]] == ["pipeline"]


def test_the_dataflow_job_is_priced_by_what_it_reported_using():
    """The dataset stage's Dataflow job, from the usage its output's metadata records (as
    GetPipelineJob returns a task's outputs): its vCPU, memory and disk hours at the
    `DATAFLOW:` prices given; a total without a price is named, a usage the stage could
    not read is said."""
    usage = {"job": "2026-11-27_1", "region": "us-central1", "machine_type": "n2-standard-4",
             "vcpu_hours": 2.0, "memory_gb_hours": 8.0, "disk_gb_hours": 12.5,
             "ssd_gb_hours": 0.0, "start_time": "2026-11-27T10:00:00Z",
             "end_time": "2026-11-27T10:30:00Z"}
    dataset = {"outputs": {"dataset": {"artifacts": [{"uri": "gs://b/d", "metadata": {
        "classes": ["a"], "dataflow_job": usage}}]}}}
    job = {"name": "run", "jobDetail": {"taskDetails": [dataset]}}
    prices = PriceBook({"DATAFLOW:VCPU": 0.06, "DATAFLOW:MEMORY_GB": 0.004})
    cost = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job, book=prices)
    item = cost["items"][0]
    assert (item["kind"], item["name"], item["hours"]) == (
        "dataflow", "Dataflow job 2026-11-27_1 (us-central1)",
        cost_item.seconds_of({"startTime": usage["start_time"],
                              "endTime": usage["end_time"]}) / 3600)
    assert item["usd"] == pytest.approx(2 * 0.06 + 8 * 0.004)
    assert item["basis"] == ("2.000 vCPU-hours, 8.000 GB-hours of memory, 12.500 GB-hours of "
                             "disk on n2-standard-4 workers, as the job reported them")
    assert item["unpriced"] == ["DATAFLOW:DISK_GB"]  # no SSD used: none asked for
    unread = {"outputs": {"dataset": {"artifacts": [{"metadata": {"dataflow_job": {
        "job": "2026-11-27_2", "region": "us-central1", "unread": "403 denied"}}}]}}}
    (said,) = run_cost.itemise(training=[], studies=[], batch=[], book=prices, pipeline_job={
        "jobDetail": {"taskDetails": [unread]}})["items"][:1]
    assert said["basis"] == "not counted: what it used could not be read (403 denied)"
    assert (said["usd"], said["unpriced"]) == (0.0, [])


def test_a_build_the_build_stage_made_is_priced_for_its_minutes():
    build = {"id": "b-1", "machine": "E2_HIGHCPU_8", "start_time": "2026-11-27T10:00:00Z",
             "finish_time": "2026-11-27T10:12:00Z"}
    task = {"outputs": {"build_context": {"artifacts": [{"metadata": {"cloud_build": build}}]}}}
    job = {"jobDetail": {"taskDetails": [task]}}
    cost = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job,
                            book=PriceBook({"CLOUD_BUILD:E2_HIGHCPU_8": 0.96}))
    item = cost["items"][0]
    assert (item["kind"], item["name"], item["hours"], item["basis"]) == (
        "cloud build", "Cloud Build b-1", 0.2, "12.0 build-minute(s) on E2_HIGHCPU_8")
    assert item["usd"] == pytest.approx(0.192) and item["unpriced"] == []
    unpriced = run_cost.itemise(training=[], studies=[], batch=[], pipeline_job=job,
                                book=PriceBook())
    assert unpriced["unpriced"] == ["CLOUD_BUILD:E2_HIGHCPU_8"]


def test_what_the_run_cost_before_training_is_read_only_under_a_budget(monkeypatch):
    """The training step's `before`: nothing is read without a budget; what cannot be read
    is said, and the job is then held to the whole budget (0 before)."""
    from components.capacity.job_records import RUN_LABELS_ENV
    from components.vertex_options import VertexOptions

    def unreadable(*args, **kwargs):
        raise AssertionError("nothing is read without a budget")

    monkeypatch.setattr(run_cost, "of_run", unreadable)
    lines: list[str] = []
    assert run_cost.before_training("p", VertexOptions(), "", lines.append) == 0.0
    assert lines == []
    monkeypatch.undo()
    monkeypatch.delenv(RUN_LABELS_ENV, raising=False)
    assert run_cost.before_training("p", VertexOptions(budget_usd=5.0), "", lines.append) == 0.0
    assert lines == ["budget: what the run has cost before training is not estimated (the "
                     "run's vertex-ai-pipelines-run-billing-id label is not set); its job is "
                     "held to the whole budget"]
