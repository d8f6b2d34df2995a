"""Interrupting a local run stops every process it started and leaves nothing behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Exercised here without an import, through `gpu-pipeline run --local` as a subprocess:
# `pipelines.process_tree` (stopping what the run started), `trainer.cluster.watch` (a
# cluster that cannot form, bounded).

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent / "gpu-pipeline"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


# SIGTERM (143), sent to the whole process group, is the next test's.
@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130)])
def test_an_interrupted_run_stops_its_workers_and_removes_its_partial_run(tmp_path, signum,
                                                                          code):
    root, temp = tmp_path / "runs", tmp_path / "tmp"
    temp.mkdir()
    log = open(tmp_path / "out.log", "w")
    run = subprocess.Popen([str(BIN), "run", "--local", "--pipeline-root", str(root)],
                           stdout=log, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "TMPDIR": str(temp)})
    deadline = time.monotonic() + 300
    while "[trainer chief:0] epoch 1/" not in (tmp_path / "out.log").read_text():
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
        time.sleep(0.2)
    assert len(_processes_mentioning(str(root))) >= 3  # the stage and both trainer workers
    run.send_signal(signum)  # to the command alone, as `kill` or a scheduler would
    _, err = run.communicate(timeout=60)
    assert run.returncode == code, err
    assert "interrupted: every process of the run was stopped" in err
    assert "Traceback" not in err
    time.sleep(2)
    assert _processes_mentioning(str(root)) == []  # no worker runs on
    assert sorted(os.listdir(root)) == []  # no partial run, no cache entry of it
    assert os.listdir(temp) == []  # the runner's temporary files are gone too


def _trainer(root: Path, task_type: str) -> int | None:
    """The pid of the run's trainer replica of `task_type`, once it exists."""
    for pid in _processes_mentioning(str(root)):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"trainer.task" in cmdline and f'"type": "{task_type}"'.encode() in environ:
            return pid
    return None


def _freeze_worker(run: subprocess.Popen, root: Path, deadline: float) -> int:
    """Freezes the run's worker replica as soon as it exists (SIGSTOP); returns its pid."""
    while (worker := _trainer(root, "worker")) is None:
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
        time.sleep(0.05)
    os.kill(worker, signal.SIGSTOP)
    return worker


def _kill_leftovers(run: subprocess.Popen, root: Path) -> list[int]:
    """Kills the command and whatever of its run is left (so that nothing outlives the
    test); returns what was left of the run."""
    if run.poll() is None:
        run.kill()
    left = _processes_mentioning(str(root))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_a_run_interrupted_while_its_cluster_forms_leaves_no_process(tmp_path):
    # The worker is frozen as it starts, so the chief waits for it: a replica stuck forming
    # the cluster ignores SIGTERM (TensorFlow's coordination service handles it), and a
    # frozen one cannot act on it at all. The signal goes to the whole process group, as
    # `timeout` and a terminal's Ctrl-C send it: the stage processes die at once and the
    # trainers are re-parented before the command looks for them. All must be gone when
    # the command says so.
    root, temp = tmp_path / "runs", tmp_path / "tmp"
    temp.mkdir()
    log = open(tmp_path / "out.log", "w")
    run = subprocess.Popen([str(BIN), "run", "--local", "--pipeline-root", str(root)],
                           stdout=log, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "TMPDIR": str(temp)}, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        _freeze_worker(run, root, deadline)
        while "[trainer chief:0] training plan" not in (tmp_path / "out.log").read_text():
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
            time.sleep(0.2)
        time.sleep(3)  # the chief is now waiting for the frozen worker
        assert "epoch 1/" not in (tmp_path / "out.log").read_text()
        os.killpg(run.pid, signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        left = _kill_leftovers(run, root)
    assert run.returncode == 143, err
    assert "interrupted: every process of the run was stopped" in err
    assert left == []
    assert sorted(os.listdir(root)) == []


def test_a_cluster_that_cannot_form_fails_within_its_limit_naming_the_replica(tmp_path):
    # The worker is frozen as it starts (as behind a firewall: alive, but nothing answers
    # at its address): the chief stops after training.cluster_wait, naming it, and the
    # launcher stops the rest.
    root = tmp_path / "runs"
    log = open(tmp_path / "out.log", "w")
    run = subprocess.Popen([str(BIN), "run", "--local", "--pipeline-root", str(root),
                            "--cluster-wait", "5"], stdout=log, stderr=subprocess.PIPE,
                           text=True)
    try:
        _freeze_worker(run, root, time.monotonic() + 300)
        frozen = time.monotonic()
        _, err = run.communicate(timeout=240)
        took = time.monotonic() - frozen
    finally:
        left = _kill_leftovers(run, root)
    out = (tmp_path / "out.log").read_text()
    assert run.returncode == 1, err
    assert re.search(r"trainer: chief:0: the training cluster did not form within 5 s "
                     r"\(training\.cluster_wait\): could not reach worker:0 \(localhost:\d+\)\. "
                     r"Likely causes: a replica that failed to start or died", out + err)
    assert took < 5 + 60  # the limit, TensorFlow's start and the launcher's stop
    assert "Traceback" not in err and "epoch 1/" not in out
    # The reason first and once in the log (and again in the run's summary, which names
    # the failed stage's own words), and in the command's last word; no chatter.
    reason = "trainer: chief:0: the training cluster did not form within 5 s"
    assert err.startswith("error: the pipeline failed: training failed: training process "
                          f"chief exited with code -9: {reason}")
    summary = [line for line in out.splitlines() if line.startswith("[gpu-pipeline] run error:")]
    assert len(summary) == 1 and reason in summary[0]
    assert out.count(reason) == 2 and "cuda_platform" not in out and "oneDNN" not in out
    assert left == []
