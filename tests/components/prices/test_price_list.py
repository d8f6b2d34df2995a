"""Prices read with Google's own CloudCatalogClient from the fake Cloud Billing Catalog API
on loopback (`tests.support.billing_catalog`): every GPU and machine priced in its region,
a missing SKU named, an ambiguous one refused, the cache and the shipped table when the
catalog cannot be read."""

from __future__ import annotations

import pytest

from components.capacity.cost import rate
from components.gpu import catalog as cat
from components.gpu.worker_pool import parse_pools
from components.prices import price_cache, shipped_table
from components.prices.price_list import AmbiguousPriceError, PriceBook, price_of
from components.prices.sku_match import COMPUTE_ENGINE, VERTEX_AI, Sku, one, words
from tests.support import billing_catalog as fake_catalog

REGION_FACTOR = {region: factor for region, (_, _, factor) in fake_catalog.REGIONS.items()}


@pytest.fixture
def catalog():
    with fake_catalog.serving() as fake:
        yield fake


def _book(fake, **kwargs):
    return PriceBook(client=lambda: fake_catalog.client_for(fake), **kwargs)


@pytest.mark.parametrize("region", ["us-central1", "europe-west4"])
@pytest.mark.slow
def test_every_catalog_gpu_and_machine_is_priced_at_its_region_s_prices(catalog, region):
    prices = _book(catalog, today="2026-11-28").region(region)
    factor = REGION_FACTOR[region]
    assert prices.words() == f"{region} prices of 2026-11-28, from the Cloud Billing Catalog API"
    for gpu, (_, base) in fake_catalog.GPUS.items():
        on_demand = price_of(prices, gpu)
        assert on_demand.usd == pytest.approx(base * factor)
        assert len(on_demand.skus) == 1
        # Spot and Flex-start: Compute Engine's SKU plus Vertex AI's management fee.
        compute = base * factor * fake_catalog.CE
        fee = compute * fake_catalog.FEE
        assert price_of(prices, gpu, "SPOT").usd == pytest.approx(compute * fake_catalog.SPOT
                                                                  + fee)
        assert price_of(prices, gpu, "FLEX_START").usd == pytest.approx(
            compute * fake_catalog.FLEX + fee)
        assert len(price_of(prices, gpu, "SPOT").skus) == 2
    # A machine: its vCPUs and GB at its family's core and RAM prices.
    core, ram = fake_catalog.FAMILIES["A3"]
    assert price_of(prices, "a3-highgpu-8g").usd == pytest.approx(
        (208 * core + 1872 * ram) * factor)
    core, ram = fake_catalog.FAMILIES["N1 Predefined"]
    assert price_of(prices, "n1-standard-16").usd == pytest.approx((16 * core + 60 * ram) * factor)
    core, ram = fake_catalog.FAMILIES["A3Ultra"]
    assert price_of(prices, "a3-ultragpu-8g").usd == pytest.approx(
        (224 * core + 2952 * ram) * factor)
    core, ram = fake_catalog.FAMILIES["E2"]  # the pipeline's own steps
    assert price_of(prices, "e2-standard-4").usd == pytest.approx((4 * core + 16 * ram) * factor)


@pytest.fixture
def large_catalog():
    """The fake catalog with Vertex AI's thousands of unrelated SKUs."""
    filled = fake_catalog.catalog(filler=fake_catalog.FILLER)
    with fake_catalog.serving(fake_catalog.FakeCatalog(filled)) as fake:
        yield fake


@pytest.mark.slow
def test_the_catalog_is_read_in_pages_and_once_a_day(large_catalog):
    catalog = large_catalog
    book = _book(catalog, today="2026-11-28")
    book.region("us-central1")
    book.region("europe-west4")
    vertex = [q for p, q in catalog.requests if VERTEX_AI in p]
    compute = [q for p, q in catalog.requests if COMPUTE_ENGINE in p]
    # Vertex AI's 5,000-odd SKUs take two pages; the second asked by the first's token.
    assert [q.get("pageToken") for q in vertex] == [None, ["5000"]]
    assert all(q["pageSize"] == ["5000"] and q["currencyCode"] == ["USD"] for q in vertex)
    assert len(compute) == 1
    # Read once a day: the next book that day takes the cache, without a request.
    asked = len(catalog.requests)
    again = _book(catalog, today="2026-11-28").region("europe-west4")
    assert len(catalog.requests) == asked
    assert again.words().endswith("from the Cloud Billing Catalog API (cached)")
    assert (price_cache.cache_root() / "2026-11-28" / "europe-west4.json").is_file()
    # --refresh reads it again.
    _book(catalog, today="2026-11-28", refresh=True).region("europe-west4")
    assert len(catalog.requests) == asked + 3


def test_a_type_without_a_sku_in_the_region_is_named_unpriced(catalog):
    prices = _book(catalog).region("asia-east1")  # the fake has no H200 there
    pools = parse_pools([{"machineSpec": {"machineType": "a3-ultragpu-8g", "acceleratorType":
                                          cat.H200, "acceleratorCount": 8}, "replicaCount": 1}])
    found = rate(pools, prices)
    assert found.unpriced == (cat.H200,)
    assert found.usd == pytest.approx(price_of(prices, "a3-ultragpu-8g").usd)


def test_two_skus_for_one_type_are_refused_naming_both_unless_given():
    with fake_catalog.serving(fake_catalog.FakeCatalog(
            fake_catalog.catalog(ambiguous=(cat.T4,)))) as fake:
        prices = _book(fake).region("us-central1")
        with pytest.raises(AmbiguousPriceError) as refused:
            price_of(prices, cat.T4)
        message = str(refused.value)
        assert message.startswith("the Cloud Billing Catalog API has more than one SKU for "
                                  "NVIDIA_TESLA_T4 in us-central1: ")
        assert "'Vertex AI: Training/Pipelines on Nvidia Tesla T4 in Iowa'" in message
        assert "(second listing)" in message
        assert message.endswith("give its price in vertex.prices (USD per hour)")
        # The other types are priced; a price given for the type settles it.
        assert price_of(prices, cat.L4).usd is not None
        given = _book(fake, overrides={cat.T4: 0.4}).region("us-central1")
        assert price_of(given, cat.T4).usd == 0.4


def test_the_cache_then_the_shipped_table_stand_in_when_the_catalog_cannot_be_read(catalog):
    _book(catalog, today="2026-11-27").region("europe-west4")
    catalog.down = True
    lines: list[str] = []
    book = _book(catalog, today="2026-11-28", log=lines.append)
    cached = book.region("europe-west4")
    assert cached.words() == ("europe-west4 prices of 2026-11-27, cached from the Cloud "
                              "Billing Catalog API (unread today)")
    assert price_of(cached, cat.T4).usd == pytest.approx(0.4025 * 1.1)
    # Read 31 days later, the same cache is said to be stale (and still used).
    stale = _book(catalog, today="2026-12-28").region("europe-west4")
    assert stale.read == "2026-11-27" and "31 days old: stale" in stale.words()
    assert "stale" not in _book(catalog, today="2026-12-27").region("europe-west4").words()
    # Nothing cached for us-central1: the shipped table, dated; the error said once.
    shipped = book.region("us-central1")
    assert shipped.words() == f"us-central1 prices of {shipped_table.READ}, from the " \
                              "shipped table"
    # Compute Engine's T4 (0.35) as Vertex AI's: the 0.4025 Vertex AI lists.
    assert price_of(shipped, cat.T4).usd == pytest.approx(0.4025, abs=1e-6)
    assert len(lines) == 1 and lines[0].startswith(
        "prices: the Cloud Billing Catalog API's SKUs of services/C7E2-9256-1C43 could not "
        "be read (Forbidden: 403 ")
    # Another region: its own prices (the T4 in Taiwan lists at 0.35 too, the machine not).
    taiwan = book.region("asia-east1")
    assert price_of(taiwan, "n1-standard-8").usd == pytest.approx(5.27995 / 12 * 1.15)
    assert book.region("africa-south1").words().endswith(
        "from the shipped table (which has nothing for africa-south1)")
    assert price_of(book.region("africa-south1"), cat.T4).usd is None


@pytest.mark.usefixtures("hand_prices")
def test_spot_without_its_own_price_is_priced_on_demand_and_said():
    prices = PriceBook({"n1-standard-8": 0.5, cat.T4: 0.35,
                        f"SPOT:{cat.T4}": 0.1}).region("us-central1")
    spot = price_of(prices, "n1-standard-8", "SPOT")
    assert (spot.usd, spot.on_demand) == (0.5, True)
    assert price_of(prices, cat.T4, "SPOT").usd == 0.1
    # Prediction nodes are never priced as training.
    assert price_of(prices, "n1-standard-8", "PREDICTION").usd is None


def _sku(description, regions=("us-central1",)):
    return Sku("X", description, tuple(regions), "h", 1.0)


def test_descriptions_are_matched_on_their_documented_words():
    assert words("Vertex AI: Training/Pipelines on A3 Ultra Instance Core in Iowa") == \
        words("Vertex AI: Training/Pipelines on A3Ultra Instance Core in Iowa")
    skus = [_sku("Vertex AI: Training/Pipelines on A3 Instance Core in Iowa"),
            _sku("Vertex AI: Training/Pipelines on A3Ultra Instance Core in Iowa"),
            _sku("Vertex AI: Training/Pipelines management fee on A3 Instance Core in Iowa"),
            _sku("Commitment v1: Nvidia Tesla T4 GPU running in Americas"),
            _sku("Nvidia Tesla T4 Virtual Workstation GPU attached to Spot Preemptible VMs"),
            _sku("Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas"),
            _sku("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa"),
            # Google writes Mega after the memory ("Nvidia H100 80GB Mega GPU running in
            # Frankfurt"); the words decide, not their order.
            _sku("Vertex AI: Training/Pipelines on Nvidia H100 80GB Mega in Iowa")]
    assert one(skus, "training", "CORE:a3-highgpu", "us-central1") is skus[0]
    assert one(skus, "training", "CORE:a3-ultragpu", "us-central1") is skus[1]
    assert one(skus, "fee", "CORE:a3-highgpu", "us-central1") is skus[2]
    assert one(skus, "spot", cat.T4, "us-central1") is skus[5]  # not the workstation's
    assert one(skus, "training", cat.H100_80GB, "us-central1") is skus[6]
    assert one(skus, "training", cat.H100_MEGA, "us-central1") is skus[7]
    assert one(skus, "training", cat.H100_80GB, "europe-west4") is None  # not its region


def test_the_category_decides_what_the_words_alone_would_not():
    """Google lists a Spot B200 slice with usageType OnDemand, and commitments or
    preemptible copies whose words look like an on-demand GPU's: the category and the
    words together decide."""
    def sku(description, group, usage):
        return Sku("X", description, ("us-central1",), "h", 1.0, "", group, usage)

    committed = sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "Commit1Yr")
    preemptible = sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "Preemptible")
    on_demand = sku("Nvidia Tesla T4 GPU running in Americas", "GPU", "OnDemand")
    b200_spot = sku("Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas",
                    "GPU", "OnDemand")
    b200 = sku("A4 Nvidia B200 (1 gpu slice) running in Americas", "GPU", "OnDemand")
    core_as_gpu = sku("Vertex AI: Training/Pipelines on A3 Instance Core in Iowa", "GPU",
                      "OnDemand")
    assert one([committed, preemptible], "spot", cat.T4, "us-central1") is None
    assert one([b200, b200_spot], "spot", cat.B200, "us-central1") is b200_spot
    assert one([core_as_gpu], "training", "CORE:a3-highgpu", "us-central1") is None
    # Vertex AI's on-demand T4, beside its preemptible and committed look-alikes.
    vertex = [sku("Vertex AI: Training/Pipelines on Nvidia Tesla T4 GPU in Iowa", "GPU", u)
              for u in ("OnDemand", "Preemptible", "Commit3Yr")]
    assert one(vertex, "training", cat.T4, "us-central1") is vertex[0]
    assert on_demand.kind() == ""  # Compute Engine's on-demand bills no Vertex AI job
