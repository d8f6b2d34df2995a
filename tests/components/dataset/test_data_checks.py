"""The data's statistics (formats, sizes, duplicates) and the checks against the champion's
data: leakage, classes gone or new, shares and sizes moved, `dataset.drift: fail`."""

from __future__ import annotations

import io
import json
import random
import re
import shutil

import pytest
from PIL import Image

from components.dataset.data_checks import champion_data, check_data
from components.dataset.data_statistics import data_summary, duplicates, size_bucket, statistics
from components.dataset.drift import DataDriftError, drift, jensen_shannon, l_infinity, leakage
from components.dataset.image_facts import difference, facts_of, thumbnail
from components.dataset.prepare import dataset_options, prepare_source
from components.dataset.shapes import generate_shapes
from tests.support.facts import figures, missing
from tests.support.leaky_data import copy_test_images_into_training, copy_training_images_into_test
from tests.support.uci_digits import write_digits


def _noted(split, identity, *, exact="0" * 16, thumb="00" * 192, size=(32, 32), fmt="PNG",
           label=0):
    return (split, identity, label, size[0], size[1], fmt, exact, thumb)


def test_an_image_resized_and_re_encoded_keeps_its_thumbnail_and_its_facts_say_the_source():
    img = Image.new("RGB", (200, 120))
    for x in range(200):  # a left-to-right ramp with a bright square: structure to keep
        for y in range(120):
            img.putpixel((x, y), (x, y * 2, 255 - x) if not (60 < x < 110 and 30 < y < 80)
                         else (250, 250, 250))
    png, jpeg = io.BytesIO(), io.BytesIO()
    img.save(png, "PNG")
    img.resize((100, 60)).save(jpeg, "JPEG", quality=70)
    with Image.open(io.BytesIO(png.getvalue())) as a, Image.open(io.BytesIO(jpeg.getvalue())) as b:
        facts_a, facts_b = facts_of(a, png.getvalue()), facts_of(b, jpeg.getvalue())
    assert facts_a[:3] == (200, 120, "PNG") and facts_b[:3] == (100, 60, "JPEG")
    assert facts_a.exact != facts_b.exact and len(facts_a.exact) == 16
    assert difference(facts_a.thumb, facts_b.thumb) < 2
    # The same picture mirrored is another image.
    assert difference(facts_a.thumb, thumbnail(img.transpose(Image.Transpose.FLIP_LEFT_RIGHT))) > 20
    drawn = facts_of(img)
    assert drawn.format == "drawn" and drawn.thumb == facts_a.thumb


def test_near_duplicates_are_the_pairs_a_brute_force_search_finds():
    rng = random.Random(7)
    train = [_noted("train", f"t{i}", exact=f"{i:016x}", label=i % 3,
                    thumb=rng.randbytes(192).hex()) for i in range(400)]
    test = []
    for i in range(60):
        base = train[rng.randrange(len(train))]
        pixels = bytes(min(255, max(0, v + rng.randint(-12, 12)))
                       for v in bytes.fromhex(base[7]))
        exact = base[6] if i % 10 == 0 else f"e{i:015x}"
        test.append(_noted("test", f"q{i}", exact=exact, thumb=pixels.hex(),
                           label=base[2] if i % 7 else (base[2] + 1) % 3))
    found = duplicates(train + test, near_difference=6)
    exact = [q for q in test if any(q[6] == t[6] for t in train)]
    nearest = {q[1]: min(train, key=lambda t: difference(q[7], t[7])) for q in test}
    near = [q for q in test if q not in exact and difference(q[7], nearest[q[1]][7]) <= 6]
    assert len(exact) == 6 and 10 < len(near) < 54  # some within, some not
    relabelled = sum(q[2] != next(t for t in train if t[6] == q[6])[2] for q in exact) + sum(
        q[2] != nearest[q[1]][2] for q in near)
    assert found["across"]["test-train"] == {"exact": 6, "near": len(near),
                                             "other_label": relabelled}
    assert relabelled > 0
    # The pairs under two labels are listed first; each near pair is the closest one.
    kinds = [("labels" in d) for d in found["listed"]]
    assert kinds == sorted(kinds, reverse=True)
    for d in found["listed"]:
        if d["kind"] == "near":
            query = d["images"][0].split(":")[1]
            assert d["images"][1] == f"train:{nearest[query][1]}"
            assert d["difference"] <= 6
    # No validation split: no pairs with it.
    assert set(found["across"]) == {"test-train"}
    assert found["within"] == {"train": 0, "test": 0}


def _flagged(manifest):
    """The near and exact copies across splits, and those under another label."""
    across = manifest["statistics"]["duplicates"]["across"].values()
    return sum(c["near"] + c["exact"] for c in across), sum(c["other_label"] for c in across)


@pytest.mark.parametrize("image_size", [32, 64])
def test_the_drawn_shapes_have_no_near_duplicates(tmp_path, image_size):
    manifest = prepare_source("builtin://shapes", tmp_path / "data", image_size=image_size,
                              builtin_images_per_class=200, processes=1)
    assert _flagged(manifest) == (0, 0)


def test_the_uci_digits_at_most_one_percent_and_never_across_labels(tmp_path):
    manifest = prepare_source(str(write_digits(tmp_path / "digits", 32)), tmp_path / "data",
                              processes=1)
    flagged, relabelled = _flagged(manifest)
    checked = manifest["splits"]["test"]["count"] + manifest["splits"]["validation"]["count"]
    assert flagged <= 0.01 * checked and relabelled == 0


def test_byte_copies_and_resized_copies_in_the_test_split_are_the_ten_found(tmp_path):
    source = generate_shapes(tmp_path / "images", images_per_class=60, image_size=64, seed=5)
    copies = copy_training_images_into_test(source, "square", byte_copies=5, resized_copies=5)
    manifest = prepare_source(str(source), tmp_path / "data", processes=1)
    dups = manifest["statistics"]["duplicates"]
    assert dups["across"]["test-train"] == {"exact": 5, "near": 5, "other_label": 0}
    assert dups["across"]["validation-train"] == {"exact": 0, "near": 0, "other_label": 0}
    assert sorted(d["images"][0] for d in dups["listed"]) == sorted(f"test:{c}" for c in copies)
    # Each pairs with the image it was copied from (`copy3_square_00012.jpg` of
    # `square_00012.png`).
    for d in dups["listed"]:
        original = re.sub(r"copy\d+_", "", d["images"][0].split(":")[1])
        assert d["images"][1] == "train:" + original.rsplit(".", 1)[0] + ".png"
    # A defect of the data itself: both warn on a first run, with no champion.
    warned = leakage(manifest["statistics"], None)
    assert [(f.check, f.warning) for f in warned] == [("leakage", True), ("leakage", True)]


def test_statistics_count_formats_sizes_and_copies_within_a_split():
    noted = [_noted("train", "a", size=(640, 480), fmt="JPEG", exact="1" * 16),
             _noted("train", "b", size=(640, 480), fmt="JPEG", exact="1" * 16),
             _noted("train", "c", size=(1024, 768), fmt="PNG", exact="2" * 16),
             _noted("validation", "d", size=(30, 20), fmt="PNG", exact="3" * 16)]
    found = statistics(noted, near_difference=0)
    assert found["split_counts"] == {"train": 3, "validation": 1}
    assert found["formats"] == {"JPEG": 2, "PNG": 2}
    assert found["sizes"]["longer_side"] == {"32": 1, "1024": 3}
    assert found["sizes"]["width"]["median"] == 640
    assert found["duplicates"]["within"] == {"train": 1, "validation": 0}
    assert size_bucket(1025, 10) == 2048 and size_bucket(1, 1) == 1


def test_drift_is_measured_as_vertex_ai_model_monitoring_measures_it():
    assert l_infinity({"a": 0.5, "b": 0.5}, {"a": 0.8, "b": 0.2}) == (pytest.approx(0.3), "a")
    assert jensen_shannon({"a": 1.0}, {"b": 1.0}) == pytest.approx(1.0)
    assert jensen_shannon({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}) == 0.0
    champion = {"per_class": {"cat": 50, "dog": 50, "owl": 10},
                "statistics": {"formats": {"JPEG": 110}, "sizes": {
                    "longer_side": {"512": 110}, "width": {"median": 500},
                    "height": {"median": 400}}}}
    now = {"per_class": {"cat": 80, "dog": 20, "fox": 5},
           "statistics": {"formats": {"JPEG": 60, "PNG": 45}, "sizes": {
               "longer_side": {"512": 50, "4096": 55}, "width": {"median": 3000},
               "height": {"median": 2000}}}}
    found = drift(now, champion, share=0.05, sizes=0.1)
    lines = {f.check: f.line for f in found}
    assert [f.check for f in found] == ["classes", "classes", "class share", "formats", "sizes"]
    assert not missing(found[0].line, "'owl'", "gone", "10 image(s)", "9.1%")
    assert found[1].line == "class 'fox' is new: 5 image(s) (4.8%); the champion never saw it"
    # The shares the line gives are those compared (cat and dog, the classes both have):
    # 80/100 now, 50/100 then, and the move is their difference.
    now_share, then_share, moved, _ = (float(x) for x in
                                       re.findall(r"([\d.]+)%", lines["class share"]))
    assert (now_share, then_share, moved) == (80.0, 50.0, now_share - then_share)
    assert "among the 2 classes both have" in lines["class share"]
    assert not missing(lines["formats"], "JPEG", "57.1%", "100.0%")
    assert not missing(lines["sizes"], "3000x2000", "500x400", "Jensen-Shannon")
    assert all(f.warning for f in found)
    # The same data drifts nowhere.
    assert drift(champion, champion, share=0.05, sizes=0.1) == []


def test_near_copies_warn_on_every_run_with_the_champions_share_measured_alike_beside():
    def stats(near, test, other_label=0, measure=("near_difference", 6.0)):
        return {"split_counts": {"test": test, "train": 100}, "duplicates": {
            measure[0]: measure[1],
            "across": {"test-train": {"exact": 0, "near": near, "other_label": other_label}}}}

    alone, = leakage(stats(3, 20), None)
    assert alone.warning and figures(alone.line)[:3] == [3, 15.0, 8]  # 3 (15.0%), 8x8
    same, = leakage(stats(3, 20), {"statistics": stats(3, 20)})
    assert same.warning and "(15.0% in the champion's data)" in same.line
    # A champion's counts by the hash's bit distance are another measure: not compared.
    older, = leakage(stats(6, 20), {"statistics": stats(1, 20, measure=("near_distance", 4))})
    assert older.warning and "champion" not in older.line
    # A copy under another label is a finding of its own.
    relabelled, near = leakage(stats(3, 20, other_label=1), None)
    assert relabelled.warning and near.warning and "another class" in relabelled.line
    assert leakage(stats(0, 20), None) == []


def test_data_that_lost_a_class_and_leaks_test_images_warns_and_fail_stops(tmp_path):
    source = generate_shapes(tmp_path / "images", images_per_class=40, image_size=40, seed=3)
    first = prepare_source(str(source), tmp_path / "first", processes=1)
    champion = tmp_path / "champion"
    champion.mkdir()
    (champion / "data_statistics.json").write_text(json.dumps(data_summary(first)))
    assert champion_data(champion)["per_class"] == {c: 40 for c in first["classes"]}
    # Nothing to say of the same data.
    lines: list[str] = []
    assert check_data(tmp_path / "first", dataset_options(str(source)), champion,
                      log=lines.append) == []
    assert lines == ["dataset: data checks: 0 warning(s), compared with the champion's data"]

    shutil.rmtree(source / "circle")
    copy_test_images_into_training(source, ["cross", "square", "triangle"], 2)
    prepare_source(str(source), tmp_path / "second", processes=1)
    lines = []
    report = tmp_path / "checks.md"
    found = check_data(tmp_path / "second", dataset_options(str(source)), champion,
                       report_path=report, log=lines.append)
    assert [(f.check, f.warning) for f in found] == [("leakage", True), ("classes", True)]
    # A line each, then the count.
    assert [line.split(": ", 2)[1] for line in lines] == ["warning", "warning", "data checks"]
    assert not missing(lines[0], "2 test image(s)", "byte-identical")
    assert not missing(lines[1], "'circle'", "40 image(s)", "25.0%")
    assert not missing(lines[2], "2 warning(s)")
    text = report.read_text()
    assert "| circle | - | 40 |" in text and "**warning** (leakage)" in text
    # The drift measured below its thresholds too: the 2 copies moved cross's share from
    # 40/120 to 42/122 among the classes left.
    assert "| class share | L-infinity | 0.0109 (cross) | dataset.drift_share 0.05 |" in text
    assert "| sizes | Jensen-Shannon | 0.0000 | dataset.drift_sizes 0.1 |" in text
    dataset_report = (tmp_path / "second" / "report.md").read_text()
    assert "| test | train | 2 | 0 | 0 |" in dataset_report and "- exact: `test:" in dataset_report

    with pytest.raises(DataDriftError) as raised:
        check_data(tmp_path / "second", dataset_options(str(source), drift="fail"), champion,
                   log=lambda line: None)
    assert not missing(str(raised.value), "dataset.drift", "'fail'", "2 time(s)",
                       "byte-identical", "dataset.drift: warn")
    # A champion whose model predates the statistics: only this data's own checks.
    lines = []
    check_data(tmp_path / "second", dataset_options(str(source)), tmp_path / "old",
               log=lines.append)
    assert not missing(lines[-1], "1 warning(s)", "no champion's data")
