"""The unchanged `mx.profiler` of PyPI mxnet==1.9.1 on both libraries (run twice by
scripts/python-frontend.sh): the dumped file is a Chrome trace (`traceEvents`,
`displayTimeUnit`) whose B/E spans nest on every thread, the profiling objects write the same
events on both libraries, and bad input raises MXNetError. Event names of the store's own
work differ by design: MXNet's are its C API calls and operators, libkvstore's its store calls
and engine ops. No timings are asserted.

Every configuration passes continuous_dump=False: with MXNet's default (True) a timer thread
appends to the file every second, a second configuration fails ("auto_remove_ == false"), and
a dump can race with the timer's.
"""
import json
import os
import subprocess
import sys

import mxnet as mx
import pytest
from mxnet.base import MXNetError

IS_REFERENCE = not os.environ.get("MXNET_LIBRARY_PATH")
# In hosted mode the profiler is the host libmxnet.so's: MXNet's file format and events.
HOSTED = not IS_REFERENCE and bool(os.environ.get("KVSTORE_HOST_LIBRARY"))
MXNETS_PROFILER = IS_REFERENCE or HOSTED
SHAPE = (4, 4)
CPUS = [mx.cpu(i) for i in range(4)]


def load_trace(path, mxnet_repeat_dump=False):
    """`mxnet_repeat_dump`: MXNet 1.9 writes every dump after a process's first with a comma
    right after `"traceEvents": [` (invalid JSON); on the reference run it is taken out
    before parsing (and in hosted mode, where the profiler is MXNet's). libkvstore's files
    must parse as written."""
    with open(path) as f:
        text = f.read()
    if mxnet_repeat_dump and MXNETS_PROFILER:
        assert text.startswith('{\n    "traceEvents": [\n,'), text[:80]
        text = text.replace("[\n,", "[\n", 1)
    trace = json.loads(text)
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    for e in events:
        assert isinstance(e["name"], str) and isinstance(e["ph"], str) and "pid" in e, e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and "tid" in e, e
    return events


def check_nesting(events):
    """Per (pid, tid), in file order: every E closes the innermost open B of the same name.
    Returns, for each span, the names of the spans open around it."""
    stacks, parents = {}, []
    for e in events:
        track = (e["pid"], e.get("tid"))
        if e["ph"] == "B":
            stack = stacks.setdefault(track, [])
            parents.append((e["name"], [b["name"] for b in stack]))
            stack.append(e)
        elif e["ph"] == "E":
            stack = stacks.get(track)
            assert stack, "E without B: %s" % e
            b = stack.pop()
            assert b["name"] == e["name"], "E %s closes B %s" % (e["name"], b["name"])
            assert e["ts"] >= b["ts"], (b, e)
    assert all(not s for s in stacks.values()), "unclosed B: %s" % stacks
    return parents


def store_work(kv, key, scale=1.0):
    kv.push(key, [mx.nd.ones(SHAPE, ctx) * scale for ctx in CPUS])
    outs = [mx.nd.zeros(SHAPE, ctx) for ctx in CPUS]
    kv.pull(key, out=outs)
    mx.nd.waitall()
    return outs


def test_store_calls_become_a_nested_chrome_trace(tmp_path):
    path = str(tmp_path / "trace.json")
    mx.profiler.set_config(filename=path, profile_all=True, aggregate_stats=True, continuous_dump=False)
    mx.profiler.set_state("run")
    kv = mx.kv.create("local")
    kv.init(3, mx.nd.zeros(SHAPE))
    kv.init(4, mx.nd.zeros(SHAPE))
    outs = store_work(kv, 3)
    assert outs[0].asnumpy()[0, 0] == 4
    kv._set_updater(lambda key, recv, local: local.__setitem__(slice(None), local + recv * 2))
    store_work(kv, 4)
    mx.profiler.pause()
    store_work(kv, 4, scale=3.0)  # while paused: not recorded
    mx.profiler.resume()
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    events = load_trace(path)
    parents = check_nesting(events)
    names = {e["name"] for e in events if e["ph"] in "BEXb"}
    table = mx.profiler.dumps(reset=True)
    assert "Profile Statistics:" in table
    if HOSTED:
        # MXNet's profiler sees the store's work as the ops it runs in MXNet's engine, named
        # by the call that queued them: one (the sum) per push, the paused push not recorded.
        pushes = [e for e in events if e["name"] == "KVStorePush" and e["ph"] in "BX"]
        assert len(pushes) == 2, pushes
        return
    if IS_REFERENCE:
        assert {"MXKVStoreInit", "MXKVStorePush"} <= names, names
        assert "MXKVStorePush" in table
        return
    assert {"init", "push", "pull", "update", "sum", "copy"} <= names, names
    spans = [e for e in events if e["ph"] == "B"]
    pushes = [e for e in spans if e["name"] == "push"]
    assert len(pushes) == 2, "two pushes recorded, the paused one not: %s" % pushes
    assert all(e["cat"] == "kvstore" for e in pushes)
    assert pushes[0]["args"]["key"] == 3 and pushes[0]["args"]["arrays"] == 4
    assert pushes[0]["args"]["bytes"] == 4 * 16 * 4 and pushes[0]["args"]["context"] == "cpu(0)"
    assert all(e["cat"] == "engine" for e in spans if e["name"] in ("sum", "copy"))
    # The updater runs inside its push, on the caller's thread.
    assert [p for n, p in parents if n == "update"] == [["push"]], parents
    # Each category is a named process; threads are named.
    meta = {(e["name"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert ("process_name", "kvstore") in meta and ("process_name", "engine") in meta, meta
    assert any(n == "thread_name" for n, _ in meta)
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line[:1].isalpha()}
    assert rows["push"][1] == "2" and rows["pull"][1] == "2" and rows["update"][1] == "1", table


def test_profiling_objects_write_the_same_events_on_both(tmp_path):
    path = str(tmp_path / "objects.json")
    mx.profiler.set_config(filename=path, profile_all=True, continuous_dump=False)
    mx.profiler.set_state("run")
    domain = mx.profiler.Domain("mydomain")
    counter = mx.profiler.Counter(domain, "mycounter", 5)
    counter.increment(2)
    counter.decrement(1)
    mx.profiler.Marker(domain, "mymarker").mark("process")
    task = mx.profiler.Task(domain, "mytask")
    task.start()
    task.stop()
    event = mx.profiler.Event("myevent")
    event.start()
    event.stop()
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    events = load_trace(path, mxnet_repeat_dump=True)
    check_nesting(events)
    mine = [e for e in events if e["name"].startswith("my")]
    counters = [(e["cat"], e["args"]) for e in mine if e["ph"] == "C"]
    assert counters == [("mydomain", {"mycounter": v}) for v in (5, 7, 6)], counters
    assert [(e["ph"], e["cat"]) for e in mine if e["name"] == "mytask"] == [("b", "mydomain"), ("e", "mydomain")]
    assert [(e["ph"], e["cat"]) for e in mine if e["name"] == "myevent"] == [("B", "event"), ("E", "event")]
    marker = [e for e in mine if e["name"] == "mymarker"]
    assert len(marker) == 1 and marker[0]["cat"] == "mydomain,instant_marker" and marker[0]["s"] == "p"


def test_bad_profiler_input_raises():
    with pytest.raises(MXNetError, match="profile_everything"):
        mx.profiler.set_config(profile_everything=True)
    with pytest.raises(MXNetError):
        mx.profiler.set_config(profile_all="maybe")
    # A finished dump ends output: dumping again before the next run fails.
    with pytest.raises(MXNetError, match="(?i)not been run|hasn't been run"):
        mx.profiler.dump()


def test_dump_before_config_fails_in_a_fresh_process():
    code = "import mxnet as mx\ntry:\n    mx.profiler.dump()\nexcept mx.base.MXNetError as e:\n    print('MXNetError:', e)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "MXNetError:" in out.stdout and ("not been run" in out.stdout or "hasn't been run" in out.stdout), out.stdout
