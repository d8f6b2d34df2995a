"""The files published beside every model, by name: what the export stage writes there and
others read back (the training step's budget, the local registry). Pure data, so that a
reader imports no code of the export stage."""

#: The lineage record (`components.export.lineage`): data, code, options, cluster, metrics.
LINEAGE = "lineage.json"

#: The data the model was trained on, summarised (`components.dataset.data_statistics`):
#: what the next run's data checks compare with.
DATA_STATISTICS = "data_statistics.json"
