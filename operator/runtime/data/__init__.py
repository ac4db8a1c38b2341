"""The operator's runtime for DataLoadingBenchmarks: its kind, handlers and series."""
