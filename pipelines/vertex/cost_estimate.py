"""`submit --dry-run`'s cost estimate: each configuration (the primary and every fallback)
at its own hours (`components.capacity.training_hours`: the newest registered model's
measured speed where it trained on the same machines, else the GPU benchmark's figures for
the configuration's GPU and model over the newest registered model's dataset size, else
`vertex.timeout`), priced as the training step prices its jobs
(`components.capacity.cost`), each in its region at the prices of Google's price catalog,
its cache or the shipped table (`components.prices.price_list`, said which); and
`vertex.budget_usd` held against them before anything is created
(`components.capacity.budget`).

Before the first model is registered the dataset's size is not known here (it is
prepared by the run): configurations without their own measured run are estimated at
`vertex.timeout`, said, and the training step holds the budget again with the prepared
dataset. Tuning trials, queueing and provisioning are not counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from components.capacity.measured_speed import Registered, newest_measured
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from trainer.common.errors import ProjectError


class NewestSpeed:
    """The newest registered model's measured run for `config`'s project, read from the
    registry once, when first asked (a submit without a budget, not a dry run, never reads
    it; a dry run with one reads it once for the budget and the estimate lines), and the
    prices, read once too (`log` gets the line saying the catalog could not be read)."""

    def __init__(self, config: Config, clients: Clients,
                 log: Callable[[str], None] | None = None):
        self._config, self._clients, self._log = config, clients, log

    @functools.cached_property
    def _book(self) -> Any:
        return self._clients.price_book(self._config.vertex, self._log)

    def prices(self, vertex: Any) -> Any:
        """The prices of a run with `vertex` (VertexOptions: its `prices` over them, its
        region the default), read once for every config asked about."""
        return self._book.over(vertex.prices, vertex.region)

    @functools.cached_property
    def found(self) -> tuple[Registered | None, str]:
        """(the model's measured run, or None; why there is none, "" if there is)."""
        from trainer.common.cloud_calls import bounded_read

        def read(progress: Callable[[], None]) -> Registered | None:
            return newest_measured(self._config.vertex, self._config.vertex.project,
                                   self._clients.model_api, self._clients.get_storage(),
                                   progress)

        try:  # bounded: a dry run on a network that drops connections still ends
            found = bounded_read("the Model Registry", read)
        except ProjectError as exc:
            return None, str(exc)
        return found, "" if found else ("the first registered model carries efficiency.json,"
                                        " and the next dry run estimates from it")


def _estimates(config: Config, speed: NewestSpeed) -> tuple[list[Any], str]:
    """Every configuration's estimate (`components.capacity.budget.estimates`), and why
    there is no registered run to estimate from ("" when there is one)."""
    from components.capacity.budget import estimates
    from components.capacity.training_hours import Evidence
    from trainer.cluster.measurements import load

    training = config.vertex_training()
    found, why = speed.found
    if found and not found.seconds_per_epoch:
        why = f"{found.version}'s efficiency.json has no epochs"
    images = found.images_per_epoch if found else 0
    evidence = Evidence(
        epochs=training.total_epochs, timeout=config.vertex.timeout, model=training.model,
        batch=training.batch_size, image_size=config.dataset.image_size, images=images,
        images_from=f"as the dataset of {found.version}" if found and images else "",
        registered=found, measurements=load(training.measurements))
    found_estimates = estimates(config.vertex, config.alternatives(), evidence,
                                speed.prices(config.vertex))
    return found_estimates, why


def estimate_lines(config: Config, speed: NewestSpeed) -> list[str]:
    """What the dry run says of the cost, a line per configuration; reading the registry
    never fails the dry run."""
    from components.capacity.budget import usd

    found, why = _estimates(config, speed)
    budget = config.vertex.budget_usd
    head = ("cost estimate (without tuning trials, queueing and provisioning"
            + (f"; vertex.budget_usd {usd(budget)} USD" if budget else "") + "):")
    return [head, *(f"  {e.line()}" for e in found)] + \
        ([f"  no measured run: {why}"] if why else [])


def hold_budget(config: Config, speed: NewestSpeed, log: Callable[[str], None]) -> Config:
    """`vertex.budget_usd` before anything is created: each configuration over it is
    dropped with a line, the first one left is the primary (a dropped primary whose first
    fitting configuration is in another region stays, for the run stays in its region, and
    the training step drops it); a study's trials, each training as that primary does, are
    as many as fit beside the training after it.

    Raises:
        BudgetError: No configuration fits, or not even one trial.
    """
    from components.capacity.budget import BudgetError, check, trials_within, usd, within

    budget = config.vertex.budget_usd
    if budget <= 0:
        return config
    found, _ = _estimates(config, speed)
    held = check(found, budget)
    for line in held.dropped:
        log(line)
    kept = list(held.kept)
    stays = _stays_in_region(config, kept, found, log)
    if held.dropped:
        vertex = within(config.vertex.model_dump(), [0, *kept] if stays else kept)
        config = config.model_copy(
            update={"vertex": type(config.vertex).model_validate(vertex)})
    if not config.tuning.enabled:
        return config
    if stays:
        raise BudgetError(
            f"vertex.budget_usd is {usd(budget)} USD and the primary passes it "
            f"({found[0].line()}); a study's trials train as the primary does, in the run's "
            f"region ({config.vertex.region}): raise the budget, lower the epochs or "
            "vertex.timeout, put a configuration that fits in that region first, or turn "
            "tuning off")
    tuning = config.tuning
    trials, line = trials_within(budget, found[held.kept[0]], tuning.max_trials)
    if not line:
        return config
    log(line)
    bounded = tuning.model_copy(update={
        "max_trials": trials, "parallel_trials": min(tuning.parallel_trials, trials),
        "max_failed_trials": min(tuning.max_failed_trials, trials)})
    return config.model_copy(update={"tuning": bounded})


def _stays_in_region(config: Config, kept: list[int], found: list[Any],
                     log: Callable[[str], None]) -> bool:
    """Whether the primary is dropped for a configuration in another region: the run then
    stays in `vertex.region` (said), where its PipelineJob, bucket, Model Registry and
    endpoint are (Vertex AI reaches no resource across regions:
    GoogleCloudPlatform/vertex-ai-samples#925), and its training step drops the primary
    again (`components.capacity.budget.hold`), as it moves to a fallback in another region
    when the primary has no capacity."""
    if kept[0] == 0:
        return False
    first = config.alternatives()[kept[0]]
    if first.region == config.vertex.region:
        return False
    log(f"budget: the run stays in {config.vertex.region} (vertex.region: its pipeline, "
        "bucket, Model Registry and endpoint are there); its training step drops the primary "
        f"again and starts with {found[kept[0]].label} in {first.region}")
    return True
