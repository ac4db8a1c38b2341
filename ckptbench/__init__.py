"""ckptbench: distributed PyTorch checkpoint benchmarks against object storage."""

__version__ = "0.1.0"
