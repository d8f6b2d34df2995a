"""Where an image build's inputs come from: the public sources by default, mirrors inside
a perimeter.

Beside its build context, a build reads four things: Debian's Python base image and Beam's
SDK image (Docker Hub), the locked Python packages (PyPI) and Reduction Server's NCCL
plugin (Google's apt repository). A Cloud Build private pool without public egress, as a
VPC Service Controls perimeter needs, reaches none of them (Cloud Build docs, "Using VPC
Service Controls"; Artifact Registry remote repositories mirror Docker Hub and PyPI), so
each then comes from the mirror the user names. What is installed does not change: images
are named by digest, every Python package is checked against the lock's hashes and the
plugin against the pinned key's signature and the lock's SHA-256, whichever server sends
them.
"""

from __future__ import annotations

import dataclasses

from components import images
from components.build.pip_index import is_artifact_registry

#: The build arguments that carry each source into the Dockerfiles.
PIP_INDEX_ARG = "PIP_INDEX"
APT_MIRROR_ARG = "APT_MIRROR"


@dataclasses.dataclass(frozen=True)
class BuildSources:
    """The mirrors a build reads instead of the public sources ("": the public one).

    Attributes:
        python_base_image: Debian's slim Python, by digest (`python:3.11-slim-bookworm`).
        beam_sdk_image: Beam's SDK image, by digest (the CPU image copies its boot program).
        pip_index_url: A Python package index holding the locks' packages.
        apt_mirror_url: A copy of Google's apt repository (Reduction Server's plugin).
    """

    python_base_image: str = ""
    beam_sdk_image: str = ""
    pip_index_url: str = ""
    apt_mirror_url: str = ""

    def build_args(self, image: images.ProjectImage) -> list[tuple[str, str]]:
        """`image`'s build arguments with these sources in place of the public ones."""
        replaced = {"PYTHON_BASE": self.python_base_image, "BEAM_SDK": self.beam_sdk_image}
        found = [(key, replaced.get(key) or value) for key, value in image.build_args]
        if self.apt_mirror_url and image is images.GPU:
            found.append((APT_MIRROR_ARG, self.apt_mirror_url))
        if self.pip_index_url:
            found.append((PIP_INDEX_ARG, self.pip_index_url))
        return found

    @property
    def needs_build_network(self) -> bool:
        """Whether a `docker build` must reach the metadata server (`--network=cloudbuild`,
        Cloud Build docs: "Build configuration overview", network): an Artifact Registry
        index is read with the build account's token (`components.build.pip_index`)."""
        return is_artifact_registry(self.pip_index_url)

    def public(self) -> list[tuple[str, str]]:
        """(option, what the build would read from the internet instead) for each source
        without a mirror."""
        found = [("vertex.python_base_image",
                  f"Debian's Python base image {images.PYTHON_BASE_IMAGE.split('@')[0]} from "
                  "Docker Hub"),
                 ("vertex.beam_sdk_image", f"Beam's SDK image {images.BEAM_SDK_IMAGE} from "
                                           "Docker Hub"),
                 ("vertex.pip_index_url", "the locks' Python packages from PyPI"),
                 ("vertex.apt_mirror_url",
                  f"Reduction Server's NCCL plugin ({images.REDUCTION_SERVER_PACKAGE}) from "
                  f"{images.GOOGLE_APT_REPOSITORY[0]}")]
        given = (self.python_base_image, self.beam_sdk_image, self.pip_index_url,
                 self.apt_mirror_url)
        return [entry for entry, mirror in zip(found, given, strict=True) if not mirror]

    def lines(self) -> list[str]:
        """What the dry run says of each source."""
        mirrored = [f"{name}: {value}" for name, value in (
            ("base image", self.python_base_image), ("Beam SDK image", self.beam_sdk_image),
            ("pip index", self.pip_index_url + (
                " (read as the build's account: docker build --network=cloudbuild)"
                if self.needs_build_network else "")),
            ("Reduction Server plugin from", self.apt_mirror_url and
             f"{self.apt_mirror_url} (a mirror of {images.GOOGLE_APT_REPOSITORY[0]}; the "
             "pinned key's signature and the lock's SHA-256 still checked)"))
            if value]
        public = [f"from the internet: {what} (no {option})" for option, what in self.public()]
        return mirrored + public


def perimeter_problems(pool: str, sources: BuildSources) -> list[str]:
    """Why a build in `pool`, a private pool without public egress, would fail: a line for
    each input it would read from the internet."""
    return [f"{option} is not set, and the build would read {what}, which the Cloud Build "
            f"private pool {pool} (no public egress) cannot reach: set {option} to a mirror "
            "of it (docs/perimeter.md)" for option, what in sources.public()]
