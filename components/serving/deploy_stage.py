"""Stage 6, deploy: a model the gate made the default rolled out on the configured
endpoint as a canary (`components.serving.rollout`), on Vertex AI or on this machine, and
the rollout recorded beside the model (`decision.json`, `lineage.json`), in the local
registry and in the run's record for its summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.serving.rollout import Rollout, roll_out
from trainer.common import files

if TYPE_CHECKING:
    from components.capacity.quotas import Need
    from components.vertex_options import VertexOptions


def canary_needs(options: VertexOptions) -> list[Need]:
    """What the canary's replicas hold of the serving quota (`vertex` options; none
    without an endpoint): `components.capacity.quotas.Need`s."""
    from components.capacity import quotas

    rule = options.deploy
    if not rule.endpoint:
        return []
    return quotas.serving_needs(rule.machine_spec(), rule.max_replica_count, options.region)


def serving_quota_refusals(project: str, options: VertexOptions, client: Any = None) -> list[str]:
    """What the project's serving quota refuses of the canary's replicas (Cloud Quotas),
    each in words; a quota the project does not list is not checked."""
    from components.capacity import quotas
    from trainer.common.cloud_calls import remote_call

    needed = canary_needs(options)
    with remote_call("reading the project's Vertex AI quotas"):
        infos = quotas.read_quota_infos(client or quotas.quotas_client(), project)
    return [q.describe(project) for q in quotas.check(needed, infos) if q.refused]


def canary_budget(options: VertexOptions, spent: Callable[[], float | None]
                  ) -> tuple[float | None, str]:
    """The canary's watch window under `vertex.budget_usd` (`budget.canary_window`): its
    nodes (`max_replica_count` of them) at their prediction prices in the run's region,
    and the old model's for `deploy.grace_period` after a promotion, beside what the run
    has cost so far (`spent`, read only under a budget)."""
    from components.capacity.budget import canary_window
    from components.capacity.cost import rate
    from components.durations import duration_seconds
    from components.prices.price_list import PriceBook

    rule = options.deploy
    window = duration_seconds(rule.watch_window) or 0.0
    if options.budget_usd <= 0:
        return window, ""
    found = rate([rule.nodes()], PriceBook.of(options).region(options.region), "PREDICTION")
    return canary_window(options.budget_usd, spent(), found.usd,
                         [f"PREDICTION:{kind}" for kind in found.unpriced], window,
                         duration_seconds(rule.check_interval) or 60.0,
                         duration_seconds(rule.grace_period) or 0.0)


def deploy_on_vertex(project: str, options: VertexOptions, model: str, job_name: str,
                     log: Callable[[str], None], clients: Any = None,
                     quotas: Any = None,
                     spent: Callable[[], float | None] | None = None,
                     pipeline_job: str = "") -> Rollout:
    """Rolls `model` (`projects/.../models/ID@VERSION`) out on `options.deploy.endpoint`.

    Args:
        project: The Google Cloud project.
        options: The run's `VertexOptions`.
        model: The new model version's resource name.
        job_name: The pipeline job's name (marks the canary for the exit handler).
        log: Where progress goes.
        clients: The API clients (`vertex_endpoint.Clients`); default: the real ones.
        quotas: The Cloud Quotas client; default: the real one.
        spent: What the run has cost so far (None: unknown), read only under
            `vertex.budget_usd`; default: the run's resources by its billing label
            and its steps so far (`run_cost.of_run`).
        pipeline_job: The run's resource name (its steps, Dataflow job and build are
            part of what it has cost); "" leaves them out.
    """
    from components.serving import vertex_endpoint as vertex

    refused = serving_quota_refusals(project, options, quotas)
    if refused:
        record = Rollout("not deployed", "the serving quota does not allow it: "
                         + "; ".join(refused))
        log(f"deploy: not deployed; {record.reason}; the champion keeps serving")
        return record
    window, why = canary_budget(options, spent or (lambda: _spent_so_far(
        project, options, log, pipeline_job)))
    if why:
        log(why)
    if window is None:
        return Rollout("not deployed", why.removeprefix("budget: "))
    if why:  # a shorter window: what the budget leaves
        options = options.model_copy(update={"deploy": options.deploy.model_copy(
            update={"watch_window": f"{window:.0f}s"})})
    clients = clients or vertex.clients_for(options.region)
    endpoint = vertex.find_or_create(clients, project, options.region, options.deploy.endpoint,
                                     encryption_key=options.encryption_key,
                                     private=options.deploy.private_service_connect)
    log(f"deploy: endpoint {endpoint.name} ({endpoint.display_name})")
    target = vertex.VertexEndpoint(clients, endpoint, model, options.deploy, job_name)
    return roll_out(target, options.deploy, log=log)


def _spent_so_far(project: str, options: VertexOptions, log: Callable[[str], None],
                  pipeline_job: str) -> float | None:
    from components.capacity.run_cost import of_run

    cost, said = of_run(project, options, pipeline_job)
    if cost is None:
        log(f"budget: what the run has cost so far: {said}")
        return None
    return float(cost["usd"])


def restore_on_vertex(project: str, options: VertexOptions, job_name: str,
                      clients: Any = None) -> str | None:
    """The exit handler's part on Vertex AI: a canary the run left behind (the deploy
    step killed mid-canary) is undeployed and the champion given all the traffic back.
    Returns what was done, or None."""
    from components.serving import vertex_endpoint as vertex

    if not options.deploy.endpoint:
        return None
    clients = clients or vertex.clients_for(options.region)
    endpoint = vertex.find_or_create(clients, project, options.region, options.deploy.endpoint,
                                     create=False)
    return vertex.restore_champion(clients, endpoint, job_name) if endpoint else None


def deploy_locally(registry_root: str, options: VertexOptions, job_name: str, dataset_dir: str,
                   log: Callable[[str], None]) -> Rollout | None:
    """The local run's rollout of the version its export stage registered, when the gate
    made it the default and `vertex.deploy.endpoint` is set; None when there is nothing to
    deploy."""
    from components.export import local_registry
    from components.serving.local_endpoint import LocalEndpoint

    if not options.deploy.endpoint:
        return None
    run = local_registry.run_record(registry_root, job_name)
    made = json.loads(run.read_text()) if run.is_file() else {}
    version = made.get("registered_version")
    if not (made.get("default") and version):
        log("deploy: nothing to deploy (the gate made no new default version)")
        return None
    model_dir = Path(registry_root) / options.model_display_name
    target = LocalEndpoint(model_dir, version, dataset_dir, options.deploy)
    try:
        record = roll_out(target, options.deploy, log=log, sleep=target.sleep,
                          clock=target.clock)
    finally:
        target.close()
    files.write_json(run, {**made, "rollout": record.to_dict()})
    local_registry.add_to_decision(model_dir, version, rollout=record.to_dict())
    record_beside_model(local_registry.served(registry_root, model_dir.name, version)[1], record)
    return record


def record_beside_model(saved_model_dir: str | Path, record: Rollout) -> None:
    """The rollout in the exported model's `decision.json` and `lineage.json`."""
    for name in ("decision.json", "lineage.json"):
        path = Path(saved_model_dir) / name
        if path.is_file():
            files.write_json(path, {**json.loads(path.read_text()), "rollout": record.to_dict()})

