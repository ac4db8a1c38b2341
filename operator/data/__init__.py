"""The DataLoadingBenchmark kind: its spec, CRD and JobSet."""
