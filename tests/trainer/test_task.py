"""The trainer's entry point ends the process with main's code, its output flushed."""

import subprocess
import sys

from tests.support.paths import ROOT


def test_exit_now_flushes_output_and_keeps_the_code():
    program = ("import logging, sys; from trainer.task import exit_now; "
               "logging.basicConfig(stream=sys.stderr); "
               "sys.stdout.write('model written'); logging.getLogger('t').warning('last line'); "
               "exit_now(3)")
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 3
    assert result.stdout == "model written"
    assert "last line" in result.stderr


def test_exit_now_runs_the_exit_handlers_first(tmp_path):
    left = tmp_path / "generated.py"
    program = ("import atexit, os, sys; from trainer.task import exit_now; "
               f"open({str(left)!r}, 'w').close(); "
               f"atexit.register(os.remove, {str(left)!r}); exit_now(0)")
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert not left.exists()  # as AutoGraph removes the modules it generated
