"""The pipeline's KFP components: thin interfaces over the plain stage modules.

Each component body only imports its stage module and calls it, so all behaviour is
tested without KFP. The bodies run in the project's CPU image (on Vertex) or in this
environment (kfp.local's SubprocessRunner), where the project is installed; that is
why `install_kfp_package=False` and why imports sit inside the functions (lightweight
components are shipped as their source).

Options arrive as dict parameters (`dataset`, `training`, `vertex`) and are read back
through their declared models, so a partial dict from another team's pipeline gets the
defaults and a bad value gets the same message as on the command line. The components are
listed in the order the pipeline runs them:

- `setup`: stages 1 to 3 (GPU configuration, dataset, images);
- `training`: stage 4 (a study, then training, locally or on Vertex AI; the report);
- `export`: stage 5 (export behind the gate, registration) and the run's summary;
- `deploy`: stage 6 (the promoted model rolled out on the endpoint);
- `batch_predict`: the batch step after a promotion (its instances; gcpc runs the job).
"""
