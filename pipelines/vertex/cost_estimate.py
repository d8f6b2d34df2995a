"""`submit --dry-run`'s cost estimate: the configured epochs at the speed the newest
registered model measured (its `efficiency.json`, written beside it by the export stage),
on the primary configuration's machines, priced as the training step prices its jobs
(`components.capacity.cost`).

The speed is the newest model's, whatever cluster trained it: an estimate for another
cluster or another dataset is as far off as they differ, so the lines name the model and
its figures. Tuning trials, queueing and provisioning are not counted.
"""

from __future__ import annotations

import json
from typing import Any

from components.capacity.cost import PRICES_READ, hourly, priced
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from trainer.common.errors import ProjectError


def seconds_per_epoch(figures: dict[str, Any]) -> float | None:
    """A run's training seconds per epoch from its efficiency figures."""
    epochs = max((len(r.get("epochs", [])) for r in figures.get("replicas", {}).values()),
                 default=0)
    seconds = figures.get("cluster", {}).get("train_seconds") or 0
    return seconds / epochs if epochs and seconds else None


def _measured(config: Config, clients: Clients) -> tuple[str, dict[str, Any]] | None:
    """(the model version, its efficiency figures) of the newest registered model that
    has them."""
    from components.training.efficiency import FILE
    from pipelines.vertex.model_registry import list_models

    storage = clients.get_storage()
    for model in list_models(config, clients):
        uri = model.artifact_uri.rstrip("/")
        if not uri.startswith("gs://"):
            continue
        bucket, _, path = uri[len("gs://"):].partition("/")
        blob = storage.bucket(bucket).blob(f"{path}/{FILE}")
        if blob.exists():
            return f"{model.name}@{model.version_id}", json.loads(blob.download_as_text())
    return None


def estimate_lines(config: Config, clients: Clients) -> list[str]:
    """What the dry run says of the cost; reading the registry never fails the dry run."""
    prices = priced(config.vertex.prices)
    rate, unpriced = hourly(config.vertex.pools, prices)
    epochs = config.training_options().total_epochs
    head = (f"cost estimate: the primary configuration's machines cost {rate:.2f} USD an "
            f"hour (prices of {PRICES_READ}"
            + (f"; without a price for {', '.join(unpriced)}: give it in vertex.prices"
               if unpriced else "") + ")")
    try:
        found = _measured(config, clients)
    except ProjectError as exc:
        return [head, f"  no measured speed: {exc}"]
    per_epoch = seconds_per_epoch(found[1]) if found else None
    if not found or not per_epoch:
        return [head, "  no measured speed yet: the first registered model carries "
                      "efficiency.json, and the next dry run estimates from it"]
    name, figures = found
    hours = per_epoch * epochs / 3600
    return [head, f"  {epochs} epoch(s) at {per_epoch:.0f} s each, as {name} measured "
                  f"({figures['cluster']['images_per_second']:.0f} images/s on its cluster): "
                  f"about {hours:.2f} h, {rate * hours:.2f} USD (without tuning trials, "
                  "queueing and provisioning)"]
