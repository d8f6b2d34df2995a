"""The order `make test` hands test files to its processes (`tests.support.schedule`)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support import schedule
from tests.support.paths import ROOT
from tests.support.schedule import FILE_SECONDS, longest_first


def test_every_timed_file_exists():
    # A renamed file would lose its place silently and run last.
    assert [f for f in FILE_SECONDS if not (ROOT / f).is_file()] == []


def test_the_timed_files_come_first_longest_first_and_the_rest_keep_their_order(monkeypatch):
    monkeypatch.setattr(schedule, "FILE_SECONDS", {"tests/long.py": 300, "tests/mid.py": 100})

    def item(nodeid):
        return SimpleNamespace(nodeid=nodeid)

    collected = [item("tests/a.py::one"), item("tests/mid.py::x"), item("tests/b.py::two"),
                 item("tests/long.py::y"), item("tests/mid.py::z"), item("tests/a.py::three")]
    ordered = [i.nodeid for i in longest_first(collected)]
    assert ordered == ["tests/long.py::y", "tests/mid.py::x", "tests/mid.py::z",
                       "tests/a.py::one", "tests/b.py::two", "tests/a.py::three"]
