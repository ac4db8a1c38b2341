"""The rank program: config, synthetic state, storage backends, timed loop, results."""
