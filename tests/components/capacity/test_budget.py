"""`vertex.budget_usd` (`components.capacity.budget`): each configuration priced before
anything is created, the ones over the budget dropped, the run refused when none fits, and
a running job cancelled (through Vertex AI's own REST client, against the fake APIs) when
what it has cost and what its remaining epochs will cost pass the budget."""

from __future__ import annotations

import json
import re
import types

import pytest

from components.capacity import budget
from components.capacity.launcher import launch
from components.gpu import catalog as cat
from tests.components.capacity.test_training_hours import T4_POOLS, evidence, measured, registered
from tests.support.facts import figures, missing
from tests.support.launches import L4, FakeTime, config, launch_settings, pools, pushed_images
from tests.support.prices import N1_STANDARD_4
from tests.trainer.cluster.test_measured_plan import results

#: The figures below are computed by hand from the tests' own prices.
pytestmark = pytest.mark.usefixtures("hand_prices")

N1_8 = 2 * N1_STANDARD_4  # n1-standard-8 in the table: twice n1-standard-4


def _evidence(seconds: float | None = None, l4_seconds: float | None = None,
              timeout: str = "604800s"):
    """10 epochs of 900 images in `seconds` on the default pools (two T4 machines), as the
    newest registered model measured; in `l4_seconds` on two L4 machines, as the L4's GPU
    benchmark measured (no warm-up), the two machines at 1.5 times one (the estimate's
    stated scaling, `training_hours.scaled`); `timeout`: `vertex.timeout`."""
    l4 = results(cat.L4, "2026-11-28T10:00:00+00:00", ("bfloat16", 9000 / 1.5 / l4_seconds, {
        "precision": "bfloat16", "image_size": 32}), model="cnn") if l4_seconds else None
    return evidence(
        timeout=timeout, images=900,
        registered=registered(seconds, T4_POOLS) if seconds else None,
        measurements=measured(("l4.json", l4)) if l4 else None)


def _estimates(cfg, found=None):
    return budget.estimates(cfg.vertex, cfg.alternatives(), found or _evidence())


def test_each_configuration_is_priced_from_the_measured_speed_or_the_timeout():
    cfg = config(prices={"NVIDIA_TESLA_T4": 0.35, "SPOT:NVIDIA_L4": 0.2, "g2-standard-8": 0.9},
                 fallbacks=[{"worker_pool_specs": pools(L4), "scheduling_strategy": "SPOT"},
                            {"region": "us-east1"}])
    primary, spot, east = _estimates(cfg, _evidence(3600.0, l4_seconds=1800.0))
    rate = 2 * (N1_8 + 0.35)  # the default pools: 2 machines with a T4 each
    # 10 epochs at 360 s, the registered run's speed on these machines: 1 h.
    assert (primary.label, primary.region, primary.hours) == ("primary", "us-central1", 1.0)
    assert primary.usd_per_hour == pytest.approx(rate) and primary.usd == pytest.approx(rate)
    assert not missing(primary.basis, "10 epoch(s)", "360 s", "models/7@3")
    assert not missing(primary.prices, "us-central1", "shipped table", "vertex.prices")
    # us-east1 is priced at us-east1's prices: here the shipped table's.
    assert east.prices.startswith("us-east1 prices of ")
    assert not missing(east.prices, "shipped table")
    # Each configuration at its own speed: the L4s at their benchmark's, the T4s in
    # us-east1 at the registered run's (the same machines).
    assert (spot.hours, east.hours) == (0.5, 1.0)
    # A Spot configuration takes its SPOT: price where one is given (the L4's here; the
    # machine's on-demand one, an upper bound, said).
    assert spot.usd_per_hour == pytest.approx(2 * (0.9 + 0.2))
    assert spot.on_demand == ("g2-standard-8",)
    assert not missing(spot.line(), "g2-standard-8 priced on demand")
    assert east.region == "us-east1"
    (unmeasured,) = _estimates(config(timeout="7200s"),
                                _evidence(l4_seconds=1800.0, timeout="7200s"))
    assert unmeasured.hours == 2.0 and unmeasured.unpriced == ("NVIDIA_TESLA_T4",)
    assert not missing(unmeasured.basis, "no measured speed", "2 x NVIDIA_TESLA_T4",
                       "vertex.timeout 7200s")


def test_a_configuration_over_the_budget_or_unpriced_is_dropped_and_the_first_left_leads():
    cfg = config(budget_usd=1.0, prices={"NVIDIA_TESLA_T4": 0.35, "g2-standard-8": 0.9,
                                         "NVIDIA_L4": 0.7, "SPOT:g2-standard-8": 0.2,
                                         "SPOT:NVIDIA_L4": 0.1},
                 fallbacks=[{"worker_pool_specs": pools(L4), "scheduling_strategy": "SPOT"},
                            {"region": "us-east1", "worker_pool_specs": pools(L4)}])
    found = _estimates(cfg, _evidence(1800.0, l4_seconds=1800.0))  # 0.5 h each
    assert [round(e.usd, 2) for e in found] == [0.79, 0.3, 1.6]
    held = budget.check(found, 1.0)
    assert held.kept == (0, 1)
    (dropped,) = held.dropped
    assert not missing(dropped, "fallbacks[1]", "1.60 USD", "vertex.budget_usd 1.00 USD",
                       found[2].line())
    # Just under the primary's estimate, the fallback that fits becomes the primary.
    held = budget.check(found, 0.5)
    assert held.kept == (1,) and held.dropped[0].startswith("budget: primary dropped: ")
    vertex = budget.within(cfg.vertex.model_dump(), held.kept)
    assert vertex["worker_pool_specs"] == pools(L4) and vertex["fallbacks"] == []
    assert (vertex["region"], vertex["scheduling_strategy"]) == ("us-central1", "SPOT")
    # A type without a price cannot be held to a budget.
    (unpriced,) = _estimates(config(), _evidence(10.0))
    with pytest.raises(budget.BudgetError) as refused:
        budget.check([unpriced], 100.0)
    # Said as what it is: a part without a price (named, and how to give one), not a cost.
    (why,) = [line for line in str(refused.value).splitlines() if line.startswith("  - ")]
    assert not missing(why, "primary (us-central1)", "no price for", *unpriced.unpriced,
                       "vertex.prices")
    assert not re.search(r"(?<![0-9])0\.00 USD", str(refused.value)) and "over the" not in why
    assert budget.check(found, 0.0).kept == (0, 1, 2)  # no budget: everything stays


def test_no_configuration_under_the_budget_is_refused_naming_the_budget_and_each_estimate():
    cfg = config(budget_usd=0.5, prices={"NVIDIA_TESLA_T4": 0.35},
                 fallbacks=[{"region": "us-east1"}])
    found = _estimates(cfg, _evidence(1800.0))
    with pytest.raises(budget.BudgetError) as refused:
        budget.check(found, 0.5)
    first, *configurations, advice = str(refused.value).splitlines()
    assert first == "vertex.budget_usd is 0.50 USD and no configuration fits it:"
    # Each configuration by how much it passes the budget: two T4 machines at 1.57 USD an
    # hour for 10 epochs of 180 s (0.50 h) is 0.79 USD, 0.29 USD over 0.50 USD.
    assert [c.split(":")[0] for c in configurations] == ["  - primary (us-central1)",
                                                         "  - fallbacks[0] (us-east1)"]
    for line in configurations:
        assert not missing(line, "about 0.79 USD, 0.29 USD over the 0.50 USD the budget leaves",
                           "1.57 USD an hour", "0.50 h")
    assert "raise the budget" in advice


def _job(started):
    return types.SimpleNamespace(start_time=types.SimpleNamespace(timestamp=lambda: started))


def test_the_running_guard_adds_what_the_remaining_epochs_will_cost():
    done = [0]
    guard = budget.running_guard(10.0, 3.6, 10, lambda: done[0], clock=lambda: 10000.0)
    assert guard(_job(0.0)) == ""  # not started: nothing billed yet
    assert guard(_job(9900.0)) == ""  # 100 s, no epoch yet: 0.10 USD
    done[0] = 1  # 1 epoch in 100 s: 9 more at 100 s each would cost 0.90 USD
    assert guard(_job(9900.0)) == ""
    done[0] = 2  # 2 epochs in 2000 s: 2.00 USD, and 8 more 8.00 USD, 10.00: still within
    assert guard(_job(8000.0)) == ""
    # 2.10 USD in 2,100 s, and 8 epochs at 1,050 s more: 8.40 USD, 10.50 in all.
    said = guard(_job(7900.0))
    assert "vertex.budget_usd" in said
    assert figures(said) == [10.0, 2.1, 2100, 8, 8.4, 1050, 2, 10]


def test_the_job_is_held_to_what_the_run_leaves_after_what_it_cost_before_training():
    """`vertex.budget_usd` is the whole run's: what the run cost before training (a study's
    trials, its steps, its Dataflow job) is not the training's to spend."""
    done = [2]  # 2 epochs in 2000 s: 2.00 USD, and 8 more 8.00 USD: 10.00 USD in all
    assert budget.running_guard(10.0, 3.6, 10, lambda: done[0], lambda: 10000.0)(
        _job(8000.0)) == ""
    guard = budget.running_guard(10.0, 3.6, 10, lambda: done[0], lambda: 10000.0, before=4.0)
    # 4.00 USD before training leave 6.00: 2.00 spent and 8.00 to come pass them.
    said = guard(_job(8000.0))
    assert figures(said) == [10.0, 6.0, 4.0, 2.0, 2000, 8, 8.0, 1000, 2, 10]
    # The hold: 10 epochs in 1,800 s, the primary 0.79 USD: within 1.00 USD, not within
    # the 0.70 USD the run leaves after 0.30 USD of trials.
    cfg = config(budget_usd=1.0, prices={"NVIDIA_TESLA_T4": 0.35})
    lines: list[str] = []
    budget.hold(cfg.vertex, cfg.alternatives(), lines.append, lambda: _evidence(1800.0),
                before=0.1)
    assert not missing(lines[-1], "0.79 USD", "within vertex.budget_usd 1.00 USD",
                       "0.90 USD left", "0.10 USD before training")
    with pytest.raises(budget.BudgetError) as refused:
        budget.hold(cfg.vertex, cfg.alternatives(), lines.append, lambda: _evidence(1800.0),
                    before=0.3)
    assert not missing(str(refused.value), "vertex.budget_usd", "1.00 USD", "0.70 USD left",
                       "0.30 USD", "primary (us-central1): about 0.79 USD",
                       "0.09 USD over the 0.70 USD the budget leaves", "1.57 USD an hour")


def test_a_running_job_that_would_pass_the_budget_is_cancelled_and_its_cost_recorded(
        apis, tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "history.json").write_text(json.dumps([{"epoch": 0, "loss": 1.0}]))
    cfg = config(budget_usd=1.0, prices={"n1-standard-8": 90.0, "NVIDIA_TESLA_T4": 0.0001})
    fake_time = FakeTime(record_above=1e9)
    guard_for = budget.guard_for(cfg.vertex, 10, str(job_dir), fake_time.clock)
    alternatives, how, lines, _ = launch_settings(
        apis, cfg, pulled=pushed_images(apis), command=["sleep", "60"], fake_time=fake_time,
        guard_for=guard_for)
    with pytest.raises(budget.BudgetReachedError) as stopped:
        launch(alternatives, how)
    (job,) = apis.jobs.values()
    assert job.settled() == "JOB_STATE_CANCELLED"  # its replicas stopped
    message = str(stopped.value)
    # Cancelled after 1 of 10 epochs, its 9 left priced; its checkpoints kept.
    assert not missing(message, "vertex.budget_usd is 1.00 USD", "9 remaining epoch(s)",
                       "after 1 of 10 epoch(s)", "(primary) was cancelled", "checkpoints")
    assert re.search(r"CustomJob projects/\S+ \(primary\)", message), message
    assert any(line.endswith("it was cancelled so that nothing trains or bills unseen")
               and line.startswith("budget: ") for line in lines)
    record = stopped.value.result.record()
    assert [(a["outcome"], a["job"]) for a in record["attempts"]] == [("budget", job.name)]


def test_the_training_step_holds_its_configurations_each_at_its_own_measured_speed():
    cfg = config(budget_usd=1.0, prices={"NVIDIA_TESLA_T4": 0.35, "g2-standard-8": 0.9,
                                         "NVIDIA_L4": 0.7},
                 fallbacks=[{"worker_pool_specs": pools(L4), "region": "us-east1"}])
    alternatives, lines = cfg.alternatives(), []
    # The T4s at 180 s an epoch: 0.79 USD; the L4s at 360 s: 3.20 USD.
    kept = budget.hold(cfg.vertex, alternatives, lines.append,
                       lambda: _evidence(1800.0, l4_seconds=3600.0))
    assert [a.label for a in kept] == ["primary"]
    # The catalog cannot be read here (no account): said once, then the shipped table.
    assert lines[0].startswith("prices: ")
    assert not missing(lines[0], "Cloud Billing Catalog API", "credentials")
    assert len(lines[0]) < 200 and "https://" not in lines[0]  # not google-auth's paragraph
    assert lines[1].startswith("budget: fallbacks[0] dropped: about 3.20 USD passes "
                               "vertex.budget_usd 1.00 USD")
    assert not missing(lines[2], "primary (us-central1)", "1.57 USD an hour", "0.50 h",
                       "180 s", "models/7@3", "0.79 USD", "within vertex.budget_usd 1.00 USD")
    # The runs before it showed a slower speed: nothing fits, nothing is created.
    with pytest.raises(budget.BudgetError) as refused:
        budget.hold(cfg.vertex, alternatives, lines.append, lambda: _evidence(3600.0))
    assert not missing(str(refused.value), "vertex.budget_usd is 1.00 USD",
                       "primary (us-central1): about 1.57 USD", "0.57 USD over the 1.00 USD",
                       "1.57 USD an hour", "1.00 h", "360 s")
    # Nothing measured: the timeout's estimate, said.
    with pytest.raises(budget.BudgetError, match="no measured speed for 2 x NVIDIA_TESLA_T4 "
                       "with cnn: vertex.timeout 604800s"):
        budget.hold(cfg.vertex, alternatives, lines.append, _evidence)

    def unread():
        raise AssertionError("read without a budget")

    # No budget: nothing is read, everything stays.
    assert budget.hold(config().vertex, alternatives, lines.append, unread) == alternatives


def test_the_launcher_holds_before_its_first_job_and_never_past_an_earlier_one(apis):
    cfg = config(budget_usd=0.01, prices={"NVIDIA_TESLA_T4": 0.35})
    held = []

    def refuse(alternatives):
        held.append([a.label for a in alternatives])
        raise budget.BudgetError("vertex.budget_usd is 0.01 USD and no configuration fits it")

    alternatives, how, _, _ = launch_settings(apis, cfg, pulled=pushed_images(apis),
                                              command=["true"], hold=refuse)
    with pytest.raises(budget.BudgetError):
        launch(alternatives, how)
    assert held == [["primary"]] and not apis.jobs  # refused before anything was created
    # A step that runs again and finds the job its earlier run created follows it: that
    # run was held already, and a job left unfollowed would train and bill unseen.
    _, how, _, _ = launch_settings(apis, cfg, pulled=pushed_images(apis), command=["true"])
    first = launch(alternatives, how)
    _, again, _, _ = launch_settings(apis, cfg, pulled=pushed_images(apis), command=["true"],
                                     hold=refuse, find_earlier=lambda: [first.job])
    assert launch(alternatives, again).job.name == first.job.name and len(held) == 1
