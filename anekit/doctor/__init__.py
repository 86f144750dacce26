"""``anekit doctor``: what this machine offers for the ANE, and the ladder of experiments that pinpoints a failure."""
