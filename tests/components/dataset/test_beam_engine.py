"""The Beam dataset engine: the same dataset as the local engine, in process and as a
Dataflow job (Beam's own DataflowRunner against a fake Dataflow API on loopback, staging
on the Cloud Storage emulator)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from components.dataset import dataflow
from components.dataset.dataset_options import DatasetOptions
from components.dataset.prepare import prepare_source
from components.dataset.sources import DatasetError
from tests.support.dataflow_fake import FakeDataflow
from trainer.common import contract, tfrecord
from trainer.common.schema import OptionsError, validate

# Exercised here without an import, through `prepare_source` and the pipeline:
# `components.dataset.beam_engine`.

pytest.importorskip("apache_beam")


def _photos(root: Path) -> Path:
    """A folder source: 3 classes of small photos and one file that is not an image."""
    for label, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        folder = root / f"class{label}"
        folder.mkdir(parents=True)
        for i in range(40):
            Image.new("RGB", (40 + i, 30 + label), (colour[0], i * 5, colour[2])).save(
                folder / f"img{i:03d}.png")
    (root / "class1" / "broken.jpg").write_bytes(b"not a jpeg")
    return root


def _examples(dataset: Path, manifest: dict) -> dict[str, set[tuple[str, int, str]]]:
    """Per split, the set of (identity, label, image digest) its shards hold."""
    import tensorflow as tf

    found = {}
    for split, entry in manifest["splits"].items():
        found[split] = set()
        for shard in entry["shards"]:
            for raw in tfrecord_records(dataset / shard["file"]):
                ex = tf.train.Example.FromString(raw).features.feature
                found[split].add((ex[contract.FEATURE_ID].bytes_list.value[0].decode(),
                                  ex[contract.FEATURE_LABEL].int64_list.value[0],
                                  hashlib.sha256(ex[contract.FEATURE_IMAGE].bytes_list
                                                 .value[0]).hexdigest()))
    return found


def tfrecord_records(path: Path) -> list[bytes]:
    import tensorflow as tf

    return [r.numpy() for r in tf.data.TFRecordDataset(str(path))]


@pytest.mark.slow
def test_beam_engine_writes_the_local_engines_dataset(tmp_path):
    source = _photos(tmp_path / "photos")
    common = dict(image_size=32, validation_fraction=0.25, test_fraction=0.1, input_pipelines=2,
                  max_bad_fraction=0.05)
    local = prepare_source(str(source), tmp_path / "local", engine="local", processes=2,
                           **common)
    beam = prepare_source(str(source), tmp_path / "beam", engine="beam", processes=2,
                          **common)
    for key in ("classes", "examples", "source_fingerprint", "image_format", "skipped",
                "statistics"):
        assert beam[key] == local[key], key
    assert [s["file"] for s in beam["skipped"]] == [str(source / "class1" / "broken.jpg")]
    for split in local["splits"]:
        assert beam["splits"][split]["count"] == local["splits"][split]["count"]
        assert beam["splits"][split]["per_class"] == local["splits"][split]["per_class"]
        assert [s["file"] for s in beam["splits"][split]["shards"]] == \
            [s["file"] for s in local["splits"][split]["shards"]]
        for shard in beam["splits"][split]["shards"]:  # size and hash as written
            data = (tmp_path / "beam" / shard["file"]).read_bytes()
            assert shard["bytes"] == len(data)
            assert shard["sha256"] == hashlib.sha256(data).hexdigest()
    assert _examples(tmp_path / "beam", beam) == _examples(tmp_path / "local", local)
    assert (tmp_path / "beam" / "report.md").read_text() == \
        (tmp_path / "local" / "report.md").read_text()
    assert contract.load_manifest(tmp_path / "beam") == beam


def test_beam_engine_keeps_the_bad_fraction_rule_and_leaves_nothing(tmp_path):
    source = _photos(tmp_path / "photos")
    out = tmp_path / "out"
    with pytest.raises(DatasetError, match=r"1 of 121 images .* above max_bad_fraction 0.0%"):
        prepare_source(str(source), out, image_size=16, engine="beam", processes=1,
                       max_bad_fraction=0.0)
    assert not out.exists()


def test_engine_is_a_declared_option_and_tfds_stays_local():
    assert DatasetOptions().engine == "local"
    with pytest.raises(OptionsError, match=r"dataset.engine is 'spark'; expected one of "
                                           r"local, beam"):
        validate(DatasetOptions, {"engine": "spark"}, prefix="dataset")
    with pytest.raises(OptionsError, match=r"dataset.engine is 'beam', but the source "
                                           r"tfds://mnist .* expected engine 'local'"):
        validate(DatasetOptions, {"engine": "beam", "source": "tfds://mnist"},
                 prefix="dataset")


@pytest.fixture
def dataflow_world(storage_emulator, monkeypatch, tmp_path):
    """The Cloud Storage emulator with a bucket, a stand-in `/gcs/` mount, credentials that
    need no account, and quick polling."""
    import google.auth
    from google.cloud import storage
    from google.oauth2.credentials import Credentials

    from trainer.common import gcs

    storage.Client.create_anonymous_client().create_bucket("bkt")
    mount = tmp_path / "gcs"
    mount.mkdir()
    monkeypatch.setattr(gcs, "GCS_MOUNT", f"{mount}/")
    monkeypatch.setattr(google.auth, "default",
                        lambda *args, **kwargs: (Credentials(token="test"), "test-project"))
    monkeypatch.setattr(dataflow, "POLL_SECONDS", 0.1)
    return mount


IMAGE = "europe-west4-docker.pkg.dev/test-project/repo/gpu-pipeline-cpu@sha256:" + "a" * 64


def _job(fake: FakeDataflow, **options) -> dataflow.DataflowJob:
    settings = DatasetOptions(engine="beam", dataflow_max_workers=7,
                              dataflow_machine_type="n2-highcpu-8", dataflow_flexrs=True,
                              dataflow_network="vpc",
                              dataflow_subnetwork="regions/europe-west4/subnetworks/sub",
                              **options)
    job = dataflow.dataflow_job(settings, project_id="test-project", region="europe-west4",
                                service_account="run@test-project.iam.gserviceaccount.com",
                                sdk_image=IMAGE, output_uri="gs://bkt/root/run/task/dataset")
    return dataclasses.replace(job, endpoint=fake.endpoint)


def _blobs(prefix: str) -> dict[str, bytes]:
    from google.cloud import storage

    client = storage.Client.create_anonymous_client()
    return {b.name: b.download_as_bytes() for b in client.list_blobs("bkt", prefix=prefix)}


def test_dataflow_job_request_and_its_success(dataflow_world):
    from google.cloud import dataflow_v1beta3

    out = dataflow_world / "bkt/root/run/task/dataset"
    with FakeDataflow("run") as fake:
        manifest = prepare_source("builtin://shapes", out, engine="beam",
                                  builtin_images_per_class=30, input_pipelines=2,
                                  dataflow=_job(fake))
    assert fake.run_error is None
    [body] = fake.created()
    job = dataflow_v1beta3.Job.from_json(json.dumps(body))
    assert job.name == dataflow.job_name_for("gs://bkt/root/run/task/dataset")
    [path] = [p for m, p, _ in fake.requests if m == "POST"]
    assert path.startswith("/v1b3/projects/test-project/locations/europe-west4/jobs")
    environment = job.environment
    assert environment.temp_storage_prefix.startswith(
        "storage.googleapis.com/bkt/root/run/task/dataflow/temp/")
    assert environment.service_account_email == "run@test-project.iam.gserviceaccount.com"
    assert environment.flex_resource_scheduling_goal == \
        dataflow_v1beta3.FlexResourceSchedulingGoal.FLEXRS_COST_OPTIMIZED
    [pool] = environment.worker_pools
    assert pool.worker_harness_container_image == IMAGE
    assert [c.container_image for c in pool.sdk_harness_container_images] == [IMAGE]
    assert pool.machine_type == "n2-highcpu-8"
    assert pool.autoscaling_settings.max_num_workers == 7
    assert (pool.network, pool.subnetwork) == ("vpc", "regions/europe-west4/subnetworks/sub")
    options = body["environment"]["sdkPipelineOptions"]["options"]
    assert options["sdk_location"] == "container"
    assert options["labels"] == ["pipeline=gpu-pipeline"]
    # The workers wrote the shards to Cloud Storage; the stage wrote the manifest last.
    shards = _blobs("root/run/task/dataset/")
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            data = shards[f"root/run/task/dataset/{shard['file']}"]
            assert shard["sha256"] == hashlib.sha256(data).hexdigest()
            assert len(tfrecord_records_of(data)) == shard["count"]
        assert entry["count"] == sum(s["count"] for s in entry["shards"])
    assert contract.load_manifest(out)["examples"] == 30 * 4
    assert not _blobs("root/run/task/dataflow/temp/" + job.name)  # the plan is removed
    # What the job used, read from its JobMetrics when it ended: the fake reports one
    # n2-highcpu-8 worker (8 vCPUs, 32 GB, a 25 GB disk) for as long as it ran.
    [ran] = fake.jobs.values()
    used = manifest["dataflow_job"]
    assert (used["job"], used["name"], used["region"], used["machine_type"]) == (
        ran.id, job.name, "europe-west4", "n2-highcpu-8")
    seconds = ran.ended - ran.started
    assert used["vcpu_hours"] == pytest.approx(8 * seconds / 3600, abs=1e-3)
    assert used["memory_gb_hours"] == pytest.approx(32 * seconds / 3600, abs=1e-3)
    assert used["disk_gb_hours"] == pytest.approx(25 * seconds / 3600, abs=1e-3)
    assert used["ssd_gb_hours"] == 0 and used["end_time"] >= used["start_time"]
    assert any(p.split("?")[0].endswith(f"/jobs/{ran.id}/metrics")
               for m, p, _ in fake.requests if m == "GET"), fake.requests


def test_a_job_whose_usage_cannot_be_read_still_writes_the_dataset(dataflow_world):
    out = dataflow_world / "bkt/root/run/task/dataset"
    with FakeDataflow("run") as fake:
        fake.metrics_denied = True
        manifest = prepare_source("builtin://shapes", out, engine="beam",
                                  builtin_images_per_class=10, input_pipelines=1,
                                  dataflow=_job(fake))
    assert manifest["examples"] == 10 * 4
    unread = manifest["dataflow_job"]["unread"]
    assert "dataflow.metrics.get" in unread and "vcpu_hours" not in manifest["dataflow_job"]


def tfrecord_records_of(data: bytes) -> list[bytes]:
    records, offset = [], 0
    while offset < len(data):
        length = int.from_bytes(data[offset:offset + 8], "little")
        records.append(data[offset + 12:offset + 12 + length])
        offset += 12 + length + 4
    assert tfrecord.frame(records[0])[:8] == data[:8]
    return records


def test_a_failed_dataflow_job_fails_the_stage_with_its_error(dataflow_world):
    out = dataflow_world / "bkt/root/run/task/dataset"
    with FakeDataflow("fail", error="Workflow failed. Causes: quota CPUS exceeded") as fake:
        with pytest.raises(dataflow.DataflowJobFailed,
                           match=r"ended in JOB_STATE_FAILED: Workflow failed. Causes: quota "
                                 r"CPUS exceeded; see https://console.cloud.google.com/"
                                 r"dataflow/jobs/europe-west4/2026-job-1"):
            prepare_source("builtin://shapes", out, engine="beam",
                           builtin_images_per_class=10, dataflow=_job(fake))
    assert not out.exists()
    assert not _blobs("root/run/task/dataset/")


def test_a_stopped_stage_cancels_its_dataflow_job(dataflow_world):
    import os
    import signal
    import threading

    out = dataflow_world / "bkt/root/run/task/dataset"
    with FakeDataflow("hang") as fake:
        def terminate_when_running():
            while not fake.jobs:
                threading.Event().wait(0.05)
            threading.Event().wait(0.3)
            os.kill(os.getpid(), signal.SIGTERM)  # what Vertex AI sends a cancelled task

        threading.Thread(target=terminate_when_running, daemon=True).start()
        with pytest.raises(dataflow.DataflowJobFailed, match=r"stopped \(SIGTERM\)"):
            prepare_source("builtin://shapes", out, engine="beam",
                           builtin_images_per_class=10, dataflow=_job(fake))
    [job] = fake.jobs.values()
    assert job.state == "JOB_STATE_CANCELLED"
    assert any(m == "PUT" and b.get("requestedState") in ("JOB_STATE_CANCELLED", 5)
               for m, _, b in fake.requests)
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or \
        callable(signal.getsignal(signal.SIGTERM))


def test_dataflow_workers_read_mounted_images_through_cloud_storage(dataflow_world):
    """A class-folder source on Vertex AI's `/gcs/` mount: the workers, which have no
    mount, are sent each image's `gs://` URI; images on this machine are refused before
    any job starts."""
    from google.cloud import storage

    photos = _photos(dataflow_world / "bkt" / "photos")
    bucket = storage.Client.create_anonymous_client().bucket("bkt")
    for path in photos.rglob("*.*"):
        bucket.blob(str(path.relative_to(dataflow_world / "bkt"))).upload_from_filename(
            str(path))
    local = prepare_source(str(photos), dataflow_world.parent / "local-copy", image_size=32,
                           input_pipelines=2)
    out = dataflow_world / "bkt/root/run/task/dataset"
    with FakeDataflow("run") as fake:
        manifest = prepare_source(str(photos), out, engine="beam", image_size=32,
                                  input_pipelines=2, dataflow=_job(fake))
    assert fake.run_error is None
    assert [s["file"] for s in manifest["skipped"]] == \
        ["gs://bkt/photos/class1/broken.jpg"]
    assert {s: e["per_class"] for s, e in manifest["splits"].items()} == \
        {s: e["per_class"] for s, e in local["splits"].items()}

    elsewhere = _photos(dataflow_world.parent / "laptop" / "photos")
    with FakeDataflow("run") as fake:
        with pytest.raises(DatasetError, match=r"a Dataflow job reads images from Cloud "
                                               r"Storage, but 121 of 121 images are paths on "
                                               r"this machine \(first: '.*laptop/photos/"):
            prepare_source(str(elsewhere), out.parent / "again", engine="beam",
                           dataflow=_job(fake))
    assert fake.requests == [] and not (out.parent / "again").exists()


def test_launch_settings_need_the_project_and_the_cpu_image_by_digest():
    images = {"cpu": {"reference": IMAGE}}
    assert dataflow.launch_settings("p", "europe-west4", "", images) == {
        "project_id": "p", "region": "europe-west4", "service_account": "",
        "sdk_image": IMAGE, "kms_key": ""}
    tagged = IMAGE.split("@")[0] + ":src-1"
    with pytest.raises(dataflow.DataflowSettingsError) as error:
        dataflow.launch_settings("", "europe-west4", "", {"cpu": {"reference": tagged}})
    assert str(error.value) == (
        "project is empty; expected the Google Cloud project of the run; "
        f"images.cpu.reference is '{tagged}'; expected the CPU image the build stage made, "
        "by digest (REPOSITORY/NAME@sha256:...), which the Dataflow workers run")


def test_submit_dry_run_shows_the_dataflow_job(tmp_path, capsys):
    import yaml

    from components import images
    from pipelines.cli import main

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({
        "dataset": {"source": "gs://my-bucket/photos", "engine": "beam",
                    "dataflow_max_workers": 20, "dataflow_flexrs": True},
        "vertex": {"service_account": "run@my-project.iam.gserviceaccount.com"}}))
    repository = "us-central1-docker.pkg.dev/my-project/images"
    assert main(["submit", "--dry-run", "--verbose", "--config", str(path), "--project",
                 "my-project", "--pipeline-root", "gs://my-bucket/root",
                 "--image-repository", repository]) == 0
    out = capsys.readouterr().out
    start = out.index("[", out.index("start a Dataflow job with these Beam pipeline options"))
    args, _ = json.JSONDecoder().raw_decode(out[start:])
    cpu = images.reference(repository, images.CPU, images.UNBUILT_DIGEST)
    assert {"--runner=DataflowRunner", "--project=my-project", "--region=us-central1",
            f"--sdk_container_image={cpu}", "--sdk_location=container",
            "--max_num_workers=20", "--flexrs_goal=COST_OPTIMIZED",
            "--service_account_email=run@my-project.iam.gserviceaccount.com"} <= set(args)
    temp = next(a for a in args if a.startswith("--temp_location="))
    assert re.fullmatch(r"--temp_location=gs://my-bucket/root/PROJECT_NUMBER/"
                        r"gpu-training-pipeline-\d{14}/prepare-dataset_TASK_ID/dataflow/temp",
                        temp)
    assert "dataset: a Dataflow job in us-central1, up to 20 n2-standard-4 workers (FlexRS)" \
        in out
    # The request sent to Vertex AI is the Dataflow-shaped pipeline.
    request, _ = json.JSONDecoder().raw_decode(out[out.rindex('{\n  "parent"'):])
    tasks = request["pipelineJob"]["pipelineSpec"]["components"]["comp-exit-handler-1"][
        "dag"]["tasks"]
    assert tasks["prepare-dataset"]["inputs"]["parameters"]["dataflow"] == {
        "taskOutputParameter": {"outputParameterKey": "Output",
                                "producerTask": "dataflow-launch"}}
