"""Both demands at once on a checkpoint rank: its loader (loader.py) and the interleaved windows
(windows.py)."""
