"""What this machine offers for the ANE: the report behind ``anekit doctor`` (``report``)."""
