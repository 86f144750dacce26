"""``anekit probe``'s experiments against a recording stand-in (``tests/probe_fake.py``).

Each experiment runs here in this process against a stand-in for the framework whose
behaviour on the probed question can be switched, so these tests show: the selectors
it sends and in which order, the kinds of the arguments, that it records the answer
the framework gives (both answers, where the published claims conflict), and that it
cleans up (unloads, removes work directories, ends the real-time task, unmaps) when a
step fails. They prove our side of the contract only, not what Apple's framework does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anekit.ladder.runner import Context
from anekit.probe import cache, clients, dispatch, events, weights
from anekit.probe.common import build, find
from tests.ane_fake import REQUEST, FakeNSError, NSArray, NSNumber
from tests.ane_fixtures import fresh, rung_context
from tests.probe_fake import CHAIN, ProbeFramework


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProbeFramework:
    return fresh(tmp_path, monkeypatch, ProbeFramework)


@pytest.fixture
def ctx(tmp_path: Path, fake: ProbeFramework, monkeypatch: pytest.MonkeyPatch) -> Context:
    options = {"evaluations": 20, "depths": [1, 2, 4], "evaluations_per_depth": 8,
               "signal_timeout_s": 0.5, "chain_poll_s": 0.2}  # fmt: skip
    return rung_context(tmp_path, monkeypatch, fake, options)


def clean(fake: ProbeFramework) -> None:
    """Every model unloaded, every work directory removed, no surface touched while in use."""
    loads = len(fake.calls_to("loadWithQoS:options:error:"))
    unloads = len(fake.calls_to("unloadWithQoS:error:"))
    assert unloads == loads, (loads, unloads)
    assert not fake.tmp.exists() or list(fake.tmp.iterdir()) == []
    assert fake.violations == []


def sent(fake: ProbeFramework, *selectors: str) -> list[str]:
    """The calls to any of ``selectors``, in order (a plain request's ``validate`` left out)."""
    return [c.selector for c in fake.calls
            if c.selector in selectors and (c.receiver, c.selector) != ("request", "validate")]  # fmt: skip


# -- chaining -------------------------------------------------------------------------------------
def test_chaining_builds_buffers_sets_and_requests_then_prepares_and_runs(ctx, fake) -> None:
    dispatch.chaining(ctx)
    seen = ctx.observed
    assert seen["prepare_selector"] is True
    assert seen["classes"]["_ANEChainingRequest"]["+" + CHAIN].startswith("@88")
    order = sent(fake, "bufferWithIOSurfaceObject:symbolIndex:source:",
                 "objectWithstatsSurRef:outputBuffer:", CHAIN, "validate",
                 dispatch.PREPARE)  # fmt: skip
    per_program = ["bufferWithIOSurfaceObject:symbolIndex:source:"] * 2 + [
        "objectWithstatsSurRef:outputBuffer:",
        CHAIN,
        "validate",
        dispatch.PREPARE,
    ]
    assert order == per_program * 2
    # the arguments have the kinds the type encodings declare: objects as NSNumber/NSArray,
    # scalars as ints, the statistics surface as the IOSurface itself
    chain = fake.calls_to(CHAIN)[0].args
    assert isinstance(chain[0], NSArray) and isinstance(chain[1], NSArray)
    assert chain[2] == chain[3] == NSArray([NSNumber(-1)])  # loopback ids: arrays, as Espresso's
    assert chain[4] == NSNumber(0) and chain[7:] == (0, 0)
    buffer = fake.calls_to("bufferWithIOSurfaceObject:symbolIndex:source:")[0].args
    assert buffer[0].label == "io" and isinstance(buffer[1], NSNumber) and buffer[2] == 0
    prepare = fake.calls_to(dispatch.PREPARE)[0].args
    assert prepare[0].label == "ane_model" and prepare[3] == 21
    assert ("_ANEClient", dispatch.PREPARE) in fake.error_outs
    # the first program wrote straight into the second's input; the chain gave B(A(x))
    assert seen["chained"]["match"] and seen["separate"]["match"]
    assert seen["first_prepare"]["value"] is True and seen["second_validate"]["value"] is True
    assert "chained run: right numbers" in dispatch.chaining_headline(seen)
    clean(fake)


def test_chaining_records_a_refused_prepare_and_still_cleans_up(ctx, fake) -> None:
    fake.chain_prepares = False
    dispatch.chaining(ctx)
    seen = ctx.observed
    error = seen["first_prepare"]["error"]
    assert seen["first_prepare"]["ok"] is False and error["code"] == 15
    assert "Espresso" in error["message"] and "chained" not in seen
    assert sent(fake, "buffersReadyWithModel:inputBuffers:options:qos:error:") == []
    assert "prepare: {'first': 'failed (" in dispatch.chaining_headline(seen)
    clean(fake)


def test_chaining_records_a_chain_that_prepares_but_does_not_run(ctx, fake) -> None:
    fake.chain_runs = False
    dispatch.chaining(ctx)
    seen = ctx.observed
    assert seen["first_buffers_ready"]["ok"] is False
    assert seen["chained"]["match"] is False  # nothing was written to the final output
    clean(fake)


def test_the_generic_constructor_names_a_missing_argument(fake) -> None:
    sel, enc = find(fake, "_ANEIOSurfaceOutputSets", "+", ("objectWithstatsSurRef:",))
    with pytest.raises(Exception, match="no value for argument 'outputBuffer'"):
        build(fake, "_ANEIOSurfaceOutputSets", fake.cls("_ANEIOSurfaceOutputSets"), sel, enc,
              {"statsSurRef": object()})  # fmt: skip


# -- real time ------------------------------------------------------------------------------------
def test_realtime_times_both_paths_inside_a_real_time_task(ctx, fake) -> None:
    dispatch.realtime(ctx)
    seen = ctx.observed
    assert seen["begin_real_time_task"]["value"] is True
    assert seen["end_real_time_task"]["value"] is True
    assert seen["evaluateWithQoS_numbers"]["match"] and seen["evaluateRealTime_numbers"]["match"]
    latency = seen["latency"]
    assert latency["evaluateWithQoS"]["n"] == latency["evaluateRealTime"]["n"] == 20
    assert latency["evaluateRealTime"]["p99_ms"] >= latency["evaluateRealTime"]["p50_ms"]
    # interleaved: the paths alternate in blocks, not all of one then all of the other
    order = sent(fake, "evaluateWithQoS:options:request:error:",
                 "evaluateRealTimeWithModel:options:request:error:")  # fmt: skip
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches >= 2 * dispatch.REALTIME_BLOCKS - 1
    rt = fake.calls_to("evaluateRealTimeWithModel:options:request:error:")[0].args
    assert rt[0].label == "ane_model" and rt[2].label == "request"
    assert sent(fake, "beginRealTimeTask", "endRealTimeTask") == ["beginRealTimeTask",
                                                                  "endRealTimeTask"]  # fmt: skip
    # the model is loaded for real time before the task and unloaded after it
    assert sent(fake, dispatch.LOAD_REALTIME, "beginRealTimeTask", "endRealTimeTask",
                dispatch.UNLOAD_REALTIME) == [dispatch.LOAD_REALTIME, "beginRealTimeTask",
                                              "endRealTimeTask", dispatch.UNLOAD_REALTIME]  # fmt: skip
    assert fake.calls_to(dispatch.LOAD_REALTIME)[0].args[0].label == "ane_model"
    assert seen["load_real_time_model"]["ok"] and fake.realtime_models == set()
    clean(fake)


def test_realtime_without_loading_the_model_for_real_time_is_refused(ctx, fake) -> None:
    """The stand-in refuses a real-time evaluation of a model not loaded for it."""
    del fake.selectors[("client", dispatch.LOAD_REALTIME)]
    dispatch.realtime(ctx)
    assert ctx.observed["load_real_time_model"]["ok"] is False
    assert ctx.observed["evaluateRealTime_first"]["error"]["code"] == 0x1D
    clean(fake)


def test_realtime_failure_is_recorded_and_the_task_still_ends(ctx, fake) -> None:
    fake.realtime_fails = True
    dispatch.realtime(ctx)
    seen = ctx.observed
    assert seen["evaluateRealTime_first"]["ok"] is False
    assert seen["evaluateRealTime_first"]["error"]["code"] == 0x1D
    assert "evaluateRealTime" not in seen["latency"]
    assert seen["latency"]["evaluateWithQoS"]["n"] == 20
    assert sent(fake, "endRealTimeTask") == ["endRealTimeTask"]
    clean(fake)


# -- queue depth --------------------------------------------------------------------------------
def test_queue_depth_measures_each_depth_with_right_answers(ctx, fake) -> None:
    fake.evaluate_delay = 0.002
    dispatch.queue_depth(ctx)
    seen = ctx.observed
    assert set(seen["throughput_per_s"]) == {"1", "2", "4"}
    for d in (1, 2, 4):
        row = seen[f"depth_{d}"]
        assert row["evaluations"] == 8 and row["wrong"] == 0 and row["error_count"] == 0
    assert fake.max_in_flight >= 2  # several requests really were in flight at once
    clean(fake)


# -- shared events ------------------------------------------------------------------------------
def test_shared_events_sees_the_ane_wait_for_the_gpu_and_signal_back(ctx, fake) -> None:
    events.shared_events(ctx)
    fence = ctx.observed["fence"]
    assert fence["before_gpu_signal"] == {"returned": False, "output_untouched": True,
                                          "done_value": 0}  # fmt: skip
    assert fence["ane_waited_for_gpu"] and fence["ane_signalled_back"] and fence["fence_works"]
    assert ctx.observed["unfenced_numbers"]["match"]
    wait = fake.calls_to("waitEventWithValue:sharedEvent:")[0].args
    signal = fake.calls_to("signalEventWithValue:symbolIndex:eventType:sharedEvent:")[0].args
    assert wait[0] == 1 and wait[1].event is fake.metal.events[0]  # the GPU's "go" event
    assert signal[:3] == (1, 0, events.SIGNAL_TYPE) and signal[3].event is fake.metal.events[1]
    assert len(fake.metal.committed) == 1  # the signal came from a GPU command buffer
    assert sent(fake, "setSharedEvents:") == ["setSharedEvents:"]
    clean(fake)


def test_shared_events_use_the_factory_where_a_request_cannot_set_them(ctx, fake) -> None:
    del fake.selectors[("request", "setSharedEvents:")]
    events.shared_events(ctx)
    assert ctx.observed["request_sets_shared_events"] is False
    assert ctx.observed["fence"]["fence_works"]
    factory = fake.calls_to(REQUEST + "sharedEvents:")[0].args
    assert factory[-1].label == "shared_events" and factory[-1].waits.items[0].value == 1
    clean(fake)


def test_shared_events_records_a_framework_that_ignores_the_events(ctx, fake) -> None:
    fake.events_honoured = False
    events.shared_events(ctx)
    fence = ctx.observed["fence"]
    assert fence["before_gpu_signal"]["output_untouched"] is False
    assert not fence["ane_waited_for_gpu"] and not fence["ane_signalled_back"]
    assert fence["fence_works"] is False and fence["numbers"]["match"]
    clean(fake)


# -- virtual client and performance counters ------------------------------------------------------
def test_virtual_client_is_created_described_and_used(ctx, fake) -> None:
    clients.virtual_client(ctx)
    seen = ctx.observed
    assert seen["hostBuildVersion"]["value"] == "24A335" and seen["usable"] is True
    assert seen["client_isVirtualClient"]["value"] is False
    call = fake.calls_to("evaluateWithModel:options:request:qos:error:")[0]
    assert call.receiver == "vclient" and call.args[0].label == "ane_model"
    clean(fake)


def test_virtual_client_getters_the_runtime_does_not_list_are_not_sent(ctx, fake) -> None:
    del fake.selectors[("client", "virtualClient")]
    del fake.selectors[("vclient", "hostCapabilityMask")]
    clients.virtual_client(ctx)
    seen = ctx.observed
    assert seen["_ANEClient_getters_absent"] == ["virtualClient"]
    assert seen["_ANEVirtualClient_getters_absent"] == ["hostCapabilityMask"]
    assert "client_virtualClient" not in seen and "hostCapabilityMask" not in seen
    assert seen["usable"] is True
    clean(fake)


def test_virtual_client_that_cannot_be_made_is_recorded(ctx, fake) -> None:
    fake.virtual_client = False
    clients.virtual_client(ctx)
    assert ctx.observed["usable"] is False and ctx.observed["shared_connection"]["value"] is None
    assert fake.calls_to("compileWithQoS:options:error:") == []


def test_perf_counters_tries_every_factory_under_every_mask(ctx, fake) -> None:
    clients.perf_counters(ctx)
    seen = ctx.observed
    assert seen["factories_that_work"] == ["initWithHardwareExecution_perfCounterData",
                                           "statsWithHardwareExecutionNS"]  # fmt: skip
    assert seen["factory_new"]["value"] is None  # nil, as ANE_NOTES 2.3 says alloc/init gives
    assert seen["driver_masks"]["15"] == 15 << 8
    for mask in clients.MASKS:
        fields = seen[f"mask_{mask}_statsWithHardwareExecutionNS"]["value"]["fields"]
        # the stand-in writes 8 counter bytes per mask bit: the mask was set before each run
        assert fields["perfCounterData"]["bytes"] == 8 * bin(mask).count("1")
        assert fields["hwExecutionTime"] == 12_345
    masks = [c.args[0] for c in fake.calls_to("setPerfStatsMask:") if c.receiver == "ane_model"]
    assert masks[-len(clients.MASKS) :] == list(clients.MASKS)
    clean(fake)


# -- weight reload --------------------------------------------------------------------------------
@pytest.mark.parametrize("reads_files, verdict", [(False, "old"), (True, "new")])
def test_weight_reload_records_which_weights_the_reloaded_model_uses(
    ctx, fake, reads_files: bool, verdict: str
) -> None:
    fake.reload_reads_files = reads_files  # True: Orion's finding; False: maderix's
    weights.weight_reload(ctx)
    seen = ctx.observed
    assert seen["before"]["computed_with"] == "old"
    assert seen["after_reload"]["value"]["computed_with"] == verdict
    assert seen["fresh_compile"]["computed_with"] == "new" and seen["fresh_workdir_differs"]
    assert seen["patched"]["file"].startswith("weights/")
    assert sent(fake, "unloadWithQoS:error:", "loadWithQoS:options:error:")[:3] == [
        "loadWithQoS:options:error:",
        "unloadWithQoS:error:",
        "loadWithQoS:options:error:",
    ]
    assert f"computes with: {verdict} weights" in weights.weight_reload_headline(seen)
    clean(fake)


def test_a_reload_that_fails_is_recorded_and_the_kernel_still_closes(ctx, fake) -> None:
    refused = (False, FakeNSError("load refused", error_code=11))
    fake.load_results = [(True, None), refused, refused]  # compile ok; reload and recompile not
    weights.weight_reload(ctx)
    seen = ctx.observed
    assert seen["reload"]["ok"] is False and seen["reload"]["error"]["code"] == 11
    assert "after_reload" not in seen and "unload_again" not in seen
    assert seen["load_after_recompile"]["ok"] is False and "after_recompile" not in seen
    assert seen["close"]["ok"] is True and seen["fresh_compile"]["computed_with"] == "new"
    assert "not reloaded" in weights.weight_reload_headline(seen)
    assert not fake.tmp.exists() or list(fake.tmp.iterdir()) == []


def test_mutable_weights_are_found_rewritten_synced_and_unmapped(ctx, fake) -> None:
    weights.weight_reload(ctx)
    mutable = ctx.observed["mutable"]
    assert mutable["map_number"]["ok"] and mutable["old_weights_at"] is not None
    assert ctx.observed["after_sync"]["value"]["computed_with"] == "mapped"
    sync = fake.calls_to(weights.SYNC)[0].args
    assert sync[2] == mutable["old_weights_at"] and sync[3] == weights.weights(29).nbytes
    assert fake.mutable_maps == []  # unmapped
    clean(fake)


def test_mutable_weights_absent_are_said_to_be(ctx, fake) -> None:
    del fake.selectors[("client", weights.MAP)]
    weights.weight_reload(ctx)
    assert ctx.observed["mutable"].startswith("absent: _ANEClient has no mapMutableWeights")


# -- compile cache ------------------------------------------------------------------------------
def test_compile_cache_times_both_compiles_and_lists_new_cache_files(ctx, fake, tmp_path) -> None:
    fake.cache_dir = tmp_path / "cache"
    fake.cache_dir.mkdir()
    ctx.options["cache_dirs"] = [str(fake.cache_dir)]
    cache.compile_cache(ctx)
    seen = ctx.observed
    assert seen["first"]["hex"] == seen["second"]["hex"]
    assert seen["first"]["compile_ok"] and seen["second"]["load_ok"]
    assert seen["new_cache_file_count"] == 1 and seen["cache_files_after_second"] == 0
    ((path, size),) = seen["new_cache_files"].items()
    assert path.endswith("H16G.bundle/H16G.e5") and size == 2688
    assert set(seen["first"]["workdir_files"]) == {"model.mil"}
    assert seen["first_compiledModelExistsFor"]["value"] is True
    assert sent(fake, "compileWithQoS:options:error:") == ["compileWithQoS:options:error:"] * 2
    clean(fake)


def test_every_experiment_has_a_headline_that_reads_its_observations(ctx, fake) -> None:
    from anekit.probe.experiments import EXPERIMENTS

    assert len({e.name for e in EXPERIMENTS}) == len(EXPERIMENTS) == 8
    for e in EXPERIMENTS:
        assert e.question.endswith("?") and e.records and e.settles and e.headline
        assert e.needs[0] == "ane"
