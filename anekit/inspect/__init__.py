"""Read what the ANE compiler produces: hwx programs, E5 descriptors, the compile cache.

- :mod:`anekit.inspect.hwx`: hwx files (header, segments, I/O tensors, weights,
  compiler identification, task descriptors), on top of :mod:`.macho`;
- :mod:`anekit.inspect.tasks`: task descriptors and the H13 register field map;
- :mod:`anekit.inspect.flatbuf`: a schema-less FlatBuffer walker, and
  :mod:`anekit.inspect.e5` the guesses about E5 descriptors;
- :mod:`anekit.inspect.cache`: the E5 bundle cache;
- :mod:`anekit.inspect.report`: format detection and summaries (``anekit inspect``).
"""
