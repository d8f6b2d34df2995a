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


def rates(reason):
    """The images/s figures a reason gives, in order (a case's, then each pair's)."""
    return [int((a or b).replace(",", "")) for a, b in
            re.findall(r"(\d[\d,]*) images/s|against (?:[a-z0-9]+ )?(\d[\d,]*)", reason)]


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


H200_NEWEST = "trainer/cluster/measured/gpu-h200-2026-11-27.json"
H100_OWN = "trainer/cluster/measured/gpu-h100-2026-11-26.json"


def test_an_h200_plan_is_the_fastest_case_its_newest_file_measured_taken_whole():
    plan = plan_training(Layout(), gpu=H200, gpus=1)
    # float16-noxla+nvenv, 2,705 images/s: its precision, XLA, environment and layout.
    assert (plan.mixed_precision, plan.xla, plan.nvidia_environment, plan.keep_nhwc,
            plan.prefetch_to_gpu) == ("float16", False, True, False, False)
    assert rates(plan.reasons["mixed_precision"])[:3] == [2705, 2705, 2005]
    assert {plan.measured[k] for k in ("mixed_precision", "nvidia_environment",
                                       "prefetch_to_gpu")} == {(H200_NEWEST,)}
    # XLA: tried in that file, no step completed.
    assert plan.reasons["xla"].startswith("no XLA step completed: bfloat16-xla+parallel+"
                                          "profile: timed out after 250 s")
    # Never a figure of another file in a reason: each parenthesis cites one file.
    for reason in plan.reasons.values():
        for cited in re.split(r"\(on an|\(extrapolated from", reason)[1:]:
            assert cited.count(".json") == 1


def test_no_pair_is_made_of_two_files():
    # Two files, one with float16 only with the environment, one only without it: no pair.
    files = load_from([results(cat.H200, "2026-12-01", ("a", 2700.0, {
                           "precision": "float16", "nvidia_environment": True})),
                       results(cat.H200, "2026-12-02", ("b", 1600.0, {
                           "precision": "float16"}))])
    alone = plan_training(Layout(), gpu=H200, gpus=1, measurements=files,
                          mixed_precision="float16")
    # The newest file's case decides what it ran; the environment it never varied.
    assert not alone.nvidia_environment and alone.measured.get("nvidia_environment") is None
    assert alone.reasons["nvidia_environment"].startswith(f"not measured on {cat.H200}")


def test_an_h100_plan_takes_its_precision_from_its_own_file_and_the_h200_only_stands_in():
    plan = plan_training(Layout(), gpu=H100, gpus=1)
    # Its own file compared float32 (1,525) with bfloat16 (1,477) and never ran float16:
    # the H200's float16 does not decide the H100's precision.
    assert plan.mixed_precision == "off" and plan.measured["mixed_precision"] == (H100_OWN,)
    assert rates(plan.reasons["mixed_precision"]) == [1525, 1525, 1477]
    assert plan.reasons["xla"].endswith(f"(on an NVIDIA H100 80GB HBM3, {H100_OWN})")
    # The environment, which no H100 file varied, stands in from the H200, said so.
    assert plan.nvidia_environment
    assert "extrapolated from an NVIDIA H200" in plan.reasons["nvidia_environment"]
    for decided in ("mixed_precision", "xla"):
        assert "H200" not in plan.reasons[decided]


def test_a_file_measured_on_cpus_decides_no_gpus_plan(tmp_path):
    """float16 and XLA on CPUs say nothing of a GPU: a CPU file placed among a user's
    measurements changes no plan, and the budget reads the same files."""
    cpu = results(cat.T4, "2026-12-01", ("float32-noxla", 90.0, {"precision": "off"}),
                  ("float16-noxla", 30.0, {"precision": "float16"}),
                  ("float16-xla", 120.0, {"precision": "float16", "xla": True}))
    mine = tmp_path / "m"
    for gpu in (cat.T4, cat.A100, cat.H100_80GB):
        write(mine, f"{gpu}.json", {**cpu, "accelerator": gpu, "gpu": f"CPUs for {gpu}",
                                    "device": "cpu"})
    found = load(str(mine))
    assert len(found.on_cpus(cat.T4)) == 1
    for gpu in (cat.T4, cat.A100, cat.H100_80GB):
        assert found.for_gpu(gpu) == shipped().for_gpu(gpu)
        assert plan_training(Layout(), gpu=ACCELERATORS[gpu], gpus=1, measurements=found) == \
            plan_training(Layout(), gpu=ACCELERATORS[gpu], gpus=1)


def test_a_benchmark_only_xla_switch_is_no_xla_comparison_and_no_plan():
    from trainer.cluster import measured_plan

    files = load_from([results(cat.H100_80GB, "2026-12-01",
                               ("float16-xla+notriton", 3500.0, {"precision": "float16",
                                                                 "xla": True}),
                               ("float16-noxla", 3000.0, {"precision": "float16"}))])
    own = files.for_gpu(cat.H100_80GB)
    assert measured_plan.compare(own, cat.H100_80GB, "xla", True, False) is None
    # The plan cannot run XLA without Triton's GEMMs: the fastest case it can run decides.
    plan = plan_training(Layout(), gpu=H100, gpus=1, measurements=files)
    assert not plan.xla and 3500 not in rates(plan.reasons["xla"])


def test_a_users_h200_file_whose_float32_without_the_environment_is_fastest_decides_it():
    files = load_from([results(cat.H200, "2026-12-01",
                               ("float32-noxla", 9999.0, {"precision": "off"}),
                               ("float32-noxla+nvenv", 2000.0, {"precision": "off",
                                                                "nvidia_environment": True}),
                               ("float16-noxla+nvenv", 2700.0, {"precision": "float16",
                                                                "nvidia_environment": True}))])
    plan = plan_training(Layout(), gpu=H200, gpus=1, measurements=files)
    # Never float16 without the environment: a case no file ran.
    assert (plan.mixed_precision, plan.nvidia_environment) == ("off", False)
    assert rates(plan.reasons["mixed_precision"])[0] == 9999


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
    # Its fastest case, bfloat16-xla at 3,300 images/s, taken whole.
    assert (plan.mixed_precision, plan.xla, plan.keep_nhwc) == ("bfloat16", True, False)
    source = str(mine / "h200" / "2026-12-01" / "results.json")
    assert rates(plan.reasons["xla"]) == [3300, 3300, 3100] and source in plan.reasons["xla"]
    assert plan.measured["xla"] == plan.measured["mixed_precision"] == (source,)
    # Asked for XLA off, its fastest case without XLA: NHWC kept, 3,200.
    off = plan_training(Layout(), gpu=H200, gpus=1, measurements=found, xla="off")
    assert (off.mixed_precision, off.keep_nhwc) == ("bfloat16", True)
    assert rates(off.reasons["mixed_precision"])[0] == 3200
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
    # Faster with it at the default batch, slower at 512, where the fastest case (1,200)
    # ran without it: off, as that case ran.
    assert not plan.nvidia_environment
    assert rates(plan.reasons["nvidia_environment"]) == [1200, 1100, 1200]  # case, with, without
    # Asked for float16 on an L4 file that ran float32 alone: no case fits, and the pairs
    # of that file that agree on all but the environment disagree: off, said so.
    asked = plan_training(Layout(), gpu=ACCELERATORS[cat.L4], gpus=1,
                          mixed_precision="float16", measurements=load_from([mixed]))
    assert not asked.nvidia_environment
    assert not missing(asked.reasons["nvidia_environment"], "1,000", "900", "1,100", "1,200")


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
