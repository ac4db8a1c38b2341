"""The CheckpointBenchmark resource: names, the spec model, its cross-field rules and the CRD."""
