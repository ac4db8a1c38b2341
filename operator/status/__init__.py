"""A CheckpointBenchmark's status, a pure function of its spec, JobSet and pods."""
