"""MIL->MIL passes: the convert and device pipelines over the one rewrite engine."""
