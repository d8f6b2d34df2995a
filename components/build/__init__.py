"""Stage 3, the project image: its build context (`context`), Cloud Build (`cloud_build`)
and the stage that ties them (`stage`)."""
