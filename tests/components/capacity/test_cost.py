"""The training cost estimate against figures computed by hand."""

from __future__ import annotations

import pytest

from components.capacity import cost
from components.gpu.worker_pool import parse_pools
from components.prices import shipped_table
from components.prices.price_list import PriceBook
from tests.support.prices import A3_CORE, A3_RAM, H100, N1_STANDARD_4

#: The figures below are computed by hand from the tests' own prices.
pytestmark = pytest.mark.usefixtures("hand_prices")

T4_POOLS = [{"machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
                             "acceleratorCount": 1}, "replicaCount": 1},
            {"machineSpec": {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
                             "acceleratorCount": 1}, "replicaCount": 3}]


def _job(name, state, start, end, pools=T4_POOLS):
    return {"name": f"projects/p/locations/us-central1/customJobs/{name}", "state": state,
            "startTime": start, "endTime": end, "jobSpec": {"workerPoolSpecs": pools}}


def test_every_job_is_billed_as_vertex_ai_bills_it():
    prices = PriceBook({"NVIDIA_TESLA_T4": 0.35})  # over the shipped table (no catalog)
    jobs = [
        # Cancelled after 30 minutes in a queue of machines (our cancellation: billed).
        _job("1", "JOB_STATE_CANCELLED", "2026-11-01T10:00:00Z", "2026-11-01T10:30:00Z"),
        # A stock-out: failed, not billed.
        _job("2", "JOB_STATE_FAILED", "2026-11-01T10:31:00Z", "2026-11-01T10:32:00Z"),
        # Trained for 2 hours; the same job again (a resumed step): counted once.
        _job("3", "JOB_STATE_SUCCEEDED", "2026-11-01T11:00:00Z", "2026-11-01T13:00:00Z"),
        _job("3", "JOB_STATE_SUCCEEDED", "2026-11-01T11:00:00Z", "2026-11-01T13:00:00Z"),
        # Queued and cancelled before it started: no time.
        _job("4", "JOB_STATE_CANCELLED", None, "2026-11-01T10:31:00Z")]
    estimate = cost.run_cost(jobs, prices, epochs=10, training_images=500_000)
    # n1-standard-8 is twice n1-standard-4; four machines with a T4 each.
    per_hour = 4 * (2 * N1_STANDARD_4 + 0.35)
    assert per_hour == pytest.approx(3.1479908)
    assert estimate["usd"] == pytest.approx(round(per_hour * 0.5 + per_hour * 2, 4))
    assert estimate["per_epoch_usd"] == pytest.approx(estimate["usd"] / 10, abs=1e-4)
    assert estimate["per_1000_images_usd"] == pytest.approx(estimate["usd"] / 500, abs=1e-6)
    assert [(j["job"][-1], j["billed"], j["seconds"]) for j in estimate["jobs"]] == [
        ("1", True, 1800.0), ("2", False, 60.0), ("3", True, 7200.0), ("4", True, 0.0)]
    assert estimate["unpriced"] == []
    # Each job itemised by pool: the chief's one machine, the workers' three, for the
    # billed time (none for the failed one).
    first, failed = estimate["jobs"][0]["pools"], estimate["jobs"][1]["pools"]
    assert [(p["pool"], p["replicas"], p["hours"]) for p in first] == [(0, 1, 0.5), (1, 3, 0.5)]
    assert sum(p["usd"] for p in first) == pytest.approx(estimate["jobs"][0]["usd"], abs=2e-4)
    assert first[1]["usd_per_hour"] == pytest.approx(3 * (2 * N1_STANDARD_4 + 0.35))
    assert [p["usd"] for p in failed] == [0.0, 0.0]
    text = cost.line(estimate)
    assert text.startswith(f"cost: about {estimate['usd']:.2f} USD for 4 job(s), ")
    assert "not billed: 2 FAILED" in text and "a lower bound" in text


def test_a_type_without_a_price_is_named_never_free():
    pools = [{"machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType":
                              "NVIDIA_TESLA_A100", "acceleratorCount": 1}, "replicaCount": 1},
             {"machineSpec": {"machineType": "a3-highgpu-8g", "acceleratorType":
                              "NVIDIA_H100_80GB", "acceleratorCount": 8}, "replicaCount": 1}]
    estimate = cost.run_cost([_job("9", "JOB_STATE_SUCCEEDED", "2026-11-01T10:00:00Z",
                                   "2026-11-01T11:00:00Z", pools)], PriceBook(),
                             epochs=0, training_images=0)
    # Only the shipped table's H100s and a3-highgpu-8g (its 208 vCPUs and 1,872 GB at A3's
    # core and RAM prices) are priced.
    assert estimate["usd"] == pytest.approx(8 * H100 + 208 * A3_CORE + 1872 * A3_RAM,
                                            abs=1e-4)
    assert estimate["unpriced"] == ["NVIDIA_TESLA_A100", "a2-highgpu-1g"]
    assert estimate["per_epoch_usd"] is None
    assert "without a price for NVIDIA_TESLA_A100, a2-highgpu-1g: give it in vertex.prices" \
        in cost.line(estimate)
    assert f"us-central1 prices of {shipped_table.READ}, from the shipped table" in \
        cost.line(estimate)


def test_a_study_is_billed_for_every_trial_but_the_failed_ones():
    trials = [{"state": "SUCCEEDED", "seconds": 1800.0}, {"state": "FAILED", "seconds": 600.0},
              {"state": "STOPPING", "seconds": 900.0}]
    pools = [{"machineSpec": {"machineType": "n1-standard-8", "acceleratorType":
                              "NVIDIA_H100_80GB", "acceleratorCount": 2}, "replicaCount": "1"}]
    found = cost.tuning_cost(trials, parse_pools(pools), PriceBook().region("us-central1"))
    # 0.75 h billed at 2 x n1-standard-4 + 2 x the H100 an hour.
    assert found["usd"] == pytest.approx(0.75 * (0.4369977 + 22.5320664), abs=1e-4)
    assert (found["trials"], found["billed_trials"], found["seconds"]) == (3, 2, 2700.0)
    assert cost.tuning_line(found).startswith(
        f"tuning cost: about {found['usd']:.2f} USD for 2 billed trial(s) of 3 (0.750 "
        "trial-hours at 22.97 USD an hour")


def test_a_studys_spot_trials_are_priced_at_spot_prices():
    """Trials whose trialJobSpec schedules them on Spot are billed at Spot prices; a type
    with no Spot price is priced on demand, and the line says which."""
    trials = [{"state": "SUCCEEDED", "seconds": 3600.0}]
    pools = parse_pools([{"machineSpec": {"machineType": "n1-standard-4", "acceleratorType":
                                          "NVIDIA_H100_80GB", "acceleratorCount": 1},
                          "replicaCount": "1"}])
    prices = PriceBook({"SPOT:NVIDIA_H100_80GB": 3.0, "SPOT:n1-standard-4": 0.1,
                        "NVIDIA_H100_80GB": 11.0, "n1-standard-4": 0.2}).region("us-central1")
    assert cost.tuning_cost(trials, pools, prices, "SPOT")["usd"] == pytest.approx(3.1)
    assert cost.tuning_cost(trials, pools, prices)["usd"] == pytest.approx(11.2)
    partly = PriceBook({"SPOT:NVIDIA_H100_80GB": 3.0, "n1-standard-4": 0.2}).region(
        "us-central1")
    found = cost.tuning_cost(trials, pools, partly, "SPOT")
    assert found["usd"] == pytest.approx(3.2) and found["on_demand"] == ["n1-standard-4"]
    assert "n1-standard-4 priced on demand" in cost.tuning_line(found)


def _spot_job(state="JOB_STATE_SUCCEEDED"):
    return {"name": "projects/p/locations/us-central1/customJobs/9", "state": state,
            "startTime": "2026-11-26T10:00:00Z", "endTime": "2026-11-26T12:00:00Z",
            "jobSpec": {"scheduling": {"strategy": "SPOT"}, "workerPoolSpecs": [
                {"machineSpec": {"machineType": "n1-standard-4", "acceleratorType":
                                 "NVIDIA_H100_80GB", "acceleratorCount": 1},
                 "replicaCount": "2"}]}}


def test_a_spot_job_takes_its_spot_price_or_says_it_was_priced_on_demand():
    # 2 h of two machines, at their Spot prices.
    spot = cost.job_cost(_spot_job(), PriceBook({"SPOT:NVIDIA_H100_80GB": 3.0,
                                                 "SPOT:n1-standard-4": 0.1}))
    assert spot.usd == pytest.approx(2 * 2 * (0.1 + 3.0), abs=1e-4)
    assert (spot.strategy, spot.on_demand_rate) == ("SPOT", False)
    # With a Spot price for the GPU only, the machine is priced on demand, and said.
    mixed = cost.job_cost(_spot_job(), PriceBook({"SPOT:NVIDIA_H100_80GB": 3.0}))
    assert mixed.usd == pytest.approx(2 * 2 * (N1_STANDARD_4 + 3.0), abs=1e-4)
    assert mixed.on_demand_rate
    on_demand = cost.run_cost([_spot_job()], PriceBook(), epochs=2, training_images=0)
    assert on_demand["usd"] == pytest.approx(2 * 2 * (N1_STANDARD_4 + H100), abs=1e-4)
    assert "SPOT job(s) priced at on-demand rates where no SPOT price was found, an upper " \
        "bound (give SPOT:<type> in vertex.prices)" in cost.line(on_demand)


def test_each_configuration_tried_is_priced_per_epoch_at_the_speed_that_trained():
    prices = PriceBook({"NVIDIA_TESLA_T4": 0.35, "g2-standard-8": 0.9, "NVIDIA_L4": 0.7})
    l4 = [{"machineSpec": {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4",
                           "acceleratorCount": 1}, "replicaCount": 1}]
    queued = {**_job("1", "JOB_STATE_CANCELLED", "2026-11-01T10:00:00Z",
                     "2026-11-01T10:10:00Z"), "labels": {"gpu-pipeline-alternative": "0"}}
    trained = {**_job("2", "JOB_STATE_SUCCEEDED", "2026-11-01T11:00:00Z",
                      "2026-11-01T12:00:00Z", pools=l4),
               "labels": {"gpu-pipeline-alternative": "1"}}
    estimate = cost.run_cost([queued, trained], prices, epochs=4, training_images=100_000)
    primary, fallback = estimate["configurations"]
    # The fallback trained 4 epochs in an hour: 15 min an epoch, on each configuration.
    assert (fallback["configuration"], fallback["trained"]) == ("fallbacks[0]", True)
    assert fallback["per_epoch_usd"] == pytest.approx(1.6 / 4)
    assert fallback["per_1000_images_usd"] == pytest.approx(1.6 / 100)
    per_hour = 4 * (2 * N1_STANDARD_4 + 0.35)
    assert (primary["configuration"], primary["trained"]) == ("primary", False)
    assert primary["per_epoch_usd"] == pytest.approx(per_hour / 4, abs=1e-4)
    assert f"per configuration tried: primary {per_hour / 4:.4f} USD per epoch" in \
        cost.line(estimate)
    assert "fallbacks[0] 0.4000 USD per epoch, 0.0160 per 1,000 images (trained)" in \
        cost.line(estimate)
