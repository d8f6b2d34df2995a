"""The runs in a row that kept the champion: counted in the local registry and in the Model
Registry's labels, announced from `vertex.champion_kept_warning` runs on."""

from __future__ import annotations

import types

from components.export import champion_streak as streaks
from components.export import local_registry as local
from components.export.export_model import export_and_gate
from components.export.gate import decide
from components.export.lineage import labels
from components.export.paired_test import Paired
from pipelines.config_loading import load_config
from tests.components.export.test_gate import _exported, _record
from trainer.run.training_options import TrainingOptions

SHAPES = ["circle", "square", "star", "triangle"]


def test_a_champion_kept_three_runs_in_a_row_is_announced(tmp_path, small_dataset):
    # No serving check: these stand-in models hold no real SavedModel.
    vertex = load_config(overrides={"vertex": {"accuracy_threshold": 0.5,
                                               "serving_check_images": 0}}).vertex
    common = {"vertex": vertex, "training": TrainingOptions().model_dump(),
              "cluster": {"strategy": "single", "worker_pool_specs": []}, "images": {},
              "version": "0.4.0", "registry_root": str(tmp_path / "registry")}
    model_dir = tmp_path / "registry" / vertex.model_display_name
    first = export_and_gate(_exported(tmp_path / "m0", SHAPES, 0.6, small_dataset),
                            small_dataset, tmp_path / "out0", **common)
    assert first["decision"].champion_kept is None  # no champion: nothing kept
    made = []
    for run in (1, 2, 3):  # as good as the champion: not significantly better, kept
        made.append(export_and_gate(_exported(tmp_path / f"m{run}", SHAPES, 0.6,
                                              small_dataset),
                                    small_dataset, tmp_path / f"out{run}", **common)["decision"])
    assert [d.champion_kept["runs"] for d in made] == [1, 2, 3]
    assert len({d.champion_kept["since"] for d in made}) == 1
    assert [bool(d.warning) for d in made] == [False, False, True]
    since = made[0].champion_kept["since"]
    assert made[2].warning.startswith(
        f"warning: the champion has been kept 3 runs in a row, since {since} "
        "(vertex.champion_kept_warning 3); this run: vertex.promotion default, test_accuracy "
        "0.6000 is not significantly better than the champion's 0.6000 (")
    assert made[2].warning.endswith("vertex.promotion unless_shown_worse keeps a scheduled model "
                                    "current on fresh data unless it is shown worse")
    from components.export.export_model import comparison_markdown

    report = comparison_markdown(made[2], {"test_accuracy": 0.6}, {"test_accuracy": 0.6})
    assert f"**Champion kept**: 3 run(s) in a row, since {since}. the champion has been kept" \
        in report and "| the champion alone right | 0 |" in report
    index = local.load(model_dir)
    assert index["champion_kept"]["runs"] == 3 and index["default"] == "1"
    listed = local.describe(vertex.model_display_name, index)
    assert listed[1] == (f"  the champion (version 1) kept 3 run(s) in a row, since "
                         f"{index['champion_kept']['since']}")
    # The model's labels carry the count; a promotion starts it again.
    found = labels(_record(), made[2].to_dict())
    assert found["champion-kept-runs"] == "3"
    promoted = export_and_gate(_exported(tmp_path / "m4", SHAPES, 0.9, small_dataset),
                               small_dataset, tmp_path / "out4", **common)["decision"]
    assert promoted.default and promoted.champion_kept is None and not promoted.warning
    assert local.load(model_dir)["champion_kept"] is None


def test_on_vertex_the_count_follows_the_newest_decision_in_experiments():
    """Every run's decision is in its Experiments metrics, registered or not: the newest
    one's count is the streak the next run continues (runs come back in any order)."""
    from components.export.experiments import kept_streak

    def run(at, kept, since=""):
        return {"name": f"r{at}", "state": "COMPLETE", "params": {}, "metrics": {
            "decision": "not registered", "champion_kept_runs": float(kept),
            "champion_kept_since": since, "decided_at": float(at)}}

    older, newest = run(100, 1, "2026-11-21"), run(200, 2, "2026-11-21")
    unfinished = {"name": "failed-before-export", "state": "FAILED", "params": {},
                  "metrics": {}}
    assert kept_streak([newest, unfinished, older]) == streaks.Streak(2, "2026-11-21")
    assert kept_streak([older, run(300, 0)]) is None  # the newest promoted
    assert kept_streak([unfinished]) is None and kept_streak([]) is None
    kept = decide({"test_accuracy": 0.9}, {"test_accuracy": 0.9}, threshold=0.5,
                  promotion="default", paired=Paired(100, 1, 1, 0))
    previous = kept_streak([newest])
    assert streaks.following(previous, kept, "2026-11-28") == streaks.Streak(3, "2026-11-21")
    assert streaks.following(None, kept, "2026-11-28") == streaks.Streak(1, "2026-11-28")
    replaced = types.SimpleNamespace(champion=0.9, default=True)
    assert streaks.following(previous, replaced) is None
