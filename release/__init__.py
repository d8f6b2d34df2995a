"""Release tooling, outside the stages and imported by nothing the pipeline runs: `make
lock` (`locks`: the images' Python locks with uv, and the GPU image's apt lock) and `make
image-check` (`image_check`: each image's environment built from its lock and started)."""
