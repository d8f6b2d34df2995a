"""Stage 3, the project's images.

- `context`: the build context (sources, Dockerfiles, lock files) and its digest;
  `dockerignore`: what stays out of it.
- `cloud_build`: the Cloud Build request that builds and pushes an image.
- `build_images`: the stage itself: each image found by its context's tag, or built.
- `locks`: the images' lock files (`make lock`: uv with hashes, and the apt lock);
  `apt_lock`: a signed apt repository pinned and installed by hash (the GPU image's
  Reduction Server plugin).
- `image_check`: each image's environment built from its lock and checked offline
  (`make image-check`).
"""
