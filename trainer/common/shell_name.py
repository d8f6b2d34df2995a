"""How the commands the product prints name `gpu-pipeline`, so that each runs as printed.

The README installs the project into `.venv` in the checkout and puts nothing on the
PATH, so a hint that says `gpu-pipeline predict IMAGE...` would be `command not found` in
the shell it leaves. A hint names the command this process runs from: `gpu-pipeline` when
that is what the PATH finds, else its path (relative to the working directory when it is
below it: `.venv/bin/gpu-pipeline`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

NAME = "gpu-pipeline"


def command() -> str:
    """`gpu-pipeline`, or the path that runs it from the user's shell (module docstring)."""
    script = Path(sys.executable).parent / NAME  # the environment's console script
    if not script.is_file():
        return NAME  # not installed as a command (a container, a notebook): its name
    found = shutil.which(NAME)
    if found and os.path.samefile(found, script):
        return NAME
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
