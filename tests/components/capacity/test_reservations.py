"""Reserved GPUs: a pool's (or a fallback's) Compute Engine reservation, carried into the
CustomJob as Vertex AI's `reservationAffinity`, checked against the reservation before the
run, tried first, skipped when full, and priced as what the run adds.

Google's own clients (Vertex AI's JobServiceClient over REST, Resource Manager) run
against the fake APIs on loopback, which serve Compute Engine's `reservations.get` and
refuse a malformed affinity as Vertex AI does (tests/support/vertex_emulator/
reservations.py).
"""

from __future__ import annotations

import json

import pytest
import requests
import yaml
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, cloudquotas_v1

from components.capacity.budget import check, estimates
from components.capacity.launcher import NoCapacityError, launch
from components.capacity.reserved import ReservationUnfitError, reader
from components.capacity.training_hours import Evidence
from components.capacity.vertex_launch import both, reservation_checker
from components.gpu.reservations import KEY, ReservationError, from_affinity, parse
from components.prices.price_list import PriceList
from pipelines.cli import main
from pipelines.config import ConfigError
from pipelines.vertex import capacity as preflight
from pipelines.vertex import iam
from tests.support.facts import missing
from tests.support.google_fakes import iam_clients, rest_client
from tests.support.launches import config, launch_settings, pools
from tests.support.vertex_emulator.reservations import reservation

H100 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8}
NAME = "projects/my-proj/zones/us-central1-a/reservations/h100-pool"


def reserved(machine=H100, workers=1, where="us-central1-a/h100-pool"):
    return [{**pool, "reservation": where} for pool in pools(machine, workers)]


# --- The forms Google takes ----------------------------------------------------------------


def test_a_reservation_is_named_as_vertex_ai_requires_it():
    assert parse("any").affinity() == {"reservation_affinity_type": "ANY_RESERVATION"}
    assert parse("none").affinity() == {"reservation_affinity_type": "NO_RESERVATION"}
    # A short name is completed in the run's project: Vertex AI takes full names only.
    assert parse("us-central1-a/h100-pool", "my-proj").affinity() == {
        "reservation_affinity_type": "SPECIFIC_RESERVATION", "key": KEY, "values": [NAME]}
    shared = "projects/infra-prj/zones/us-central1-b/reservations/team/reservationBlocks/b1"
    assert parse(shared, "my-proj").name == shared  # another project's, named in full
    with pytest.raises(ReservationError, match="vertex.project is empty"):
        parse("us-central1-a/h100-pool")
    with pytest.raises(ReservationError, match=r"is 'h100-pool'; expected any, none, ZONE/NAME"):
        parse("h100-pool", "my-proj")
    # What the API refuses, refused here first.
    for affinity, said in [({}, "reservation_affinity_type"),
                           ({"reservation_affinity_type": "SPECIFIC_RESERVATION",
                             "values": [NAME]}, "with key ''"),
                           ({"reservation_affinity_type": "SPECIFIC_RESERVATION", "key": KEY,
                             "values": ["h100-pool"]}, "one full resource name"),
                           ({"reservation_affinity_type": "ANY_RESERVATION", "key": KEY,
                             "values": [NAME]}, "only SPECIFIC_RESERVATION")]:
        with pytest.raises(ReservationError, match=said):
            from_affinity(affinity)
    assert from_affinity({"reservationAffinityType": "SPECIFIC_RESERVATION", "key": KEY,
                          "values": [NAME]}).name == NAME  # REST's camelCase


def test_what_cannot_consume_a_reservation_is_refused_offline():
    def errors(**vertex):
        with pytest.raises(ConfigError) as raised:
            config(**vertex)
        return str(raised.value)

    # Reserved capacity cannot create Spot VMs; Flex-start provisions its own.
    for strategy in ("SPOT", "FLEX_START"):
        assert not missing(errors(worker_pool_specs=reserved(), scheduling_strategy=strategy),
                           "worker_pool_specs[0] (chief)", NAME, strategy,
                           "cannot consume reservations")
    # A reservation is zonal: one outside the job's region cannot serve it.
    assert not missing(errors(worker_pool_specs=reserved(where="europe-west4-a/h100-pool")),
                       "zone europe-west4-a", "outside region us-central1")
    assert not missing(errors(worker_pool_specs=reserved(where="h100")), "reservation is 'h100'",
                       "ZONE/NAME", "projects/PROJECT/zones/ZONE/reservations/NAME")
    # Spot without one (and a fallback that says none) is fine.
    spot = config(worker_pool_specs=reserved(), fallbacks=[
        {"scheduling_strategy": "SPOT", "reservation": "none"}])
    assert [a.label for a in spot.alternatives()] == ["primary", "fallbacks[0]"]


# --- Into the spec and the job -------------------------------------------------------------


def test_the_compiled_spec_and_the_job_created_carry_the_reservation_on_both_pools(
        apis, tmp_path):
    (tmp_path / "reserved.yaml").write_text(yaml.safe_dump({"vertex": {
        "project": "my-proj", "region": "us-central1", "worker_pool_specs": reserved()}}))
    assert main(["compile", "--config", str(tmp_path / "reserved.yaml")]) == 0
    spec = yaml.safe_load((tmp_path / "reserved.pipeline.yaml").read_text())
    vertex = spec["root"]["inputDefinitions"]["parameters"]["vertex"]["defaultValue"]
    affinities = [p["machine_spec"]["reservation_affinity"]
                  for p in vertex["worker_pool_specs"]]
    assert affinities == 2 * [{"reservation_affinity_type": "SPECIFIC_RESERVATION",
                               "key": KEY, "values": [NAME]}]
    # The CustomJob the training step creates, through Google's client.
    cfg = config(worker_pool_specs=reserved())
    alternatives, how, _, _ = launch_settings(apis, cfg)
    rest_client(aiplatform_v1.JobServiceClient, apis).create_custom_job(
        parent="projects/my-proj/locations/us-central1", custom_job=how.make_job(
            alternatives[0]))
    sent = aiplatform_v1.CustomJob.from_json(json.dumps(apis.recorded(r"/customJobs$")[0].body))
    assert [(p.machine_spec.reservation_affinity.reservation_affinity_type.name,
             p.machine_spec.reservation_affinity.key,
             list(p.machine_spec.reservation_affinity.values))
            for p in sent.job_spec.worker_pool_specs] == 2 * [
        ("SPECIFIC_RESERVATION", KEY, [NAME])]


def test_the_emulated_vertex_ai_refuses_a_malformed_affinity_as_vertex_ai_does(apis):
    client = rest_client(aiplatform_v1.JobServiceClient, apis)

    def create(affinity, strategy="STANDARD"):
        pool = aiplatform_v1.WorkerPoolSpec(replica_count=1, machine_spec=aiplatform_v1.
                                            MachineSpec(machine_type="n1-standard-8",
                                                        reservation_affinity=affinity))
        return client.create_custom_job(
            parent="projects/my-proj/locations/us-central1",
            custom_job=aiplatform_v1.CustomJob(display_name="j", job_spec={
                "worker_pool_specs": [pool], "scheduling": {"strategy": strategy}}))

    specific = aiplatform_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    with pytest.raises(exceptions.BadRequest, match="SPECIFIC_RESERVATION needs key"):
        create({"reservation_affinity_type": specific, "values": [NAME]})
    with pytest.raises(exceptions.BadRequest, match="reservation_affinity_type is required"):
        create({"key": KEY, "values": [NAME]})
    with pytest.raises(exceptions.BadRequest, match="scheduling strategy SPOT"):
        create({"reservation_affinity_type": specific, "key": KEY, "values": [NAME]}, "SPOT")
    assert create({"reservation_affinity_type": specific, "key": KEY, "values": [NAME]}).name


# --- Before the run ------------------------------------------------------------------------


def test_a_reservation_that_cannot_hold_the_primary_is_refused_naming_both_sides(apis):
    from pipelines.vertex import runs

    apis.compute.add(reservation("my-proj", "us-central1-a", "h100-pool",
                                 machine="a3-highgpu-8g", count=3, in_use=2,
                                 gpus=("nvidia-h100-80gb", 8)))
    apis.compute.add(reservation("my-proj", "us-central1-a", "a100-pool",
                                 machine="a2-highgpu-8g", count=4,
                                 gpus=("nvidia-tesla-a100", 8)))
    apis.quotas = {"custom_model_training_nvidia_h100_gpus": {"us-central1": 32}}
    clients = iam_clients(apis)
    clients.quotas = rest_client(cloudquotas_v1.CloudQuotasClient, apis)
    clients.jobs = rest_client(aiplatform_v1.JobServiceClient, apis)
    with pytest.raises(ReservationUnfitError) as raised:
        runs.submit(config(worker_pool_specs=reserved()), dry_run=False, clients=clients,
                    credentials=AnonymousCredentials(), log=print)
    (line,) = [x for x in str(raised.value).splitlines() if x.startswith("  - ")]
    assert not missing(line, NAME, "1 of its 3 instance(s) unused", "primary needs 2")
    assert apis.recorded(r"/builds$") == [] and not apis.recorded(r"/customJobs$")
    # Read as Compute Engine's own API, in the reservation's project, with the permission
    # the IAM pre-flight asks for.
    assert apis.recorded(r"/reservations/", method="GET")[0].path == f"/compute/v1/{NAME}"
    assert ("Resource Manager", "projects/my-proj") in [
        (c.api, c.resource) for c in iam.checks(config(worker_pool_specs=reserved()))
        if "compute.reservations.get" in c.permissions]
    # Another machine type is refused naming both types; a fallback's only warned.
    other = reserved(where="us-central1-a/a100-pool")
    with pytest.raises(ReservationUnfitError, match="reserves a2-highgpu-8g, the pool runs "
                                                    "a3-highgpu-8g"):
        preflight.check_reservations(config(worker_pool_specs=other), clients, dry_run=False,
                                     log=print)
    lines: list[str] = []
    preflight.check_reservations(config(worker_pool_specs=pools(H100), fallbacks=[
        {"reservation": "us-central1-a/h100-pool"}]), clients, dry_run=False, log=lines.append)
    assert [line.split(" cannot run while ")[0] for line in lines] == [
        "warning: reservation: fallbacks[0]"]
    # A reservation that does not exist is said so.
    with pytest.raises(ReservationUnfitError, match="does not exist"):
        preflight.check_reservations(config(worker_pool_specs=reserved(where="us-central1-a/gone")),
                                     clients, dry_run=False, log=print)


def test_a_reservation_must_let_vertex_ai_consume_it_and_be_shared_with_the_project():
    found = reservation("infra-prj", "us-central1-a", "team", machine="a3-highgpu-8g",
                        count=2, sharing="DISALLOW_ALL")
    name = parse("projects/infra-prj/zones/us-central1-a/reservations/team")
    from components.gpu.reservations import mismatches

    problems = mismatches(found, name, "a3-highgpu-8g", "NVIDIA_H100_80GB", 8, "us-central1",
                          "my-proj")
    assert [p.split(" (")[0].split(": ")[0] for p in problems] == [
        f"{name.words()} does not let Google Cloud services consume it",
        f"{name.words()} belongs to project infra-prj and is not shared with my-proj"]
    shared = reservation("infra-prj", "us-central1-a", "team", machine="a3-highgpu-8g",
                         count=2, shared_with=("my-proj",))
    assert mismatches(shared, name, "a3-highgpu-8g", "NVIDIA_H100_80GB", 8, "us-central1",
                      "my-proj") == []


# --- Tried first, skipped when full --------------------------------------------------------


def test_a_reserved_configuration_is_tried_first_and_a_full_one_falls_through(apis):
    apis.compute.add(reservation("my-proj", "us-central1-a", "t4-pool",
                                 machine="n1-standard-8", count=2, in_use=2,
                                 gpus=("nvidia-tesla-t4", 1)))
    apis.stockouts = {("n1-standard-8", "us-east4")}
    cfg = config(fallbacks=[{"region": "us-east4"},
                            {"reservation": "us-central1-a/t4-pool"}])
    alternatives, how, lines, _ = launch_settings(apis, cfg)
    assert [a.label for a in alternatives] == ["fallbacks[1]", "primary", "fallbacks[0]"]
    how.quota_check = both(reservation_checker(reader(requests.Session(), apis.url),
                                               "my-proj", lines.append), how.quota_check)
    with pytest.raises(Exception) as raised:  # the primary's job then fails (no image)
        launch(alternatives, how)
    assert not isinstance(raised.value, NoCapacityError)
    skipped, tried = lines[0], [line for line in lines if "capacity: primary: created" in line]
    assert not missing(skipped, "fallbacks[1] in us-central1: skipped",
                       "projects/my-proj/zones/us-central1-a/reservations/t4-pool",
                       "0 of its 2 instance(s) unused", "needs 2")
    assert tried, lines  # then the next configuration, said
    created = [r.body for r in apis.recorded(r"/customJobs$")]
    assert len(created) == 1 and "reservationAffinity" not in json.dumps(created[0])


# --- What it costs -------------------------------------------------------------------------


def test_a_reserved_run_adds_only_the_management_fee_and_the_budget_counts_only_that():
    cfg = config(worker_pool_specs=reserved(), fallbacks=[{"reservation": "none"}])
    alternatives = cfg.alternatives()
    evidence = Evidence(epochs=1, timeout="36000s", model="cnn", batch=32, image_size=32,
                        images=1000, images_from="the test")
    prices = PriceList("us-central1", {"NVIDIA_H100_80GB": 11.27, "a3-highgpu-8g": 12.0,
                                       "RESERVED:NVIDIA_H100_80GB": 0.5,
                                       "RESERVED:a3-highgpu-8g": 0.25}, "2026-11-28", "test")

    class Book:
        def region(self, region):
            return prices

    on_reservation, on_demand = estimates(cfg.vertex, alternatives, evidence, Book())
    # 2 machines: (8 x 0.5 + 0.25) each, against (8 x 11.27 + 12.0) each on demand.
    assert on_reservation.usd_per_hour == pytest.approx(2 * (8 * 0.5 + 0.25))
    assert on_demand.usd_per_hour == pytest.approx(2 * (8 * 11.27 + 12.0))
    assert not missing(on_reservation.line(), "reserved: 1 x a3-highgpu-8g", NAME,
                       "0 USD beyond the reservation")
    assert "reserved" not in on_demand.line()
    # Without a price for the fee the reserved hours add nothing priced, and say so.
    bare = PriceList("us-central1", {}, "2026-11-28", "test")

    class Bare:
        def region(self, region):
            return bare

    unpriced_fee, _ = estimates(cfg.vertex, alternatives, evidence, Bare())
    assert unpriced_fee.unpriced == ("RESERVED:a3-highgpu-8g", "RESERVED:NVIDIA_H100_80GB")
    assert not missing(unpriced_fee.line(), "no price,", "0 USD beyond the reservation",
                       "without a price for RESERVED:a3-highgpu-8g")
    assert "0.00 USD" not in unpriced_fee.line()
    # The budget holds the reserved configuration to what it adds.
    kept = check([on_reservation, on_demand], budget=on_reservation.usd + 1)
    assert kept.kept == (0,)


def test_validate_gpu_reads_a_reservation_as_submit_does(tmp_path, capsys):
    path = tmp_path / "reserved.yaml"
    path.write_text(yaml.safe_dump({"vertex": {"project": "my-proj",
                                               "worker_pool_specs": reserved()}}))
    assert main(["validate-gpu", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"on reservation {NAME}" in out and "0 USD beyond the reservation" in out
    path.write_text(yaml.safe_dump({"vertex": {"project": "my-proj", "worker_pool_specs":
                                               reserved(), "scheduling_strategy": "SPOT"}}))
    assert main(["validate-gpu", "--config", str(path)]) == 1  # invalid, as for any GPU rule
    assert "cannot consume reservations" in capsys.readouterr().out
