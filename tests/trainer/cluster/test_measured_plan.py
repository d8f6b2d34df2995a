"""The plan decides on measurements read as data: results files (the shipped ones and a
user's), each comparison between two cases of one file, the GPU's own files first, another
GPU of its architecture standing in and said so, and "not measured" where no file compares a
choice."""

from __future__ import annotations

import json
import re

import pytest

from components.gpu import catalog as cat
from tests.support.facts import missing
from trainer.cluster.accelerators import ACCELERATORS
from trainer.cluster.measurements import SHIPPED, load, parse_results, shipped
from trainer.cluster.roles import Layout
from trainer.cluster.training_plan import plan_training

H200, H100 = ACCELERATORS[cat.H200], ACCELERATORS[cat.H100_80GB]


def results(accelerator, day, *cases, model="resnet50"):
    """A schema 2 results file of `cases` (name, images/s or an error string, settings)."""
    rows = []
    for name, figure, settings in cases:
        row = {"case": name, "phase": "timed", "input": "synthetic", "batch": 256,
               "steps_per_execution": 1, "nvidia_environment": False, "prefetch": False,
               "keep_nhwc": False, "xla": False,
               **{{"precision": "mixed_precision"}.get(k, k): v for k, v in settings.items()}}
        rows.append({**row, "images_per_second": figure} if isinstance(figure, float)
                    else {"case": name, "phase": "stopped", "error": figure})
    return {"schema": 2, "accelerator": accelerator, "gpu": accelerator, "model": model,
            "measured_at": day, "runs": [{"cases": rows}]}


def write(folder, name, data):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data))


def test_every_shipped_file_is_read_as_data_with_each_of_its_timed_cases():
    found = shipped()
    assert found.problems == ()
    assert {f.source for f in found.files} == {
        f"trainer/cluster/measured/{p.name}" for p in SHIPPED.glob("*.json")}
    for results_file in found.files:
        raw = json.loads((SHIPPED / results_file.source.rsplit("/", 1)[1]).read_text())
        timed = sorted(row["images_per_second"] for run in raw["runs"] for row in run["cases"]
                       if isinstance(row.get("images_per_second"), float))
        assert sorted(c.images_per_second for c in results_file.cases
                      if c.images_per_second) == timed
    # The 2026-11-26 H200 float32 case the hand-copied table left out is read too.
    (h200,) = [f for f in found.files if f.source.endswith("gpu-h200-2026-11-26.json")]
    assert [c.images_per_second for c in h200.cases if c.name == "float32-noxla"] == [1785.5]
    # Schema 1's first file spelt a case `plan-no-xla`: it is the H100's bfloat16.
    (h100,) = [f for f in found.files if f.accelerator == cat.H100_80GB]
    assert [(c.precision, c.images_per_second) for c in h100.cases
            if c.name == "plan-no-xla"] == [("bfloat16", 1476.8)]


def test_without_measurements_an_a100_l4_or_t4_plan_keeps_xla_off_and_says_not_measured():
    for gpu, precision in ((cat.A100, "bfloat16"), (cat.L4, "bfloat16"), (cat.T4, "float16")):
        plan = plan_training(Layout(workers=1), gpu=ACCELERATORS[gpu], gpus=1)
        assert (plan.xla, plan.mixed_precision, plan.nvidia_environment) == \
            (False, precision, False)
        for decision in ("xla", "mixed_precision", "nvidia_environment", "keep_nhwc",
                         "prefetch_to_gpu"):
            assert plan.reasons[decision].startswith(f"not measured on {gpu}") or \
                decision == "prefetch_to_gpu", (decision, plan.reasons[decision])
        assert plan.measured == {}
    # Asked for, XLA is on all the same.
    assert plan_training(Layout(), gpu=ACCELERATORS[cat.A100], gpus=1, xla="on").xla


def test_an_h200_plan_takes_what_its_own_files_measured_and_names_each_file():
    plan = plan_training(Layout(), gpu=H200, gpus=1)
    assert (plan.mixed_precision, plan.xla, plan.nvidia_environment, plan.keep_nhwc,
            plan.prefetch_to_gpu) == ("float16", False, True, False, False)
    why = plan.reasons["mixed_precision"]
    assert not missing(why, "2,705", "2,005", "measured/gpu-h200-2026-11-27.json")
    assert "float16 1,636 images/s against bfloat16 1,554 (on an NVIDIA H200, " \
           "trainer/cluster/measured/gpu-h200-2026-11-26.json)" in why
    assert plan.reasons["xla"].startswith("no XLA step completed: bfloat16-xla+parallel+"
                                          "profile: timed out after 250 s")
    assert plan.measured["nvidia_environment"] == (
        "trainer/cluster/measured/gpu-h200-2026-11-27.json",)
    # Prefetching is judged by the pairs run as the plan runs (with NVIDIA's environment).
    assert not missing(plan.reasons["prefetch_to_gpu"], "1,954", "2,005", "float32")


def test_no_reason_pairs_figures_of_two_files():
    """NVIDIA's environment was quoted 1.65x faster by pairing 2,705 (one file) with 1,636
    (another): the plan never does; within the 2026-11-27 file it is float32's pairs."""
    plan = plan_training(Layout(), gpu=H200, gpus=1)
    environment = plan.reasons["nvidia_environment"]
    assert "1,636" not in environment and "2,705" not in environment
    assert environment.startswith("measured faster: 2,005 images/s with it against 1,784 "
                                  "without, in float32")
    for reason in plan.reasons.values():  # each parenthesis cites one file
        for figures in re.split(r"\(on an|\(extrapolated from", reason)[1:]:
            assert figures.count(".json") == 1
    # Two files, one with float16 only with the environment, one only without it: no pair.
    files = load_from([results(cat.H200, "2026-12-01", ("a", 2700.0, {
                           "precision": "float16", "nvidia_environment": True})),
                       results(cat.H200, "2026-12-02", ("b", 1600.0, {
                           "precision": "float16"}))])
    alone = plan_training(Layout(), gpu=H200, gpus=1, measurements=files,
                          mixed_precision="float16")
    assert not alone.nvidia_environment
    assert alone.reasons["nvidia_environment"].startswith(f"not measured on {cat.H200}")


def test_an_h100_plan_says_its_figures_stand_in_from_an_h200():
    plan = plan_training(Layout(), gpu=H100, gpus=1)
    assert (plan.mixed_precision, plan.nvidia_environment) == ("float16", True)
    assert "extrapolated from an NVIDIA H200, trainer/cluster/measured/gpu-h200-2026-11-27" \
        in plan.reasons["mixed_precision"]
    assert "extrapolated from an NVIDIA H200" in plan.reasons["nvidia_environment"]
    # Its own file decides what it compared: XLA, tried there, never completed a step.
    assert plan.reasons["xla"].endswith("(on an NVIDIA H100 80GB HBM3, "
                                        "trainer/cluster/measured/gpu-h100-2026-11-26.json)")
    # The H100's own float32-against-bfloat16 comparison wins over the H200's.
    own = plan_training(Layout(workers=1, parameter_servers=1), gpu=H100, gpus=1)
    assert own.mixed_precision == "off"
    assert own.measured["mixed_precision"] == (
        "trainer/cluster/measured/gpu-h100-2026-11-26.json",)
    assert not missing(own.reasons["mixed_precision"], "1,525", "1,477")


def load_from(files, tmp=None):
    from trainer.cluster.measurements import Measurements

    return Measurements(tuple(parse_results(data, f"f{i}.json", user=True)
                              for i, data in enumerate(files)))


def test_a_users_file_changes_the_choice_and_the_reason_and_bad_files_are_named(tmp_path):
    mine = tmp_path / "measurements"
    write(mine / "h200" / "2026-12-01", "results.json", results(
        cat.H200, "2026-12-01T10:00:00Z",
        ("bfloat16-noxla", 3100.0, {"precision": "bfloat16"}),
        ("float16-noxla", 2900.0, {"precision": "float16"}),
        ("float32-noxla", 2000.0, {"precision": "off"}),
        ("bfloat16-xla", 3300.0, {"precision": "bfloat16", "xla": True}),
        ("bfloat16-noxla+nhwc", 3200.0, {"precision": "bfloat16", "keep_nhwc": True})))
    write(mine, "notes.json", {"hello": "world"})
    (mine / "broken.json").write_text("{")
    write(mine, "tpu.json", results("TPU_V5", "2026-12-01"))
    found = load(str(mine))
    assert sorted(p.split(": ", 1)[0].rsplit("/", 1)[1] for p in found.problems) == [
        "broken.json", "notes.json", "tpu.json"]
    assert "no Vertex AI accelerator type" in next(p for p in found.problems if "tpu" in p)
    plan = plan_training(Layout(), gpu=H200, gpus=1, measurements=found)
    assert (plan.mixed_precision, plan.xla) == ("bfloat16", True)
    source = str(mine / "h200" / "2026-12-01" / "results.json")
    assert not missing(plan.reasons["xla"], "3,300", "3,100", "bfloat16", source)
    assert plan.measured["xla"] == (source,)
    # The user's file was measured with XLA off for every precision: with XLA on only
    # bfloat16 ran, so no precision comparison holds and the rules decide, said so.
    assert plan.reasons["mixed_precision"].startswith(f"not measured on {cat.H200}")
    # NHWC kept measured faster, but only with XLA off: asked for XLA off, it is on.
    off = plan_training(Layout(), gpu=H200, gpus=1, measurements=found, xla="off")
    assert (off.mixed_precision, off.keep_nhwc) == ("bfloat16", True)
    assert off.reasons["mixed_precision"].startswith(
        "bfloat16 measured fastest: bfloat16 3,100 images/s against float16 2,900")
    # An explicit option still wins, and its reason says what measured faster.
    asked = plan_training(Layout(), gpu=H200, gpus=1, measurements=found, xla="off",
                          mixed_precision="off")
    assert asked.mixed_precision == "off"
    assert asked.reasons["mixed_precision"].startswith(
        "asked for; bfloat16 measured faster: bfloat16 3,100 images/s against float32 2,000")
    # A folder that does not exist is named; the shipped files decide alone.
    nowhere = load(str(tmp_path / "nowhere"))
    assert nowhere.problems[0].startswith("training.measurements")
    assert plan_training(Layout(), gpu=H200, gpus=1, measurements=nowhere) == \
        plan_training(Layout(), gpu=H200, gpus=1)


def test_the_newest_file_of_the_gpu_decides_and_a_pair_must_agree_within_it():
    older = results(cat.A100, "2026-12-01", ("float16-noxla", 2000.0, {"precision": "float16"}),
                    ("bfloat16-noxla", 1500.0, {"precision": "bfloat16"}))
    newer = results(cat.A100, "2026-12-05", ("float16-noxla", 1400.0, {"precision": "float16"}),
                    ("bfloat16-noxla", 1500.0, {"precision": "bfloat16"}))
    files = load_from([older, newer])
    plan = plan_training(Layout(), gpu=ACCELERATORS[cat.A100], gpus=1, measurements=files)
    assert plan.mixed_precision == "bfloat16" and plan.measured["mixed_precision"] == ("f1.json",)
    # Another model's figures count only after the model's own.
    mine = results(cat.A100, "2026-11-01", ("float16-noxla", 2000.0, {"precision": "float16"}),
                   ("bfloat16-noxla", 1500.0, {"precision": "bfloat16"}), model="cnn")
    files = load_from([older, newer, mine])
    cnn = plan_training(Layout(), gpu=ACCELERATORS[cat.A100], gpus=1, measurements=files,
                        model="cnn")
    assert cnn.mixed_precision == "float16" and cnn.measured["mixed_precision"] == ("f2.json",)
    # Pairs of one file that disagree decide nothing.
    mixed = results(cat.L4, "2026-12-01", ("a", 900.0, {"precision": "off"}),
                    ("b", 1000.0, {"precision": "off", "nvidia_environment": True}),
                    ("c", 1200.0, {"precision": "off", "batch": 512}),
                    ("d", 1100.0, {"precision": "off", "batch": 512, "nvidia_environment": True}))
    plan = plan_training(Layout(), gpu=ACCELERATORS[cat.L4], gpus=1, mixed_precision="off",
                         measurements=load_from([mixed]))
    assert not plan.nvidia_environment
    # Faster with it at the default batch, slower at 512: not shown faster, so off.
    assert not missing(plan.reasons["nvidia_environment"], "1,000", "900", "1,100", "1,200",
                       "batch 512", "f0.json")


@pytest.mark.parametrize("data,says", [
    ({"schema": 3, "runs": []}, "schema 3; this version reads schemas 1 and 2"),
    ({"schema": 2, "accelerator": cat.T4, "runs": []}, "schema 2 needs `model` and"),
    ([1, 2], "no `runs` list"),
])
def test_a_file_that_is_not_a_results_file_says_why(data, says):
    from trainer.cluster.measurements import ResultsError

    with pytest.raises(ResultsError, match=re.escape(says)):
        parse_results(data, "x.json")


def test_a_comparison_needs_two_cases_of_one_file_that_differ_in_its_setting_alone():
    from trainer.cluster import gpu_choices, measured_plan

    two_apart = load_from([results(cat.T4, "2026-12-01",
                                   ("float16-noxla+b512", 900.0, {"precision": "float16",
                                                                  "batch": 512}),
                                   ("float32-noxla", 500.0, {"precision": "off"}))])
    files = two_apart.for_gpu(cat.T4)
    assert measured_plan.compare(files, cat.T4, "precision", "float16", "off") is None
    assert measured_plan.best_of(files, cat.T4, "precision", gpu_choices.PRECISIONS) is None
    # A case that stopped is no figure: XLA is off, and the reason says where it stopped.
    stopped = load_from([results(cat.T4, "2026-12-01", ("float16-xla", "timed out after 90 s",
                                                        {}))])
    found = measured_plan.xla_failures(stopped.for_gpu(cat.T4), cat.T4)
    assert found.value is False
    assert not missing(found.reason, "float16-xla", "timed out after 90 s", "f0.json")
