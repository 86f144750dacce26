"""The experiments of ``anekit probe``, in the order they run (the runner reads :data:`RUNGS`).

Each row says what it answers, what it needs, what it records and which published
claims it settles; docs/probe.md expands the same table with sources. The runner
(:mod:`anekit.ladder.runner`) runs each in its own process with its timeout, so a crash
or hang in one is that experiment's result, not the end of the report.
"""

from __future__ import annotations

from anekit.ladder.runner import Rung
from anekit.probe import cache, clients, dispatch, events, weights
from anekit.probe.registry import Experiment

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "chaining",
        "Does an _ANEChainingRequest over two compiled in-memory programs validate, prepare "
        "and run, and how long does it take against two separate evaluations?",
        ("ane",),
        dispatch.chaining,
        (
            "classes: the chaining classes and their selectors with type encodings",
            "separate: two evaluations with a host copy between them (p50/p99), right numbers",
            "first_*/second_*: each _ANEBuffer, output set, chaining request, validate, prepare",
            "chained: whether starting the chain wrote the right final output, and how fast",
        ),
        "ANE_NOTES 2.3: the chaining request validates but appears to need Espresso IR; "
        "ane-infer: prepareChaining succeeds with the right output-set factory, buffersReady "
        "stays blocked",
        headline=dispatch.chaining_headline,
    ),
    Experiment(
        "shared-events",
        "Does the ANE wait for a GPU MTLSharedEvent signal before it starts, and signal a "
        "second event back when it is done?",
        ("ane", "metal"),
        events.shared_events,
        (
            "classes: _ANESharedEvents, _ANESharedSignalEvent, _ANESharedWaitEvent selectors",
            "fence.before_gpu_signal: whether the output was untouched before the GPU signalled",
            "fence.ane_waited_for_gpu, fence.ane_signalled_back, fence.fence_works",
            "unfenced_numbers: the same program without events (control)",
        ),
        "ANE_NOTES 2.3 lists the event classes as unexplored; ggml's Metal/ANE backend and "
        "tmc/apple x/ane build wait and signal events (eventType 0 vs 5)",
        headline=events.shared_events_headline,
        timeout_s=120.0,
    ),
    Experiment(
        "realtime",
        "Does evaluateRealTimeWithModel inside beginRealTimeTask cut latency jitter against "
        "evaluateWithQoS (p50/p99 over 1,000 evaluations each)?",
        ("ane",),
        dispatch.realtime,
        (
            "selectors: which real-time selectors _ANEClient has",
            "begin_real_time_task / end_real_time_task: what they returned",
            "*_numbers: each path gives the right numbers",
            "latency: min/p50/p99/max per path, the paths interleaved in blocks",
        ),
        "ANE_NOTES 2.2: real-time task reported to cut p99 jitter from 35 ms to 3 ms (not yet "
        "shown working)",
        headline=dispatch.realtime_headline,
    ),
    Experiment(
        "virtual-client",
        "Can _ANEVirtualClient be created and used (an evaluation with the right numbers) "
        "from this process?",
        ("ane",),
        clients.virtual_client,
        (
            "client_isVirtualClient / client_virtualClient: what _ANEClient says",
            "shared_connection / new: whether an instance comes back",
            "connect, hostBuildVersion, hostCapabilityMask, hostDataInterfaceVersion",
            "evaluate, numbers, usable",
        ),
        "ANE_NOTES 2.3: multi-process virtualised access, unexplored",
        headline=clients.virtual_client_headline,
    ),
    Experiment(
        "perf-counters",
        "Which _ANEPerformanceStats factories work, and what fields come back after an "
        "evaluation under each perf-stats mask?",
        ("ane",),
        clients.perf_counters,
        (
            "classes: _ANEPerformanceStats selectors; driver_masks: driverMaskForANEFMask:",
            "factory_*: each factory's result; factories_that_work",
            "mask_<m>_<factory>: every getter's value after one evaluation with that mask",
        ),
        "ANE_NOTES 2.3/2.5: alloc/init returns nil; perfStats on a request is the presumed "
        "way to hardware time (not confirmed); counters may be unavailable for in-memory MIL",
        headline=clients.perf_counters_headline,
    ),
    Experiment(
        "weight-reload",
        "After unload, overwriting the weight file and reload, does the model compute with "
        "the old weights or the new; and do the mutable-weights selectors work?",
        ("ane",),
        weights.weight_reload,
        (
            "before / after_reload / after_reload_new_request / after_recompile: "
            "computed_with old, new, both or neither",
            "patched: which file and offset were rewritten",
            "mutable: map, where the old weights were found, sync, after_sync, unmap",
            "fresh_compile: the new weights compiled from scratch (control)",
        ),
        "ANE_NOTES 2.4: weights frozen at compile time (maderix, M5; libane) vs Orion's "
        "working unload/patch/reload; mutable-weights selectors reported on macOS 27",
        headline=weights.weight_reload_headline,
    ),
    Experiment(
        "queue-depth",
        "How does throughput change with 1 to 127 evaluations in flight?",
        ("ane",),
        dispatch.queue_depth,
        (
            "depth_<d>: evaluations, seconds, per_s, wrong answers, errors",
            "throughput_per_s: evaluations per second at each depth",
        ),
        "ANE_NOTES 1: request queue depth 127 (Asahi docs); the gain from depth is unmeasured",
        headline=dispatch.queue_depth_headline,
        timeout_s=300.0,
    ),
    Experiment(
        "compile-cache",
        "How long does a first compile take against a cache hit, and which files does the "
        "compile cache hold?",
        ("ane",),
        cache.compile_cache,
        (
            "first / second: compile_s, load_s, hex, workdir_files",
            "new_cache_files: files that appeared in the E5 bundle cache (path: bytes)",
            "*_compiledModelExistsFor / *_compiledModelExistsMatchingHash: the client's answer",
        ),
        "ANE_NOTES 2.1/7: first compile 20-40 ms (11-80 seen), cache hit about 0",
        headline=cache.compile_cache_headline,
    ),
)

RUNGS: tuple[Rung, ...] = tuple(e.rung() for e in EXPERIMENTS)
BY_NAME = {e.name: e for e in EXPERIMENTS}
