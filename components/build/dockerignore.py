"""`.dockerignore`: which files of the project are in the image's build context.

The one reader of the file, with Docker's rules (moby's patternmatcher): patterns are
paths relative to the context root (a leading `/` is ignored), `*` matches within one path
segment, `?` one character, `**` any number of directories; a pattern that matches a
directory matches everything in it; `!` re-includes; the last matching pattern decides.
Whatever the Docker engine would leave out of the context, the uploaded tarball leaves
out too, secrets first.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path


def _regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


class DockerIgnore:
    """The patterns of a `.dockerignore` file."""

    def __init__(self, text: str):
        self.rules: list[tuple[bool, str, re.Pattern]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = posixpath.normpath(line.lstrip("!").strip()).lstrip("/")
            self.rules.append((negated, pattern, _regex(pattern)))

    @classmethod
    def of(cls, root: Path) -> DockerIgnore:
        """The rules of `root/.dockerignore` (none when it is absent)."""
        path = root / ".dockerignore"
        return cls(path.read_text() if path.is_file() else "")

    def excluded(self, relative: str) -> bool:
        """Whether a path (relative, with `/`) is left out of the context."""
        parts = relative.split("/")
        candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        verdict = False
        for negated, _, regex in self.rules:
            if any(regex.fullmatch(c) for c in candidates):
                verdict = not negated
        return verdict

    def may_include_below(self, directory: str) -> bool:
        """Whether some file below an excluded directory could be re-included (else the
        walk skips it: `.venv`, `.git`)."""
        first = directory.split("/")[0]
        return any(negated and (pattern.split("/")[0] in (first, "**") or
                                any(c in pattern.split("/")[0] for c in "*?["))
                   for negated, pattern, _ in self.rules)

    def files(self, root: Path) -> list[str]:
        """The context's files under `root`, relative, sorted."""
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            base = Path(dirpath).relative_to(root).as_posix()
            base = "" if base == "." else f"{base}/"
            dirnames[:] = sorted(
                d for d in dirnames if not self.excluded(base + d)
                or self.may_include_below(base + d))
            found += [base + name for name in filenames if not self.excluded(base + name)]
        return sorted(found)
