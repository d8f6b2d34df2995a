"""The data's statistics (formats, sizes, duplicates) and the checks against the champion's
data: leakage, classes gone or new, shares and sizes moved, `dataset.drift: fail`."""

from __future__ import annotations

import io
import json
import random
import shutil

import pytest
from PIL import Image

from components.dataset.data_checks import champion_data, check_data
from components.dataset.data_statistics import data_summary, duplicates, size_bucket, statistics
from components.dataset.drift import DataDriftError, drift, jensen_shannon, l_infinity, leakage
from components.dataset.image_facts import dhash, facts_of, hamming
from components.dataset.prepare import dataset_options, prepare_source
from components.dataset.shapes import generate_shapes
from tests.support.facts import missing
from tests.support.leaky_data import copy_test_images_into_training


def _noted(split, identity, *, exact="0" * 16, hash_=0, size=(32, 32), fmt="PNG", label=0):
    return (split, identity, label, size[0], size[1], fmt, exact, hash_)


def test_an_image_re_encoded_keeps_its_perceptual_hash_and_its_facts_say_the_source():
    img = Image.new("RGB", (200, 120))
    for x in range(200):  # a left-to-right ramp with a bright square: structure to hash
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
    assert hamming(facts_a.dhash, facts_b.dhash) <= 2
    # Another image is far: its structure differs.
    assert hamming(facts_a.dhash, dhash(img.transpose(Image.Transpose.FLIP_LEFT_RIGHT))) > 20
    drawn = facts_of(img)
    assert drawn.format == "drawn" and drawn.dhash == facts_a.dhash


def test_duplicates_are_found_across_splits_as_a_brute_force_search_finds_them():
    rng = random.Random(7)
    train = [_noted("train", f"t{i}", exact=f"{i:016x}", hash_=rng.getrandbits(64))
             for i in range(400)]
    test = []
    for i in range(60):
        base = train[rng.randrange(len(train))]
        flips = rng.choice([0, 1, 3, 4, 5, 9])
        value = base[7]
        for bit in rng.sample(range(64), flips):
            value ^= 1 << bit
        exact = base[6] if i % 10 == 0 else f"e{i:015x}"
        test.append(_noted("test", f"q{i}", exact=exact, hash_=value))
    found = duplicates(train + test, near_distance=4)
    exact = sum(1 for q in test if any(q[6] == t[6] for t in train))
    near = sum(1 for q in test if not any(q[6] == t[6] for t in train)
               and min(hamming(q[7], t[7]) for t in train) <= 4)
    assert found["across"]["test-train"] == {"exact": exact, "near": near}
    assert exact == 6 and near > 10
    assert found["listed"][0]["kind"] == "exact" and found["listed"][0]["distance"] == 0
    assert all(d["distance"] <= 4 for d in found["listed"])
    # No validation split: no pairs with it.
    assert set(found["across"]) == {"test-train"}
    assert found["within"] == {"train": 0, "test": 0}


def test_statistics_count_formats_sizes_and_copies_within_a_split():
    noted = [_noted("train", "a", size=(640, 480), fmt="JPEG", exact="1" * 16),
             _noted("train", "b", size=(640, 480), fmt="JPEG", exact="1" * 16),
             _noted("train", "c", size=(1024, 768), fmt="PNG", exact="2" * 16),
             _noted("validation", "d", size=(30, 20), fmt="PNG", exact="3" * 16)]
    found = statistics(noted, near_distance=0)
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
    assert not missing(lines["class share"], "'cat'", "76.2%", "45.5%", "30.0%",
                       "dataset.drift_share 5.0%")
    assert not missing(lines["formats"], "JPEG", "57.1%", "100.0%")
    assert not missing(lines["sizes"], "3000x2000", "500x400", "Jensen-Shannon")
    assert all(f.warning for f in found)
    # The same data drifts nowhere.
    assert drift(champion, champion, share=0.05, sizes=0.1) == []


def test_near_duplicates_warn_only_when_they_grew_since_the_champions_data():
    def stats(near, test):
        return {"split_counts": {"test": test, "train": 100}, "duplicates": {
            "near_distance": 4, "across": {"test-train": {"exact": 0, "near": near}}}}

    alone, = leakage(stats(3, 20), None, 0.05)
    assert not alone.warning and not missing(alone.line, "3 test image(s)", "15.0%", "4 bits")
    same, = leakage(stats(3, 20), {"statistics": stats(3, 20)}, 0.05)
    assert not same.warning and "(15.0% in the champion's data)" in same.line
    grew, = leakage(stats(6, 20), {"statistics": stats(1, 20)}, 0.05)
    assert grew.warning and "5.0% in the champion's data (grew more than " in grew.line


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
    assert "| test | train | 2 | 0 |" in dataset_report and "- exact: `test:" in dataset_report

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
