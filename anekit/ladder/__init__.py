"""Ladders of experiments shared by ``doctor`` and ``probe``: the subprocess runner and the cases.

:mod:`anekit.ladder.runner` runs declared rungs, each in a child process with a timeout;
:mod:`anekit.ladder.cases` holds the programs rungs run, with outputs computed in NumPy.
"""
