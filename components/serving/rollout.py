"""The rollout rule and its steps, the same on Vertex AI and locally.

A new default model is deployed beside the champion as a canary with a share of the
traffic; its error rate and p95 latency, measured over the same window as the champion's,
decide: rolled back at once when over a bound with enough requests, promoted at the end of
the window when within them, and handled by `deploy.inconclusive` when it answered too few
requests to tell. Vertex AI has no automatic rollback (docs: "Deploy a model to an
endpoint"; Model Monitoring covers tabular models only), so the deploy stage does it.

Where the canary runs is a `Target`: the Vertex AI endpoint
(`components.serving.vertex_endpoint`) or model servers on loopback behind a weighted
router (`components.serving.local_endpoint`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from components.durations import duration_seconds as seconds
from components.serving.deploy_options import DeployOptions


@dataclasses.dataclass(frozen=True)
class Figures:
    """What one deployed model answered in the window.

    Attributes:
        requests: Requests answered (successes and errors).
        errors: Requests that failed.
        p95_seconds: The 95th percentile of a request's time; None without requests.
    """

    requests: int
    errors: int
    p95_seconds: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def describe(self) -> str:
        latency = "no latency" if self.p95_seconds is None else f"p95 {self.p95_seconds:.3f} s"
        return (f"{self.requests} request(s), {self.errors} error(s) "
                f"({self.error_rate:.1%}), {latency}")

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "errors": self.errors,
                "error_rate": round(self.error_rate, 6), "p95_seconds": self.p95_seconds}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The rule's answer: `watching`, `promote`, `rollback` or `inconclusive`, and why."""

    outcome: str
    reason: str


def judge(canary: Figures, champion: Figures | None, rule: DeployOptions, *,
          final: bool) -> Verdict:
    """The rollout rule on one reading of both models' figures.

    Args:
        canary: The new model's figures since it was deployed.
        champion: The serving model's over the same window (None: none measured).
        rule: The thresholds.
        final: Whether the window has ended (a canary within its bounds is promoted only
            then; one over a bound is rolled back at any reading).
    """
    enough = canary.requests >= rule.min_requests
    if enough and canary.error_rate > rule.max_error_rate:
        return Verdict("rollback", f"the canary's error rate {canary.error_rate:.1%} "
                                   f"({canary.errors} of {canary.requests}) is over "
                                   f"deploy.max_error_rate {rule.max_error_rate:.1%}")
    bound = latency_bound(champion, rule)
    if enough and bound is not None and canary.p95_seconds is not None \
            and canary.p95_seconds > bound:
        return Verdict("rollback", f"the canary's p95 latency {canary.p95_seconds:.3f} s is "
                                   f"over {bound:.3f} s ({rule.max_latency_ratio:g} x the "
                                   f"champion's {champion.p95_seconds:.3f} s + "
                                   f"{rule.latency_slack_seconds:g} s)")
    if not final:
        return Verdict("watching", "within its bounds so far")
    if not enough:
        return Verdict("inconclusive", f"the canary answered {canary.requests} request(s), "
                                       f"fewer than deploy.min_requests {rule.min_requests}")
    return Verdict("promote", f"the canary's error rate {canary.error_rate:.1%} and p95 "
                              + ("latency " + (f"{canary.p95_seconds:.3f} s"
                                               if canary.p95_seconds is not None else "n/a"))
                              + " are within the bounds over "
                              f"{canary.requests} request(s)")


def latency_bound(champion: Figures | None, rule: DeployOptions) -> float | None:
    """The canary's highest p95 latency: a ratio of the champion's in the same window."""
    if champion is None or champion.p95_seconds is None:
        return None
    return rule.max_latency_ratio * champion.p95_seconds + rule.latency_slack_seconds


class Target(Protocol):
    """Where a rollout happens: an endpoint with the champion deployed, or none."""

    def champion(self) -> str | None:
        """The serving model in words, or None when the endpoint serves nothing."""

    def deploy(self, percent: int) -> str:
        """Deploys the new model with `percent` of the traffic (the rest stays with the
        champion); returns the new deployment in words."""

    def figures(self) -> tuple[Figures, Figures | None]:
        """The canary's and the champion's figures since the canary was deployed."""

    def promote(self) -> None:
        """All the traffic to the new model; the old one is kept at 0 % (and the
        registry's default alias moved)."""

    def retire(self) -> None:
        """Undeploys the old model now (a grace period of 0s)."""

    def keep_old(self, seconds: float) -> str:
        """Keeps the old model at 0 % for `seconds`, recorded where a later rollout finds
        it (`retire_expired`); no process waits for it. Returns when it ends, in words
        ("" when the target undeployed it at once instead)."""

    def retire_expired(self) -> list[str]:
        """Undeploys the old models an earlier rollout kept whose grace period is over;
        returns what was done, in words."""

    def roll_back(self) -> None:
        """All the traffic back to the champion; the canary undeployed."""


@dataclasses.dataclass
class Rollout:
    """One rollout's steps, each with its figures, for decision.json, the lineage and the
    run's summary."""

    outcome: str = ""  # promoted, rolled back, deployed (no champion), not deployed
    reason: str = ""
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def step(self, name: str, **facts: Any) -> None:
        self.steps.append({"step": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime()), **facts})

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason": self.reason, "steps": self.steps}

    def summary(self) -> str:
        return f"{self.outcome}: {self.reason}"

    @property
    def serves_new(self) -> bool:
        """Whether the new model serves all the traffic now."""
        return serves_new(self.outcome)


def serves_new(outcome: str) -> bool:
    """Whether a rollout that ended `outcome` left the new model with all the traffic
    (promoted, or deployed on an endpoint that served nothing)."""
    return outcome in ("promoted", "deployed")


def roll_out(target: Target, rule: DeployOptions, *, log: Callable[[str], None],
             sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> Rollout:
    """Deploys the new model as a canary beside the champion, watches it, and promotes it
    or rolls it back (see the module's docstring). A canary still deployed when this
    raises (a failure, or the step being stopped) is rolled back first."""
    record = Rollout()
    for retired in target.retire_expired():
        record.step("old model undeployed", deployment=retired)
        log(f"deploy: {retired}")
    serving = target.champion()
    if serving is None:
        deployed = target.deploy(100)
        target.promote()
        record.outcome, record.reason = "deployed", "the endpoint served no model: nothing " \
            "to compare with, so the new model takes all the traffic"
        record.step("deployed", traffic=100, deployment=deployed)
        log(f"deploy: {deployed} with 100% of the traffic ({record.reason})")
        return record
    deployed = target.deploy(rule.canary_percent)
    record.step("canary", traffic=rule.canary_percent, deployment=deployed, champion=serving)
    log(f"deploy: canary {deployed} with {rule.canary_percent}% of the traffic beside "
        f"{serving}; watched for {rule.watch_window}, read every {rule.check_interval}")
    try:
        with _sigterm_stops():
            verdict = _watch(target, rule, record, log, sleep, clock)
    except BaseException:
        target.roll_back()
        record.step("rolled back", reason="the deploy step stopped while the canary ran")
        log("deploy: stopped mid-canary; all the traffic is back on the champion and the "
            "canary is undeployed")
        raise
    if verdict.outcome == "inconclusive":
        log(f"deploy: inconclusive ({verdict.reason}); deploy.inconclusive is "
            f"{rule.inconclusive}")
        verdict = Verdict("promote" if rule.inconclusive == "promote" else "rollback",
                          f"inconclusive, {verdict.reason}; deploy.inconclusive is "
                          f"{rule.inconclusive}")
    if verdict.outcome == "promote":
        target.promote()
        record.step("promoted", traffic=100, reason=verdict.reason)
        log(f"deploy: promoted, {verdict.reason}; the new model has all the traffic and is "
            "the default version")
        # Nothing waits out the grace period (a pod would be billed for it): the next
        # rollout on the endpoint undeploys the old model once it is over.
        grace = seconds(rule.grace_period) or 0
        until = target.keep_old(grace) if grace else target.retire()
        if until:
            record.step("old model kept", until=until)
            log(f"deploy: the old model stays at 0% until {until} (deploy.grace_period "
                f"{rule.grace_period}); the next run's deploy step undeploys it after that")
        else:
            record.step("old model undeployed")
            log("deploy: the old model is undeployed")
        record.outcome, record.reason = "promoted", verdict.reason
    else:
        target.roll_back()
        record.step("rolled back", reason=verdict.reason)
        log(f"deploy: rolled back, {verdict.reason}; the champion has all the traffic again "
            "and stays the default version; the canary is undeployed")
        record.outcome, record.reason = "rolled back", verdict.reason
    return record


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM (a cancelled run's pod, a Ctrl-C'd local run's process group) raises
    SystemExit here, so that the canary is rolled back before the process ends; Python's
    default would end it at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _watch(target: Target, rule: DeployOptions, record: Rollout, log: Callable[[str], None],
           sleep: Callable[[float], None], clock: Callable[[], float]) -> Verdict:
    window = seconds(rule.watch_window) or 0.0
    interval = seconds(rule.check_interval) or window
    ends = clock() + window
    while True:
        left = ends - clock()
        sleep(max(0.0, min(interval, left)))
        final = clock() >= ends
        canary, champion = target.figures()
        verdict = judge(canary, champion, rule, final=final)
        record.step("check", canary=canary.to_dict(),
                    champion=None if champion is None else champion.to_dict(),
                    verdict=verdict.outcome)
        log(f"deploy: canary {canary.describe()}; champion "
            + ("not measured" if champion is None else champion.describe())
            + f": {verdict.outcome}")
        if verdict.outcome != "watching":
            return verdict
