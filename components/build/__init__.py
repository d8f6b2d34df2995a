"""Stage 3, the project's images.

- `context`: the build context (sources, Dockerfiles, lock files) and its digest;
  `dockerignore`: what stays out of it.
- `cloud_build`: the Cloud Build request that builds and pushes an image.
- `build_images`: the stage itself: each image found by its context's tag, or built.
- `apt_lock` and `apt_repository`: a signed apt repository pinned and installed by hash
  (the GPU image's Reduction Server plugin; its image build runs them), from a mirror too.
- `sources`: where a build's inputs come from (the public sources, or mirrors inside a
  perimeter); `pip_index`: the images' pip step, from PyPI or the configured index.

The release tooling that writes the locks and checks the images (`make lock`, `make
image-check`) is the `release` package, which nothing the pipeline runs imports.
"""
