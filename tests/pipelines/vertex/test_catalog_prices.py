"""`submit --dry-run` and `gpu-pipeline prices` with prices read by Google's own
CloudCatalogClient from the fake Cloud Billing Catalog API on loopback: every GPU family
priced, GPU and machine, without `vertex.prices`, in us-central1 and in europe-west4 at
each region's own prices; a budget between two configurations keeps the cheaper one."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml

from components.capacity.budget import check
from components.gpu import catalog as cat
from components.prices import catalog as price_catalog
from components.prices import shipped_table
from pipelines.cli import main
from pipelines.vertex.clients import Clients
from pipelines.vertex.cost_estimate import NewestSpeed, _estimates, estimate_lines
from tests.support import billing_catalog as fake_catalog
from tests.support.google_fakes import model_pages
from tests.support.launches import config, pools
from tests.support.paths import ROOT

# Exercised here without an import, through the command line: `pipelines.commands.prices`.

FAMILIES = {
    cat.T4: ("n1-standard-8", 1, "N1 Predefined", 8, 30),
    cat.V100: ("n1-standard-8", 1, "N1 Predefined", 8, 30),
    cat.P100: ("n1-standard-8", 1, "N1 Predefined", 8, 30),
    cat.P4: ("n1-standard-8", 1, "N1 Predefined", 8, 30),
    cat.L4: ("g2-standard-8", 1, "G2", 8, 32),
    cat.A100: ("a2-highgpu-1g", 1, "A2", 12, 85),
    cat.A100_80GB: ("a2-ultragpu-1g", 1, "A2 Ultra", 12, 170),
    cat.H100_80GB: ("a3-highgpu-8g", 8, "A3", 208, 1872),
    cat.H200: ("a3-ultragpu-8g", 8, "A3Ultra", 224, 2952),
}


@pytest.fixture
def catalog(monkeypatch):
    """The fake catalog, and the default catalog client pointed at it (as a user's
    credentials would reach Google's)."""
    with fake_catalog.serving() as fake:
        monkeypatch.setattr(price_catalog, "catalog_client", lambda: fake_catalog.client_for(fake))
        yield fake


def _speed(cfg):
    return NewestSpeed(cfg, Clients(model_api=_NoModels()))


class _NoModels:
    def list_models(self, request, timeout=None):
        return model_pages(self.list_models, request)


@pytest.mark.parametrize("region", ["us-central1", "europe-west4"])
@pytest.mark.parametrize("gpu", list(FAMILIES))
@pytest.mark.slow
def test_every_gpu_family_is_priced_gpu_and_machine_in_its_region(catalog, gpu, region):
    machine, count, family, vcpus, gb = FAMILIES[gpu]
    spec = {"machine_type": machine, "accelerator_type": gpu, "accelerator_count": count}
    cfg = config(region=region, worker_pool_specs=pools(spec))
    (primary,), _ = _estimates(cfg, _speed(cfg))
    factor = fake_catalog.REGIONS[region][2]
    core, ram = fake_catalog.FAMILIES[family]
    per_machine = (vcpus * core + gb * ram + count * fake_catalog.GPUS[gpu][1]) * factor
    assert primary.unpriced == ()
    assert primary.usd_per_hour == pytest.approx(2 * per_machine)  # a chief and a worker
    assert primary.prices.startswith(f"{region} prices of ")
    assert primary.prices.endswith("from the Cloud Billing Catalog API")


@pytest.mark.parametrize("region", ["us-central1", "europe-west4"])
@pytest.mark.slow
def test_the_example_config_s_dry_run_prices_every_configuration(catalog, region, tmp_path,
                                                                  capsys):
    example = tmp_path / "config.yaml"
    shutil.copy(ROOT / "config.example.yaml", example)
    assert main(["submit", "--config", str(example), "--dry-run", "--region", region]) == 0
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines()
             if re.search(r"\]\s+(primary|fallbacks\[\d\]) \(", line)]
    data = yaml.safe_load(example.read_text())
    assert len(lines) == 1 + len(data["vertex"]["fallbacks"])
    for line in lines:
        assert f"({region} prices of " in line and "from the Cloud Billing Catalog API" in line
        assert "without a price" not in line and "priced on demand" not in line
    # Each region's own prices: europe-west4's are the fake's 1.1 times us-central1's.
    first = float(re.search(r"\): ([0-9.]+) USD an hour", lines[0])[1])
    n1_core, n1_ram = fake_catalog.FAMILIES["N1 Predefined"]
    t4 = fake_catalog.GPUS[cat.T4][1]
    expected = 4 * (16 * n1_core + 60 * n1_ram + 2 * t4)  # 4 x n1-standard-16, 2 T4s each
    assert first == pytest.approx(expected * fake_catalog.REGIONS[region][2], abs=0.006)


def test_a_budget_between_two_configurations_keeps_the_cheaper_one(catalog):
    h100 = {"machine_type": "a3-highgpu-8g", "accelerator_type": cat.H100_80GB,
            "accelerator_count": 8}
    t4 = {"machine_type": "n1-standard-8", "accelerator_type": cat.T4, "accelerator_count": 1}
    cfg = config(worker_pool_specs=pools(h100), timeout="3600s",
                 fallbacks=[{"worker_pool_specs": pools(t4), "region": "europe-west4"}])
    found, _ = _estimates(cfg, _speed(cfg))
    dear, cheap = (e.usd for e in found)
    assert cheap < dear
    held = check(found, (dear + cheap) / 2)
    assert held.kept == (1,) and held.dropped[0].startswith("budget: primary dropped: ")
    lines = estimate_lines(cfg, _speed(cfg))
    assert "fallbacks[0] (europe-west4)" in lines[2] and "europe-west4 prices of" in lines[2]


def test_the_prices_command_shows_the_region_s_prices_with_their_skus(catalog, capsys):
    assert main(["prices", "--region", "europe-west4"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^prices: europe-west4 prices of \d{4}-\d\d-\d\d, from the Cloud Billing "
                     r"Catalog API$", out, re.M)
    # The fake's T4 is 0.4025 USD in us-central1, 1.1 times that here: 0.44275.
    assert re.search(r"^  NVIDIA_TESLA_T4: on demand 0\.442\d \(SKU [0-9A-F-]{14}\); SPOT "
                     r"[0-9.]+ \(SKU [0-9A-F-]{14}, [0-9A-F-]{14}\); FLEX_START", out, re.M), out
    assert re.search(r"^  a3-highgpu: [0-9.]+ a vCPU, [0-9.]+ a GB \(SKUs ", out, re.M)
    # Cached for the day: --refresh reads the catalog again.
    asked = len(catalog.requests)
    assert main(["prices", "--region", "europe-west4"]) == 0
    assert "(cached)" in capsys.readouterr().out and len(catalog.requests) == asked
    assert main(["prices", "--region", "europe-west4", "--refresh"]) == 0
    assert "(cached)" not in capsys.readouterr().out and len(catalog.requests) > asked


def test_the_prices_command_without_the_catalog_says_the_shipped_table(capsys):
    assert main(["prices"]) == 0
    captured = capsys.readouterr()
    assert f"prices: us-central1 prices of {shipped_table.READ}, from the shipped " \
           "table" in captured.out
    assert "the Cloud Billing Catalog API needs Google Cloud credentials" in \
        captured.out + captured.err
