"""A DataLoadingBenchmark: its spec, CRD, JobSet and status."""
