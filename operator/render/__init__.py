"""CheckpointBenchmark -> JobSet: names and labels, the pure rendering, ``ckptbench render``."""
