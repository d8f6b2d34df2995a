"""The champion/challenger gate, lineage labels, the local registry and `models list`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from components.export import local_registry as local
from components.export.gate import decide
from components.export.lineage import description, labels, lineage
from components.export.paired_test import Paired, lower_tail, pair, upper_tail
from pipelines.cli import main
from pipelines.config_loading import load_config
from pipelines.vertex import model_registry as models
from pipelines.vertex.clients import Clients
from tests.support.facts import figures, missing
from tests.support.google_fakes import model_pages
from trainer.common.committed_dirs import committed

BETTER = {"test_accuracy": 0.95, "accuracy": 0.9}
CHAMPION = {"test_accuracy": 0.93, "accuracy": 0.92}
SAME = {"test_accuracy": 0.935, "accuracy": 0.95}
POOR = {"test_accuracy": 0.5, "accuracy": 0.5}


def _paired(challenger_only, champion_only, both_right=180, both_wrong=10):
    return Paired(both_right, challenger_only, champion_only, both_wrong)


#: Right where the champion is wrong on 6 images, the reverse on none: p = 1/64.
AHEAD = _paired(6, 0)
#: As many disagreements each way: no evidence either way.
EVEN = _paired(4, 4)
#: The champion alone right on 20 images, the challenger on 2: worse beyond a 10% margin.
BEHIND = _paired(2, 20)


@pytest.mark.parametrize("promotion, challenger, paired, register, default, promoted", [
    # default: significantly better -> the default; not -> a version; poor -> nothing
    ("default", BETTER, AHEAD, True, True, True),
    ("default", SAME, EVEN, True, False, False),
    ("default", POOR, AHEAD, False, False, False),
    # unless_shown_worse: not shown worse than the margin -> the default; worse -> a version
    ("unless_shown_worse", SAME, EVEN, True, True, True),
    ("unless_shown_worse", BETTER, AHEAD, True, True, True),
    ("unless_shown_worse", SAME, BEHIND, True, False, False),
    ("version_only", BETTER, AHEAD, True, False, True),
    ("version_only", SAME, EVEN, True, False, False),
    ("version_only", POOR, AHEAD, False, False, False),
    ("never", BETTER, AHEAD, False, False, True),
])
def test_the_gate_decides_by_mode_paired_test_and_threshold(promotion, challenger, paired,
                                                            register, default, promoted):
    made = decide(challenger, CHAMPION, threshold=0.8, promotion=promotion, paired=paired)
    assert (made.register, made.default, made.promoted) == (register, default, promoted)
    assert made.metric == "test_accuracy"  # the held-out test split, not validation
    assert made.challenger == challenger["test_accuracy"]
    assert made.champion == CHAMPION["test_accuracy"]
    assert made.reason  # every outcome says why
    if challenger is not POOR:
        assert made.paired["challenger_only"] == paired.challenger_only
        assert 0 <= made.paired["p_value"] <= 1


def test_without_a_champion_the_threshold_alone_decides():
    assert decide(BETTER, None, threshold=0.8, promotion="default").default
    assert not decide(POOR, None, threshold=0.8, promotion="default").register
    assert decide(BETTER, None, threshold=0.8, promotion="never").promoted


def test_the_paired_test_s_figures_are_mcnemar_s_exact_ones():
    # 5 discordant images, all the challenger's: P(X <= 0 | 5, 1/2) = 1/32 <= 0.05.
    five = decide({"test_accuracy": 0.94}, {"test_accuracy": 0.93}, threshold=0.0,
                  promotion="default", paired=_paired(5, 0))
    assert five.default and five.paired["p_value"] == pytest.approx(1 / 32)
    # 4 of 4: 1/16 > 0.05, not significant: the champion stays, and the reason says so.
    four = decide({"test_accuracy": 0.94}, {"test_accuracy": 0.93}, threshold=0.0,
                  promotion="default", paired=_paired(4, 0))
    assert not four.default
    # The decision's evidence: 4 discordant pairs all the challenger's, p = 1/16.
    assert (four.register, four.promoted, four.champion) == (True, False, 0.93)
    assert four.paired["p_value"] == pytest.approx(1 / 16)
    assert not missing(four.reason, "0.9400", "0.9300", "194", "p = 0.0625", "0.05")
    # A level of 0.1 promotes it.
    assert decide({"test_accuracy": 0.94}, {"test_accuracy": 0.93}, threshold=0.0,
                  promotion="default", level=0.1, paired=_paired(4, 0)).default
    no_test = decide({"accuracy": 0.95}, {"accuracy": 0.9}, threshold=0.5,
                     promotion="default", paired=AHEAD)
    assert no_test.metric == "accuracy" and no_test.default


def test_equal_accuracy_promotes_under_non_inferior_and_keeps_the_champion_by_default():
    """Scheduled retraining on fresh data: an equally good model is promoted under
    unless_shown_worse (the model stays current), kept out under the default (not better)."""
    equal = {"test_accuracy": 0.9945}
    kept = decide(equal, equal, threshold=0.9, promotion="default", paired=_paired(1, 1, 360, 1))
    assert not kept.default and "is not significantly better than the champion's 0.9945" in \
        kept.reason and "p = 0.7500" in kept.reason
    fresh = decide(equal, equal, threshold=0.9, promotion="unless_shown_worse",
                   paired=_paired(1, 1, 360, 1))
    assert fresh.default and fresh.reason.startswith(
        "test_accuracy 0.9945 is not shown worse than the champion's 0.9945 (")
    assert "makes more than 1.1 times the champion's errors" in fresh.reason
    # Much worse is kept out under unless_shown_worse too.
    worse = decide({"test_accuracy": 0.9}, {"test_accuracy": 0.96}, threshold=0.5,
                   promotion="unless_shown_worse", paired=BEHIND)
    assert not worse.default and "is worse, beyond the margin 0.1, than" in worse.reason


def test_the_paired_counts_come_from_each_image_s_correctness():
    assert pair("1101", "1011") == Paired(2, 1, 1, 0)
    with pytest.raises(ValueError, match="not the same images"):
        pair("11", "111")
    # Past what math.comb's floats hold (n above 1,030), the tails still compute.
    assert lower_tail(2000, 5000, 0.5) < 1e-40 and upper_tail(0, 0, 0.6) == 1.0


def test_a_first_model_below_the_threshold_names_no_champion():
    first = decide(POOR, None, threshold=0.8, promotion="default")
    assert (first.register, first.promoted, first.champion) == (False, False, None)
    assert not missing(first.reason, "0.5000", "0.8000")


BUILT = {"gpu": {"reference": "us-docker.pkg.dev/p/r/gpu-pipeline-gpu@sha256:" + "ab" * 32,
                 "tag": "src-0123456789abcdef", "built": True},
         "cpu": {"reference": "us-docker.pkg.dev/p/r/gpu-pipeline-cpu@sha256:" + "cd" * 32,
                 "tag": "src-0123456789abcdef", "built": False}}


def _record(images=BUILT):
    manifest = {"source": "gs://Data/Flowers", "source_fingerprint": "sha256:" + "c" * 64,
                "examples": 1600, "splits": {"train": {"count": 1100},
                                             "validation": {"count": 300},
                                             "test": {"count": 200}}}
    return lineage(manifest=manifest, training={"model": "ResNet50", "epochs": 20},
                   cluster={"strategy": "multi_worker_mirrored",
                            "worker_pool_specs": [{"replica_count": 1}]},
                   images=images, version="0.4.0", metrics={"test_accuracy": 0.9312,
                                                          "note": "text is dropped"})


def test_lineage_labels_keep_to_the_label_rules():
    record = _record()
    assert record["dataset"]["counts"] == {"train": 1100, "validation": 300, "test": 200}
    assert record["metrics"] == {"test_accuracy": 0.9312}
    made = decide({"test_accuracy": 0.9312}, None, threshold=0.5,
                  promotion="default").to_dict()
    found = labels(record, made)
    assert found == {"gpu-pipeline-version": "0-4-0", "dataset-fingerprint": "c" * 16,
                     "trainer-image": "ab" * 8, "image-tag": "src-0123456789abcdef",
                     "model": "resnet50",
                     "strategy": "multi_worker_mirrored", "compared-metric": "test_accuracy",
                     "challenger-value": "0_9312", "promoted": "true"}
    for key, value in found.items():  # Vertex AI's label rules
        assert re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key)
        assert re.fullmatch(r"[a-z0-9_-]{0,63}", value)
    local = labels(_record(images={}), made)
    assert local["trainer-image"] == local["image-tag"] == "local"
    # The lineage names what ran by digest, and keeps the content tag people search for.
    assert record["trainer_image"] == BUILT["gpu"]["reference"]
    assert record["image_tag"] == "src-0123456789abcdef" and record["images"] == BUILT


def test_the_description_has_no_character_that_breaks_the_upload_json():
    record = _record()
    record["dataset"]["source"] = 'gs://b/"quoted"\\path\n'
    text = description(record, {"reason": 'a "reason"'})
    assert '"' not in text and "\\" not in text and "\n" not in text
    assert text.startswith("a reason | gpu-pipeline 0.4.0 | dataset gs://b/quotedpath")
    json.loads('{"description": "' + text + '"}')  # as the launcher concatenates it


def _saved_model(directory: Path, tag: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "saved_model.pb").write_text(tag)
    return directory


def test_the_local_registry_keeps_versions_and_the_default(tmp_path):
    model_dir = tmp_path / "registry" / "m"
    assert local.champion(model_dir) is None
    made = {"metric": "test_accuracy", "challenger": 0.9, "reason": "first", "promoted": True}
    one = local.register(model_dir, _saved_model(tmp_path / "a", "one"), {"test_accuracy": 0.9},
                         _record(), made, default=False)  # a first version is the default
    two = local.register(model_dir, _saved_model(tmp_path / "b", "two"), {"test_accuracy": 0.8},
                         _record(), {**made, "reason": "worse", "promoted": False},
                         default=False)
    assert (one["version"], two["version"]) == ("1", "2")
    entry, saved = local.champion(model_dir)
    assert entry["version"] == "1" and Path(saved, "saved_model.pb").read_text() == "one"
    three = local.register(model_dir, _saved_model(tmp_path / "c", "three"),
                           {"test_accuracy": 0.95}, _record(), made, default=True)
    entry, saved = local.champion(model_dir)
    assert entry["version"] == three["version"] == "3"
    assert Path(saved, "saved_model.pb").read_text() == "three"
    assert json.loads(Path(saved, "lineage.json").read_text())["project_version"] == "0.4.0"
    assert all(committed(model_dir / "versions" / n) for n in ("1", "2", "3"))
    assert not list(model_dir.glob(".*partial"))  # the index was replaced in one step
    lines = local.describe("m", local.load(model_dir))
    assert lines[0] == "m: 3 version(s), default 3"
    assert lines[3].startswith(" * version 3") and lines[1].startswith("   version 1")


def test_predict_without_a_model_name_calls_the_model_the_last_run_registered(tmp_path):
    import argparse
    import os

    from pipelines.commands.predict import local_model
    from pipelines.local_run import REGISTRY

    registry = tmp_path / "local_runs" / REGISTRY
    assert local.latest(registry) is None
    made = {"metric": "test_accuracy", "challenger": 0.9, "reason": "first", "promoted": True}
    for name in ("gpu-pipeline-model", "shapes3"):
        local.register(registry / name, _saved_model(tmp_path / name, name),
                       {"test_accuracy": 0.9}, _record(), made, default=True)
    index = registry / "gpu-pipeline-model" / local.INDEX
    os.utime(index, ns=(1, 1))  # the demo's model, registered long before
    assert local.latest(registry) == "shapes3"
    args = argparse.Namespace(pipeline_root=tmp_path / "local_runs", model=None, version="")
    entry, saved = local_model(args)
    assert args.model == "shapes3" and Path(saved, "saved_model.pb").read_text() == "shapes3"
    named = argparse.Namespace(pipeline_root=tmp_path / "local_runs",
                               model="gpu-pipeline-model", version="")
    assert Path(local_model(named)[1], "saved_model.pb").read_text() == "gpu-pipeline-model"


def test_the_runs_hint_calls_the_runs_own_model_or_says_there_is_none(tmp_path, capsys):
    from pipelines.commands.run import _how_to_call
    from pipelines.local_run import REGISTRY

    root = tmp_path / "runs"
    config = load_config(overrides={"vertex": {"model_display_name": "shapes3"}})
    from trainer.common.shell_name import command

    _how_to_call(config, root, registered="")
    assert not missing(capsys.readouterr().out, "no model to call", "'shapes3'")
    made = {"metric": "test_accuracy", "challenger": 0.9, "reason": "first", "promoted": True}
    local.register(root / REGISTRY / "shapes3", _saved_model(tmp_path / "s", "s"),
                   {"test_accuracy": 0.9}, _record(), made, default=True)
    _how_to_call(config, root, registered="1")
    out = capsys.readouterr().out
    cli = command()  # as this environment runs it (`test_local_run` runs the hint)
    # The commands to paste, as this environment runs them.
    assert not missing(out, "shapes3 version 1",
                       f"{cli} predict IMAGE... --model shapes3 --pipeline-root {root}",
                       f"{cli} serve --model shapes3 --pipeline-root {root}")
    _how_to_call(config, root, registered="")  # a run the gate turned down
    assert "this run registered no model: the champion is still shapes3 version 1" in \
        capsys.readouterr().out


def test_a_damaged_registry_is_a_clear_error(tmp_path, capsys):
    model_dir = tmp_path / "local_runs" / "registry" / "m"
    model_dir.mkdir(parents=True)
    (model_dir / local.INDEX).write_text("{not json")
    with pytest.raises(local.RegistryError, match="is not a readable model registry"):
        local.load(model_dir)
    assert main(["models", "list", "--pipeline-root", str(tmp_path / "local_runs")]) == 2
    err = capsys.readouterr().err
    assert "registry.json' is not a readable model registry" in err and "Traceback" not in err


def test_models_list_without_a_registry(tmp_path, capsys):
    assert main(["models", "list", "--pipeline-root", str(tmp_path)]) == 0
    assert "no model registered under" in capsys.readouterr().out


class _ModelService:
    """Stands in for ModelServiceClient: records the request, answers two versions."""

    def __init__(self):
        self.calls = []

    def list_model_versions(self, request, timeout=None):
        self.calls.append(request)
        versions = [aiplatform_v1.Model(
            name=request.name, version_id=v, version_aliases=a,
            labels={"compared-metric": "test_accuracy", "challenger-value": value,
                    "promoted": p, **kept})
            for v, a, value, p, kept in (
                ("3", [], "0_9500", "false", {"champion-kept-runs": "1",
                                             "champion-kept-since": "2026-11-28"}),
                ("2", ["default"], "0_9512", "true", {}),
                ("1", [], "0_9312", "false", {}))]
        return model_pages(self.list_model_versions, request, versions)

    def list_models(self, request, timeout=None):
        self.calls.append(request)
        return model_pages(self.list_models, request)


def test_models_list_reads_the_vertex_model_registry(capsys):
    parent = "projects/my-proj/locations/europe-west4/models/123"
    config = load_config(overrides={"vertex": {"project": "my-proj", "region": "europe-west4",
                                               "parent_model": parent}})
    service = _ModelService()
    found = models.list_models(config, Clients(model_api=service))
    (request,) = service.calls
    assert request == aiplatform_v1.ListModelVersionsRequest(name=parent,
                                                             order_by="create_time desc")
    lines = [models.describe(m) for m in found]
    assert lines[1].startswith(f"{parent}@2  aliases default")
    assert "test_accuracy 0.9512  promoted true" in lines[1]
    assert "aliases -" in lines[2]
    assert lines[0].endswith("champion kept 1 run(s) in a row since 2026-11-28")
    by_name = models.list_request(load_config(overrides={"vertex": {
        "project": "my-proj", "model_display_name": "flowers"}}))
    assert by_name == aiplatform_v1.ListModelsRequest(
        parent="projects/my-proj/locations/us-central1", filter='display_name="flowers"',
        order_by="create_time desc")


def test_models_list_dry_run_prints_the_request(capsys):
    assert main(["models", "list", "--project", "my-proj", "--region", "europe-west4",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    body = json.loads(out[out.index("{"):])
    assert body == {"parent": "projects/my-proj/locations/europe-west4",
                    "filter": 'display_name="gpu-pipeline-model"',
                    "orderBy": "create_time desc"}


def _exported(directory: Path, classes: list[str], accuracy: float, dataset: Path) -> Path:
    """A model as the trainer commits it: its serving metadata (class names) and its
    metrics on `dataset` beside it (so no stage evaluates it with TensorFlow)."""
    from trainer.common.contract import load_manifest
    from trainer.serving import measure
    from trainer.serving.container import METADATA_FILE

    _saved_model(directory, "model")
    (directory / METADATA_FILE).write_text(json.dumps({"class_names": classes}))
    manifest = load_manifest(dataset)
    # Each held-out image right or wrong as the accuracy says (the first ones right).
    images = manifest["splits"]["test"]["count"]
    right = round(accuracy * images)
    measure.write(directory, {"dataset": measure.dataset_digest(manifest),
                              "metrics": {"accuracy": accuracy, "test_accuracy": accuracy},
                              "correct": {"split": "test",
                                          "images": "1" * right + "0" * (images - right)}})
    return directory


def test_a_model_of_other_classes_never_replaces_the_champion(tmp_path, small_dataset):
    """Tried as a new user would: a run on their own 2-class images into the default local
    registry was compared with the 4-class demo model ("beats the champion's 0.0000") and
    replaced it. It is refused, not evaluated against, and not registered."""
    from components.export.export_model import export_and_gate
    from trainer.run.training_options import TrainingOptions

    # No serving check: these stand-in models hold no real SavedModel.
    vertex = load_config(overrides={"vertex": {"accuracy_threshold": 0.5,
                                               "serving_check_images": 0}}).vertex
    shapes = ["circle", "square", "star", "triangle"]
    common = {"vertex": vertex, "training": TrainingOptions().model_dump(),
              "cluster": {"strategy": "single", "worker_pool_specs": []}, "images": {},
              "version": "0.4.0", "registry_root": str(tmp_path / "registry")}
    first = export_and_gate(_exported(tmp_path / "four", shapes, 0.6, small_dataset),
                            small_dataset, tmp_path / "out1", **common)
    assert first["registered"] == "1" and first["decision"].default
    second = export_and_gate(_exported(tmp_path / "two", ["cat", "dog"], 0.99, small_dataset),
                             small_dataset, tmp_path / "out2", **common)
    made = second["decision"]
    assert (made.register, made.default, made.promoted, made.champion) == \
        (False, False, False, None)
    assert not missing(made.reason, "(cat, dog)", "(circle, square, star, triangle)",
                       "vertex.model_display_name")
    assert second["registered"] is None and second["champion"] is None
    registry = local.load(tmp_path / "registry" / vertex.model_display_name)
    assert registry["default"] == "1" and len(registry["versions"]) == 1
    # The same classes are compared as before (right on 29 of the 32 test images, where the
    # champion was on 19: significantly better).
    third = export_and_gate(_exported(tmp_path / "again", shapes, 0.9, small_dataset),
                            small_dataset, tmp_path / "out3", **common)
    assert third["decision"].default and third["champion"]["test_accuracy"] == 0.6


def test_a_model_that_fails_in_its_server_is_not_registered_and_the_champion_keeps_serving():
    from components.serving.serving_check import ServingCheck

    failed = ServingCheck(False, ["image 3: HTTP 500: boom"], 24, {"200": 23, "500": 1}, 0.2,
                          0.05, 2.0, 23, 24)
    promoted = decide(BETTER, CHAMPION, threshold=0.8, promotion="default", paired=AHEAD)
    made = promoted.after_serving_check(failed)
    assert (made.register, made.default, made.promoted) == (False, False, False)
    assert made.paired["p_value"] == pytest.approx(0.015625)
    assert not missing(made.reason, "0.9500", "0.9300", "image 3: HTTP 500: boom")
    assert made.serving_check["statuses"] == {"200": 23, "500": 1}
    passed = ServingCheck(True, [], 24, {"200": 24}, 0.2, 0.05, 2.0, 24, 24)
    assert promoted.after_serving_check(passed).default
    first = decide(BETTER, None, threshold=0.8, promotion="default")
    assert first.after_serving_check(failed).reason.endswith("not registered; no model serves "
                                                             "yet")


def test_every_decision_says_what_the_split_can_detect_and_when_it_is_too_small():
    """182 test images, equal models: 4 disagreements each way, 10 both wrong. With the
    champion's 14 errors and 8 disagreements, a challenger with 46% fewer errors wins a
    disagreement with odds 1 - theta, theta = 1/2 - 0.46 x 14 / 16 = 0.0975, and the test
    (at most 1 of 8 for the champion at 0.05) finds it with P(X <= 1 | 8, 0.0975) = 0.8205;
    at 45%, theta = 0.10625 and 0.7943: 46% is the smallest, by hand."""
    from components.export.paired_test import power

    equal = {"test_accuracy": 168 / 182}
    made = decide(equal, equal, threshold=0.5, promotion="default", margin=0.1,
                  paired=Paired(164, 4, 4, 10))
    assert not made.promoted
    assert made.paired["detectable"] == 0.46 and made.paired["power"] == 0.8
    assert power(8, 14, 0.46, 0.05) == pytest.approx(0.8205, abs=1e-4)
    assert power(8, 14, 0.45, 0.05) == pytest.approx(0.7943, abs=1e-4)
    # A 10% margin is below what this split can show: too small, and how many would do.
    assert made.paired["too_small_for"] == 0.1 and made.paired["images_needed"] > 4000
    assert {46, 10, made.paired["images_needed"]} <= set(figures(made.reason))
    # Under unless_shown_worse the same split promotes, and says as much.
    lenient = decide(equal, equal, threshold=0.5, promotion="unless_shown_worse",
                     margin=0.1, paired=Paired(164, 4, 4, 10))
    assert lenient.promoted and lenient.paired["too_small_for"] == 0.1
    assert lenient.paired["decides"] == "promote unless shown worse than the margin"
    # No disagreement: nothing can be found, said so.
    alike = decide(equal, equal, threshold=0.5, promotion="default", margin=0.1,
                   paired=Paired(168, 0, 0, 14))
    assert alike.paired["detectable"] is None and alike.paired["images_needed"] is None
