"""``anekit probe``: re-run the reverse-engineering experiments on a Mac and share what they saw.

Each experiment is a small declared object (:class:`~anekit.probe.registry.Experiment`:
name, question, what it needs, how it runs, what it records, the published claims it
settles) in :data:`anekit.probe.experiments.EXPERIMENTS`. ``anekit probe`` runs each in
its own process with a timeout through the doctor ladder's runner
(:mod:`anekit.ladder.runner`), appending every result to the JSON report as it finishes.
Also here: the call tracer (:mod:`anekit.probe.tracing`, ``anekit.trace()``) and the
shared-event fence between the GPU and the ANE (:mod:`anekit.probe.events`).
Nothing here imports PyObjC until an experiment runs.
"""
