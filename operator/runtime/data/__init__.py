"""The operator's runtime for DataLoadingBenchmarks (its kind, handlers and series), and the
series of a CheckpointBenchmark that loads data beside its saves (both demands at once)."""
