"""The benchmark suite and the programs it measures."""
