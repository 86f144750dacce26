"""``anekit serve``: an OpenAI-compatible HTTP server for :mod:`anekit.llm` models.

``protocol`` checks requests and builds OpenAI error objects, ``engine`` queues requests
and runs their generations fairly in sessions, ``app`` is the Starlette app, ``server``
runs it on uvicorn. Needs the ``serve`` extra; nothing here is imported by ``anekit.llm``.
"""
