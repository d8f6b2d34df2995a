"""Capacity known before the run: `submit` holds each configuration's needs against the
project's Vertex AI quotas (`components.capacity.quotas`) before anything is built.

The primary configuration's quota below its need is refused, with the numbers and where an
increase is asked for; a fallback's is a warning (the launcher skips it while it lasts).
What the region's active CustomJobs hold is a warning too: they may end before this run's
training starts. A tuning job's parallel trials multiply the primary's need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.capacity import quotas
from components.gpu.alternatives import Alternative
from components.serving.deploy_stage import canary_needs
from pipelines.config import Config
from pipelines.vertex.clients import Clients
from trainer.common.cloud_calls import remote_call


def planned_needs(config: Config) -> list[tuple[Alternative, list[quotas.Need]]]:
    """Each alternative with the quota it needs (the primary's times the study's parallel
    trials, which run on its pools)."""
    trials = config.tuning.parallel_trials if config.tuning.enabled else 1
    return [(a, quotas.needs(a.pools, a.region, a.scheduling_strategy,
                             trials if a.index == 0 else 1)) for a in config.alternatives()]


def check_capacity(config: Config, clients: Clients, *, dry_run: bool,
                   log: Callable[[str], None], verbose: bool = False,
                   sent: list[Any] | None = None) -> list[quotas.Quota]:
    """Reads the quotas (or, with `dry_run`, shows the requests it would send: in full
    with `verbose`, kept in `sent` for a JSON document) and holds every alternative's needs
    against them; returns the primary's.

    Raises:
        QuotaError: The primary configuration needs more than a quota allows.
    """
    from google.cloud import aiplatform_v1, cloudquotas_v1

    from pipelines.vertex.dry_run import show

    project, planned = config.vertex.project, planned_needs(config)
    if dry_run:
        log("quota: submit would read the project's Vertex AI quotas with:")
        show(cloudquotas_v1.ListQuotaInfosRequest(parent=quotas.quota_parent(project)), log,
             verbose=verbose, sent=sent)
        for region in sorted({a.region for a, _ in planned}):
            show(aiplatform_v1.ListCustomJobsRequest(
                parent=f"projects/{project}/locations/{region}",
                filter=quotas.active_jobs_filter()), log, verbose=verbose, sent=sent)
        for alternative, needed in planned:
            for need in needed:
                log(f"quota: {alternative.label} needs {need.amount} of {need.metric} in "
                    f"{need.region} ({need.what})")
        for need in canary_needs(config.vertex):
            log(f"quota: the deploy stage's canary needs {need.amount} of {need.metric} in "
                f"{need.region} ({need.what})")
        check_reservations(config, clients, dry_run=True, log=log)
        return []
    with remote_call("reading the Vertex AI quotas"):
        infos = quotas.read_quota_infos(clients.get_quotas(), project)
    held: dict[str, dict[str, int]] = {}

    def used(region: str) -> dict[str, int]:
        if region not in held:
            with remote_call(f"listing the active CustomJobs in {region}"):
                held[region] = quotas.in_use(clients.get_jobs(region), project, region)
        return held[region]

    primary: list[quotas.Quota] = []
    for alternative, needed in planned:
        found = quotas.check(needed, infos, used)
        if alternative.index == 0:
            primary = found
        for quota in found:
            if quota.refused and alternative.index:
                log(f"warning: quota: {alternative.label} cannot run while "
                    f"{quota.describe(project)}; the training step skips it")
            elif quota.busy:
                log(f"warning: quota: {alternative.label}: {quota.describe(project)}, which "
                    "leaves less than it needs until they end")
            elif not quota.refused:
                log(f"quota: {alternative.label}: {quota.describe(project)}")
    # The deploy stage reads the serving quota again before its canary; a refusal then
    # leaves the champion serving, so here it is a warning, not a reason to stop.
    for quota in quotas.check(canary_needs(config.vertex), infos):
        if quota.refused:
            log(f"warning: quota: the deploy stage's canary cannot be deployed while "
                f"{quota.describe(project)}; the champion would keep serving")
        elif quota.limit is not None:
            log(f"quota: the deploy stage's canary: {quota.describe(project)}")
    check_reservations(config, clients, dry_run=False, log=log)
    refused = [q for q in primary if q.refused]
    if refused:
        raise quotas.QuotaError(
            "the primary configuration needs more than the project's quota allows (nothing "
            "was uploaded, built or submitted):\n"
            + "\n".join(f"  - {q.describe(project)}" for q in refused)
            + "\nor train elsewhere: vertex.region, vertex.worker_pool_specs or "
              "vertex.scheduling_strategy (Spot and FLEX_START count against the "
              "preemptible quotas)")
    return primary


def check_reservations(config: Config, clients: Clients, *, dry_run: bool,
                       log: Callable[[str], None]) -> None:
    """Reads each reservation a configuration names (or, with `dry_run`, says which it
    would read) and holds the configuration against it: a reservation that cannot hold the
    primary configuration is refused, one line per reason naming both sides; a fallback's
    is a warning (the training step skips it while it cannot).

    Raises:
        ReservationUnfitError: The primary configuration's reservation cannot hold it, or
            a reservation does not exist or cannot be read.
    """
    from components.capacity.reserved import (
        COMPUTE_ENDPOINT,
        ReservationUnfitError,
        held,
        reader,
        url,
    )
    from components.gpu.alternatives import reservations_named

    if not reservations_named(config.vertex):  # the plans are made only when one is named
        return
    alternatives = [a for a in config.alternatives() if any(
        p and p.reserved and p.reserved.holds_capacity for p in a.pools)]
    if dry_run:  # no session: a dry run needs no credentials
        names = sorted({p.reserved.name for a in alternatives for p in a.pools
                        if p and p.reserved and p.reserved.holds_capacity})
        log("reservation: submit would read " + ", ".join(
            f"GET {url(n, clients.compute_endpoint or COMPUTE_ENDPOINT)}" for n in names))
        return
    session, endpoint = clients.get_compute()
    read, project, refused = reader(session, endpoint), config.vertex.project, []
    for alternative in alternatives:
        with remote_call(f"reading the reservations of {alternative.label}"):
            found = held(alternative, read, project)
        for one in found:
            lines = [*one.wrong, *([one.short] if one.short else [])]
            if not lines:
                log(f"reservation: {alternative.label}: {one.reservation.words()} holds it")
            elif alternative.index == 0:
                refused += lines
            else:
                log(f"warning: reservation: {alternative.label} cannot run while "
                    + "; ".join(lines) + "; the training step skips it")
    if refused:
        raise ReservationUnfitError(
            "the primary configuration's reservation cannot hold it (nothing was uploaded, "
            "built or submitted):\n" + "\n".join(f"  - {line}" for line in refused)
            + "\nor give the primary configuration reservation: none, any, or another one")
