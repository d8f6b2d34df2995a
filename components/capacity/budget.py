"""`vertex.budget_usd`: the most one run may cost, held before and while it runs.

Before anything is created (`submit`, `schedule create`, their dry runs), each
configuration the training step may run (the primary, then each fallback) is priced: its
machines' and GPUs' hourly price in its own region (`components.prices.price_list`:
Google's price catalog, its cache or the shipped table, said which, with `vertex.prices`
over them) times its own hours (`components.capacity.training_hours`: the
newest registered model's speed where it trained on these machines, else the GPU
benchmark's for its GPU and model over the dataset's images, else the job's
`vertex.timeout`: the longest Vertex AI lets it run, so the estimate is what the job can
cost at most). A configuration over the budget, or with a type the table cannot price, is
dropped with a line; the run is refused when none is left.

The training step holds its alternatives to the budget again before it creates its first
job (`hold`), with the prepared dataset's size and the newest registered model then: a
scheduled run, whose schedule was held when it was created, is refused or loses a
fallback when the runs before it showed a slower speed. The step holds them to what the
run leaves: the budget less what the run has cost before training (its study's trials,
its steps, its Dataflow job and build, the run itself: `run_cost.before_training`).

While the job runs, the training step's follower (`components.capacity.following`) asks
`running_guard` at every look: what the job has cost since it started plus what its
remaining epochs will cost at the seconds per epoch it has shown; past what the run
leaves, the job is cancelled (its checkpoints stay in its job directory) and the step
ends saying so.

The deploy step holds the canary to what the budget leaves (`canary_window`): what the run
has cost so far (`components.capacity.run_cost`: by the run's billing label, and its
steps from its PipelineJob) plus the canary's nodes for its watch window; the window is
shortened to fit, or the canary is skipped (the champion keeps serving) when not even two
of its looks fit or its machines have no `PREDICTION:<type>` price.

Cloud Billing budgets only alert, and only after billing data arrives (hours later); none
of the anchors (TFX, gcpc, ZenML, Metaflow, Ray, KServe) caps a run's spend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from components.capacity.cost import rate
from components.prices.price_list import PriceBook, hourly_words, unpriced_words
from trainer.common.errors import InputError, StageError

if TYPE_CHECKING:
    from components.capacity.training_hours import Evidence
    from components.gpu.alternatives import Alternative
    from components.vertex_options import VertexOptions


class BudgetError(InputError):
    """No configuration fits `vertex.budget_usd`: nothing is created."""


class BudgetReachedError(StageError):
    """The training job was cancelled: its cost would have passed `vertex.budget_usd`.

    Attributes:
        result: The launcher's `Result` for the cancelled job (its records are written).
    """

    def __init__(self, message: str, result: Any = None):
        super().__init__(message)
        self.result = result


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One configuration's estimated training cost.

    Attributes:
        label: "primary" or "fallbacks[i]".
        region: Where it runs.
        usd_per_hour: Its machines and GPUs, every replica.
        unpriced: The types no price is known for (then `usd` leaves them out).
        hours: How long it is expected to train.
        basis: Where `hours` comes from, in words.
        prices: Where its prices come from, in words (`PriceList.words`).
        on_demand: Its Spot or Flex-start types priced on demand for want of their own.
        reserved: Its pools on a reservation, in words (`cost.Rate.reserved_words`): they
            add only Vertex AI's management fee, which is all `usd_per_hour` counts of them.
    """

    label: str
    region: str
    usd_per_hour: float
    unpriced: tuple[str, ...]
    hours: float
    basis: str
    prices: str = ""
    on_demand: tuple[str, ...] = ()
    reserved: str = ""

    @property
    def usd(self) -> float:
        return self.usd_per_hour * self.hours

    def total_words(self) -> str:
        """What it costs: "X USD", "at least X USD" with a part unpriced, "an unknown
        amount" with nothing priced."""
        if self.unpriced:
            return f"at least {usd(self.usd)} USD" if self.usd > 0 else "an unknown amount"
        return f"{usd(self.usd)} USD"

    def line(self) -> str:
        """The estimate in one line. A part without a price is named, and the figures are
        then floors (never "0.00 USD", never "an upper bound")."""
        return (f"{self.label} ({self.region}): "
                f"{hourly_words(self.usd_per_hour, self.unpriced)}, about "
                f"{self.hours:.2f} h ({self.basis}): {self.total_words()}"
                + (f" ({self.prices})" if self.prices else "")
                + (f"; {', '.join(self.on_demand)} priced on demand: no Spot or Flex-start "
                   "price found, an upper bound" if self.on_demand and not self.unpriced
                   else "")
                + self.reserved + unpriced_words(self.unpriced))


def usd(amount: float) -> str:
    """An amount in USD: cents, or, below a cent, the first figures that show it."""
    return f"{amount:.2f}" if amount >= 0.01 or amount == 0 else f"{amount:.2g}"


def estimates(vertex: VertexOptions, alternatives: Sequence[Alternative],
              evidence: Evidence, book: PriceBook | None = None) -> list[Estimate]:
    """Every alternative's estimate: its price in its region (`book`; default: read with
    the default credentials, `vertex.prices` over it) times its own hours
    (`training_hours.hours_for`: what measured its machines or its GPU, else
    `vertex.timeout`)."""
    from components.capacity.training_hours import hours_for

    book = book or PriceBook.of(vertex)
    return [Estimate(a.label, a.region, found.usd, found.unpriced, hours.hours, hours.basis,
                     prices.words(), found.on_demand, found.reserved_words())
            for a in alternatives for hours in [hours_for(a, evidence)]
            for prices in [book.region(a.region)]
            for found in [rate(a.pools, prices, a.scheduling_strategy)]]


@dataclasses.dataclass(frozen=True)
class Check:
    """What the budget leaves: the indices of the alternatives that fit, in order, and a
    line for each one dropped."""

    kept: tuple[int, ...]
    dropped: tuple[str, ...]


def left_words(budget: float, before: float) -> str:
    """`budget` in words, with what the run has cost before training when anything."""
    return f"{usd(budget)} USD" + (
        f" ({usd(max(budget - before, 0.0))} USD left: the run has cost about {usd(before)} "
        "USD before training)" if before > 0 else "")


def why_dropped(estimate: Estimate, left: float) -> str:
    """One configuration's refusal in one line: which parts have no price (and how to give
    one), or by how much it passes what the budget leaves."""
    if estimate.unpriced:
        return (f"{estimate.label} ({estimate.region}): no price for "
                f"{', '.join(estimate.unpriced)}, so its cost cannot be held to the budget; "
                f"give it in vertex.prices (USD per hour: {{{estimate.unpriced[0]}: USD}})")
    return (f"{estimate.label} ({estimate.region}): about {usd(estimate.usd)} USD, "
            f"{usd(estimate.usd - left)} USD over the {usd(left)} USD the budget leaves "
            f"({estimate.usd_per_hour:.2f} USD an hour, about {estimate.hours:.2f} h: "
            f"{estimate.basis})")


def check(found: Sequence[Estimate], budget: float, before: float = 0.0) -> Check:
    """Holds each estimate against `budget` (USD; 0: no budget) less `before`, what the
    run has cost before training.

    Raises:
        BudgetError: None fits; the message names the budget and every estimate.
    """
    if budget <= 0:
        return Check(tuple(range(len(found))), ())
    words = left_words(budget, before)
    kept, dropped = [], []
    for index, estimate in enumerate(found):
        if estimate.unpriced:
            dropped.append(f"budget: {estimate.label} dropped: no price for "
                           f"{', '.join(estimate.unpriced)} (give it in vertex.prices), so "
                           f"its cost cannot be held to vertex.budget_usd {words}")
        elif estimate.usd > budget - before:
            dropped.append(f"budget: {estimate.label} dropped: about {usd(estimate.usd)} USD "
                           f"passes vertex.budget_usd {words} ({estimate.line()})")
        else:
            kept.append(index)
    if not kept:
        raise BudgetError(
            f"vertex.budget_usd is {words} and no configuration fits it:\n"
            + "\n".join(f"  - {why_dropped(e, budget - before)}" for e in found)
            + "\nraise the budget, lower vertex.timeout or the epochs, give cheaper "
              "fallbacks, or give the missing prices in vertex.prices")
    return Check(tuple(kept), tuple(dropped))


def trials_within(budget: float, trial: Estimate, wanted: int) -> tuple[int, str]:
    """How many of `wanted` tuning trials fit `budget` beside the training that follows the
    study, each trial training as the primary configuration does (`trial`, its estimate):
    (the trials, a line saying why when fewer than `wanted`; "" otherwise).

    Raises:
        BudgetError: Not even one trial fits.
    """
    if budget <= 0 or trial.unpriced or trial.usd <= 0:
        return wanted, ""
    fits = int(budget // trial.usd) - 1
    if fits >= wanted:
        return wanted, ""
    if fits < 1:
        raise BudgetError(
            f"vertex.budget_usd is {usd(budget)} USD, and a tuning trial and the training "
            f"after the study cost about {usd(trial.usd)} USD each ({trial.line()}): not even "
            "one trial fits beside the training; raise the budget, lower the epochs or "
            "vertex.timeout, or turn tuning off")
    return fits, (f"budget: tuning.max_trials lowered from {wanted} to {fits}: each trial "
                  f"trains as the {trial.label} does, about {usd(trial.usd)} USD, and the "
                  f"training after the study as much; {fits + 1} x {usd(trial.usd)} USD fit "
                  f"vertex.budget_usd {usd(budget)} USD")


def within(vertex: Mapping[str, Any], kept: Sequence[int]) -> dict[str, Any]:
    """The `vertex` parameter with only the alternatives at `kept` (0: the primary,
    i: `fallbacks[i - 1]`), in order: the first one kept becomes the primary."""
    fallbacks = list(vertex.get("fallbacks") or [])
    if list(kept) == list(range(len(fallbacks) + 1)):
        return dict(vertex)

    def configuration(index: int) -> dict[str, Any]:
        base = {"region": vertex["region"], "worker_pool_specs": vertex["worker_pool_specs"],
                "scheduling_strategy": vertex["scheduling_strategy"]}
        return base if index == 0 else {**base, **fallbacks[index - 1]}

    first, *rest = [configuration(i) for i in kept]
    return {**vertex, **first, "fallbacks": rest}


def hold(vertex: VertexOptions, alternatives: Sequence[Alternative],
         log: Callable[[str], None], evidence: Callable[[], Evidence],
         before: float = 0.0, book: PriceBook | None = None) -> list[Alternative]:
    """The training step's hold, before it creates a job: each alternative over what
    `vertex.budget_usd` leaves after `before` (what the run has cost before training) is
    dropped with a line (`check`), at its hours from `evidence` (read only under a
    budget: the newest registered model, the benchmark's results, the prepared dataset's
    size), at `book`'s prices (default: read now, `vertex.prices` over them).

    Raises:
        BudgetError: None fits; nothing is created.
    """
    if vertex.budget_usd <= 0:
        return list(alternatives)
    book = book or PriceBook.of(vertex, log=log)
    priced_now = estimates(vertex, alternatives, evidence(), book)
    held = check(priced_now, vertex.budget_usd, before)
    for line in held.dropped:
        log(line)
    log(f"budget: {priced_now[held.kept[0]].line()}, within vertex.budget_usd "
        f"{left_words(vertex.budget_usd, before)}")
    return [alternatives[i] for i in held.kept]


def canary_window(budget: float, spent: float | None, usd_per_hour: float,
                  unpriced: Sequence[str], window: float, interval: float,
                  grace: float = 0.0) -> tuple[float | None, str]:
    """How long the canary may be watched under `vertex.budget_usd`: (seconds, or None to
    skip it; a line saying why when it is not the whole `window`, else "").

    Args:
        budget: `vertex.budget_usd` (0: no budget, the whole window).
        spent: What the run has cost so far, None when it could not be read (then the
            canary is held against the whole budget, and the line says so).
        usd_per_hour: The canary's nodes (`max_replica_count` of them), an hour.
        unpriced: Its types without a `PREDICTION:` price.
        window: `deploy.watch_window`, in seconds.
        interval: `deploy.check_interval`, in seconds: a window shorter than two looks
            decides nothing.
        grace: `deploy.grace_period`, in seconds: after a promotion the old model stays
            deployed that long on the same machines, so its cost is held beside the
            window's.
    """
    if budget <= 0:
        return window, ""
    if unpriced:
        return None, (f"budget: no canary: no price for {', '.join(unpriced)} (give it in "
                      f"vertex.prices), so its cost cannot be held to vertex.budget_usd "
                      f"{usd(budget)} USD; the champion keeps serving")
    unknown = spent is None
    kept = usd_per_hour * grace / 3600  # the old model beside the new after a promotion
    left = budget - (spent or 0.0) - kept
    fits = left / usd_per_hour * 3600 if usd_per_hour > 0 else window
    so_far = ("what the run has cost so far could not be read; held against the whole "
              "budget" if unknown else f"the run has cost about {usd(spent or 0.0)} USD") + (
        f"; the old model's {grace:.0f} s of deploy.grace_period after a promotion "
        f"{usd(kept)} USD" if kept else "")
    if fits >= window:
        return window, ""
    if fits < 2 * interval:
        return None, (f"budget: no canary: vertex.budget_usd {usd(budget)} USD leaves "
                      f"{usd(max(left, 0.0))} USD ({so_far}), and its nodes cost "
                      f"{usd(usd_per_hour)} USD an hour: not even two looks "
                      f"({2 * interval:.0f} s) fit; the champion keeps serving")
    return fits, (f"budget: the canary's watch window shortened from {window:.0f} s to "
                  f"{fits:.0f} s: vertex.budget_usd {usd(budget)} USD leaves {usd(left)} USD "
                  f"({so_far}), and its nodes cost {usd(usd_per_hour)} USD an hour")


def running_guard(budget: float, usd_per_hour: float, epochs: int,
                  epochs_done: Callable[[], int], clock: Callable[[], float],
                  before: float = 0.0) -> Callable[[Any], str]:
    """The follower's question for a running job: why it must stop, or "".

    What it has cost is its price times the time since Vertex AI started it (the billed
    time, `components.capacity.cost`); what its remaining epochs will cost, that price
    times their number times the seconds per epoch so far (start-up included: the
    projection errs high, never low).

    Args:
        budget: `vertex.budget_usd`.
        usd_per_hour: The job's configuration's price.
        epochs: The epochs it trains in all.
        epochs_done: The epochs its job directory's history holds.
        clock: Wall-clock seconds.
        before: What the run had cost before training (the job is held to what the
            budget leaves).
    """
    def guard(job: Any) -> str:
        started = job.start_time.timestamp() if job.start_time else 0.0
        if budget <= 0 or started <= 0:
            return ""
        seconds = max(0.0, clock() - started)
        spent = usd_per_hour * seconds / 3600
        done = epochs_done()
        per_epoch = seconds / done if done else 0.0
        left = usd_per_hour * max(0, epochs - done) * per_epoch / 3600
        if spent + left <= budget - before:
            return ""
        return (f"budget: vertex.budget_usd is {left_words(budget, before)}; the job has "
                f"cost about {usd(spent)} USD in {seconds:.0f} s"
                + (f" and its {epochs - done} remaining epoch(s) would cost about "
                   f"{usd(left)} USD more ({per_epoch:.0f} s each)" if left else "")
                + f", after {done} of {epochs} epoch(s)")
    return guard


def guard_for(vertex: VertexOptions, epochs: int, job_dir: str,
              clock: Callable[[], float], before: float = 0.0,
              book: PriceBook | None = None
              ) -> Callable[[Alternative], Callable[[Any], str]] | None:
    """The launcher's `guard_for` under `vertex.budget_usd` (None without a budget): each
    alternative at its own price in its region (`book`; default: read now), its progress
    read from the job directory's history, held to what the budget leaves after `before`
    (what the run cost before training)."""
    if vertex.budget_usd <= 0:
        return None
    from trainer.run.history import load_history

    book = book or PriceBook.of(vertex)

    def progress() -> int:
        try:
            return len(load_history(job_dir))
        except (OSError, ValueError):  # not written yet, or being written
            return 0

    return lambda alternative: running_guard(
        vertex.budget_usd, rate(alternative.pools, book.region(alternative.region),
                                alternative.scheduling_strategy).usd,
        epochs, progress, clock, before)
