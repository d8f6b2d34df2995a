"""Stage 3, the project's images: their build context (`context`), Cloud Build
(`cloud_build`) and the stage that ties them (`stage`); their lock files (`locks`, `make
lock`) and the offline check of their environments (`image_check`, `make image-check`)."""
