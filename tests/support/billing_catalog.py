"""A fake Cloud Billing Catalog API on loopback, for Google's own CloudCatalogClient (REST).

`GET /v1/services/{service}/skus` answers pages of at most 5,000 SKUs (fewer when the
request's `pageSize` asks so) with a `nextPageToken` until the last, as the API does (Cloud
Billing docs, the Catalog API how-to). Its SKUs have the documented shapes (`skuId`,
`description`, `category`, `serviceRegions`, `pricingInfo[].pricingExpression.tieredRates[]
.unitPrice`) and descriptions in the forms public billing exports show; their prices are
made up here (a region's are its base times a factor), so a test can tell one region's
from another's. In the test of paging, several thousand unrelated SKUs (model tokens) make
Vertex AI's listing take two pages; commitment, custom and workstation SKUs sit beside the
ones that bill a job, as in the real catalog.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

from components.gpu import catalog as cat
from components.prices.sku_match import COMPUTE_ENGINE, VERTEX_AI
from tests.support.json_http import json_handler

#: Region -> (the place Vertex AI's SKUs name, the geography Compute Engine's name, the
#: factor over us-central1's prices).
REGIONS = {"us-central1": ("Iowa", "Americas", 1.0),
           "europe-west4": ("Netherlands", "EMEA", 1.1),
           "asia-east1": ("Taiwan", "APAC", 1.16)}
#: GPU type -> (its name in SKUs, Vertex AI's on-demand price an hour in us-central1). The
#: names are Compute Engine's, as the catalog lists them ("Nvidia Tesla T4 GPU running in
#: Americas", "Nvidia Tesla A100 80GB GPU running in Americas", "Nvidia H100 80GB Mega GPU
#: running in Frankfurt", "H200 141GB GPU running in Belgium": public billing data and
#: code that reads the catalog).
GPUS = {cat.T4: ("Nvidia Tesla T4", 0.4025), cat.V100: ("Nvidia Tesla V100", 2.852),
        cat.P100: ("Nvidia Tesla P100", 1.679), cat.P4: ("Nvidia Tesla P4", 0.69),
        cat.L4: ("Nvidia L4", 0.644), cat.A100: ("Nvidia Tesla A100", 3.373),
        cat.A100_80GB: ("Nvidia Tesla A100 80GB", 4.517),
        cat.H100_80GB: ("Nvidia H100 80GB", 11.266),
        cat.H100_MEGA: ("Nvidia H100 80GB Mega", 12.1), cat.H200: ("H200 141GB", 12.9)}
#: Vertex AI's own training SKUs name a GPU as seen in a billing export ("Vertex AI:
#: Training/Pipelines on NVIDIA H100 80GB in Iowa"); the others as Compute Engine does.
VERTEX_NAMES = {cat.H100_80GB: "NVIDIA H100 80GB"}
#: Machine family -> (its name in SKUs, a vCPU's and a GB's price an hour in us-central1).
FAMILIES = {"N1 Predefined": (0.0436, 0.0058), "E2": (0.0252, 0.0034),
            "G2": (0.0282, 0.0033), "A2": (0.0363, 0.0049), "A2 Ultra": (0.0363, 0.0049),
            "A3": (0.0293227, 0.0025534), "A3 Mega": (0.0329, 0.0029),
            "A3Ultra": (0.0361, 0.0032)}
#: Compute Engine's category of a family's cores and RAM: "CPU" and "RAM", but N1's share
#: the group "N1Standard" (Cyclenerd/google-cloud-pricing-cost-calculator's SKU mapping,
#: build/mapping.csv: "CPU and RAM are in the same group").
GROUPS = {"N1 Predefined": ("N1Standard", "N1Standard")}
#: Compute Engine's price is Vertex AI's over 1.15; Spot and Flex-start a share of it, and
#: Vertex AI's management fee another.
CE, SPOT, FLEX, FEE = 1 / 1.15, 0.35, 0.5, 0.15
PAGE_LIMIT = 5000
#: Unrelated SKUs of Vertex AI (model tokens) that fill a first page, in the catalog of
#: the test of paging (`catalog(filler=FILLER)`); the others list without them.
FILLER = 5200


def _sku_id(description: str) -> str:
    digest = hashlib.sha1(description.encode()).hexdigest().upper()
    return f"{digest[:4]}-{digest[4:8]}-{digest[8:12]}"


def sku(service: str, description: str, regions: list[str], usd: float,
        unit: str = "h", usage: str = "OnDemand", group: str = "GPU") -> dict[str, Any]:
    """One SKU in the catalog's REST form."""
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {
        "name": f"services/{service}/skus/{_sku_id(description)}",
        "skuId": _sku_id(description), "description": description,
        "category": {"serviceDisplayName": "Vertex AI" if service == VERTEX_AI
                     else "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": group, "usageType": usage},
        "serviceRegions": regions,
        "pricingInfo": [{"effectiveTime": "2026-11-01T00:00:00Z", "summary": "",
                         "pricingExpression": {
                             "usageUnit": unit, "displayQuantity": 1.0,
                             "usageUnitDescription": "hour" if unit == "h"
                             else "gibibyte hour", "baseUnit": "s",
                             "baseUnitConversionFactor": 3600,
                             "tieredRates": [{"startUsageAmount": 0, "unitPrice": {
                                 "currencyCode": "USD", "units": str(units),
                                 "nanos": nanos}}]}}],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL",
                        "regions": regions}}


def catalog(regions: dict[str, tuple[str, str, float]] = REGIONS,
            missing: frozenset[tuple[str, str]] = frozenset({(cat.H200, "asia-east1")}),
            ambiguous: tuple[str, ...] = (), filler: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The SKUs by service: every GPU and family of FAMILIES in every region (but the
    `missing` (GPU, region) pairs), for on-demand training, Spot, Flex-start, management
    fees and prediction; a second on-demand SKU for each GPU type in `ambiguous`; `filler`
    unrelated SKUs of Vertex AI."""
    vertex: list[dict[str, Any]] = []
    compute: list[dict[str, Any]] = []
    geos: dict[str, list[str]] = {}
    for region, (_, geo, _) in regions.items():
        geos.setdefault(geo, []).append(region)
    for region, (place, _, factor) in regions.items():
        one = [region]
        for gpu, (name, base) in GPUS.items():
            if (gpu, region) in missing:
                continue
            usd = base * factor
            listed = VERTEX_NAMES.get(gpu, name)
            vertex += [sku(VERTEX_AI, f"Vertex AI: Training/Pipelines on {listed} in {place}",
                           one, usd),
                       sku(VERTEX_AI, f"Vertex AI: Training/Pipelines management fee on {name}"
                                      f" in {place}", one, usd * CE * FEE),
                       sku(VERTEX_AI, f"Vertex AI: Online/Batch Prediction {name} GPU running "
                                      f"in {place}", one, usd * 1.05)]
            vertex += [sku(VERTEX_AI, f"Vertex AI: Training/Pipelines on {name} GPU in "
                                      f"{place} (second listing)", one, usd * 0.9)
                       for _ in [0] if gpu in ambiguous]
        for family, (core, ram) in FAMILIES.items():
            for part, usd, unit, group in (("Core", core, "h", "CPU"),
                                           ("RAM", ram, "GiBy.h", "RAM")):
                usd *= factor
                instance = f"{family} Instance {part}"
                vertex += [
                    sku(VERTEX_AI, f"Vertex AI: Training/Pipelines on {instance} running in "
                                   f"{place}", one, usd, unit, group=group),
                    sku(VERTEX_AI, f"Vertex AI: Training/Pipelines Management fee on "
                                   f"{family.replace(' Predefined', '')} Instance {part} in "
                                   f"{place}", one, usd * CE * FEE, unit, group=group),
                    sku(VERTEX_AI, f"Vertex AI: Online/Batch Prediction {instance} running in"
                                   f" {place}", one, usd * 1.05, unit, group=group)]
    for geo, members in geos.items():
        factor = regions[members[0]][2]
        for gpu, (name, base) in GPUS.items():
            offered = [r for r in members if (gpu, r) not in missing]
            usd = base * factor * CE
            compute += [
                sku(COMPUTE_ENGINE, f"{name} GPU running in {geo}", offered, usd),
                sku(COMPUTE_ENGINE, f"{name} GPU attached to Spot Preemptible VMs running in "
                                    f"{geo}", offered, usd * SPOT, usage="Preemptible"),
                sku(COMPUTE_ENGINE, f"{name} GPU attached to DWS Defined Duration VMs running"
                                    f" in {geo}", offered, usd * FLEX),
                sku(COMPUTE_ENGINE, f"Commitment v1: {name} GPU running in {geo}", offered,
                    usd * 0.6, usage="Commit1Yr"),
                # A reservation's GPUs are billed whether used or not: no job's price.
                sku(COMPUTE_ENGINE, f"Reserved {name} GPU running in {geo}", offered, usd),
                sku(COMPUTE_ENGINE, f"{name} Virtual Workstation GPU running in {geo}",
                    offered, usd * 1.2)]
        for family, (core, ram) in FAMILIES.items():
            groups = GROUPS.get(family, ("CPU", "RAM"))
            for part, usd, unit, group in (("Core", core, "h", groups[0]),
                                           ("Ram", ram, "GiBy.h", groups[1])):
                usd *= factor * CE
                compute += [
                    sku(COMPUTE_ENGINE, f"Spot Preemptible {family} Instance {part} running "
                                        f"in {geo}", members, usd * SPOT, unit, "Preemptible",
                        group),
                    sku(COMPUTE_ENGINE, f"DWS Defined Duration {family.split()[0]} "
                                        f"{' '.join(family.split()[1:] + [part])} running in "
                                        f"{geo}".replace("Predefined ", ""), members,
                        usd * FLEX, unit, group=group),
                    sku(COMPUTE_ENGINE, f"{family.split()[0]} Custom Instance {part} running "
                                        f"in {geo}", members, usd * 1.05, unit, group=group)]
    vertex += [sku(VERTEX_AI, f"Gemini model {n} Text Input - Predictions", ["global"],
                   0.0000001 * (n + 1), "count", group="Prediction") for n in range(filler)]
    return {VERTEX_AI: vertex, COMPUTE_ENGINE: compute}


class FakeCatalog:
    """The fake API: `answer` serves a request; `requests` records each (path and query);
    `down` makes every request fail with 503 (the API unreachable for the client's
    retries: they give up on a 503 that lasts)."""

    def __init__(self, skus: dict[str, list[dict[str, Any]]] | None = None):
        self.skus = catalog() if skus is None else skus
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.down = False
        self.url = ""

    def answer(self, method: str, target: str) -> tuple[int, Any]:
        """The API's answer to `method` `target` (a path with its query)."""
        path, _, query = target.partition("?")
        asked = urllib.parse.parse_qs(query)
        self.requests.append((path, asked))
        parts = path.strip("/").split("/")
        if method != "GET" or parts[:2] != ["v1", "services"] or parts[3:] != ["skus"]:
            return 404, {"error": {"code": 404, "message": f"no route {path}",
                                   "status": "NOT_FOUND"}}
        if self.down:
            return 403, {"error": {"code": 403, "message": "Cloud Billing API has not been "
                                   "used in project emulated or it is disabled",
                                   "status": "PERMISSION_DENIED"}}
        listed = self.skus.get(parts[2], [])
        size = min(int((asked.get("pageSize") or [PAGE_LIMIT])[0]) or PAGE_LIMIT, PAGE_LIMIT)
        start = int((asked.get("pageToken") or ["0"])[0])
        page = {"skus": listed[start:start + size]}
        if start + size < len(listed):
            page["nextPageToken"] = str(start + size)
        return 200, page


@contextlib.contextmanager
def serving(fake: FakeCatalog | None = None) -> Iterator[FakeCatalog]:
    """`fake` (a new one by default) on a free port of 127.0.0.1; `fake.url` is its root."""
    fake = fake or FakeCatalog()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), json_handler(lambda handler, method, body:
                                       fake.answer(method, handler.path)))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def client_for(fake: FakeCatalog) -> Any:
    """Google's CloudCatalogClient talking to `fake` (REST, no account)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import billing_v1

    return billing_v1.CloudCatalogClient(
        transport="rest", credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake.url})
