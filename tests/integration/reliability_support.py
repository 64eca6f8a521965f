"""Helpers for the reliability integration tests (docs/reliability.md): streaming clients that
record what they saw, worker Stats over gRPC, the "nothing is held" check, and process
resource readings from /proc. Standard library plus Debian's python3-grpcio."""

import argparse
import http.client
import json
import os
import re
import sys
import urllib.request

from cluster import grpc_modules, wait_for

_STUBS = {}


def stubs(source_dir):
    """(grpc, worker_pb2, worker_pb2_grpc, common_pb2, inference_pb2, inference_pb2_grpc) or
    None without python3-grpcio / protoc."""
    if "mods" not in _STUBS:
        mods = grpc_modules(source_dir)
        if mods is None:
            _STUBS["mods"] = None
        else:
            from pdspark.v1 import worker_pb2, worker_pb2_grpc
            grpc, common_pb2, inference_pb2, inference_pb2_grpc = mods[:4]
            _STUBS["mods"] = (grpc, worker_pb2, worker_pb2_grpc, common_pb2, inference_pb2,
                              inference_pb2_grpc)
    return _STUBS["mods"]


def token_counts(usage):
    """An OpenAI usage object without prompt_tokens_details: what equal requests share."""
    return {k: v for k, v in usage.items() if k != "prompt_tokens_details"}


class Stream:
    """One streaming /v1/completions call, read event by event. `text`, `finish`, `usage`
    (token counts, without the prompt tokens a worker reused from its prefix cache, which depend
    on what ran before: those are in `cached_tokens`), `error` (the OpenAI error object of a
    mid-stream error) and `status` (HTTP) are filled in as it goes; `exception` is set when the
    connection broke (router killed)."""

    def __init__(self, router_port, body, host="127.0.0.1", timeout=300):
        self.text, self.finish, self.usage, self.error = "", None, None, None
        self.cached_tokens = None
        self.status, self.exception, self.done, self.events = None, None, False, 0
        body = dict(body, stream=True, stream_options={"include_usage": True})
        self.conn = http.client.HTTPConnection(host, router_port, timeout=timeout)
        self.conn.request("POST", "/v1/completions", json.dumps(body),
                          {"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        if self.status != 200:
            self.error = json.loads(self.response.read() or b"{}").get("error")
            self.done = True

    def read_event(self):
        """Reads one SSE event; False at the end of the stream (or on a broken connection)."""
        if self.done:
            return False
        try:
            line = self.response.readline()
            while line in (b"\n", b"\r\n"):
                line = self.response.readline()
        except (OSError, http.client.HTTPException) as e:
            self.exception, self.done = e, True
            return False
        if not line:
            self.exception = self.exception or ConnectionError("stream ended without [DONE]")
            self.done = True
            return False
        data = line.decode().strip()[len("data: "):]
        if data == "[DONE]":
            self.done = True
            return False
        event = json.loads(data)
        self.events += 1
        if "error" in event:
            self.error = event["error"]
        elif event.get("usage"):
            self.usage = token_counts(event["usage"])
            self.cached_tokens = event["usage"].get("prompt_tokens_details", {}).get(
                "cached_tokens")
        for choice in event.get("choices", []):
            self.text += choice.get("text", "")
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return True

    def read_all(self):
        while self.read_event():
            pass
        self.close()
        return self

    def close(self):
        self.conn.close()


def completion(router_port, body, timeout=300):
    """Streams a request to its end; the Stream."""
    return Stream(router_port, body, timeout=timeout).read_all()


def _host(worker):
    return getattr(worker, "host", "127.0.0.1")


def worker_metric(worker, name, labels=""):
    """Sum of the samples of `name` (with `labels`) on a worker's /metrics."""
    total = 0.0
    url = "http://%s:%d/metrics" % (_host(worker), worker.metrics)
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name) and line[len(name)] in " {" and labels in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def worker_stats(source_dir, worker, timeout=5):
    grpc, worker_pb2, worker_pb2_grpc = stubs(source_dir)[:3]
    with grpc.insecure_channel("%s:%d" % (_host(worker), worker.grpc)) as channel:
        stub = (worker_pb2_grpc.DecodeWorkerStub if worker.role == "decode"
                else worker_pb2_grpc.PrefillWorkerStub)(channel)
        return stub.Stats(worker_pb2.StatsRequest(), timeout=timeout)


def held(source_dir, worker):
    """What a worker still holds, as a dict of non-zero readings (empty when idle): its Stats
    (running, waiting, cache blocks and bytes, reservations) and, for a decode worker, the
    /metrics gauges of the same."""
    s = worker_stats(source_dir, worker)
    readings = {"running": s.running_requests, "waiting": s.waiting_requests,
                "cache_blocks": s.used_cache_blocks, "cache_bytes": s.used_cache_bytes,
                "reservations": s.active_reservations}
    if worker.role == "decode":
        readings["metric_cache_bytes"] = worker_metric(worker, "pdspark_cache_used_bytes")
        readings["metric_running"] = worker_metric(worker, "pdspark_decode_running_requests")
        readings["metric_reservations"] = worker_metric(worker, "pdspark_kv_active_reservations")
    return {k: v for k, v in readings.items() if v}


def assert_nothing_held(test, source_dir, workers, timeout=30):
    """Waits until every worker holds nothing (the engine gauges refresh every 0.5 s and
    leases expire on their own clock), then asserts it."""
    last = {}

    def idle():
        last.clear()
        for w in workers:
            h = held(source_dir, w)
            if h:
                last[w.name] = h
        return not last

    try:
        wait_for(idle, timeout=timeout, what="workers to free everything")
    except AssertionError:
        pass
    test.assertEqual(last, {}, "memory still held after the requests ended\n" +
                     "\n".join(_what_holds(w) for w in workers if w.name in last))


def _what_holds(worker, log_lines=15):
    """For a failure's message: a worker's KV, prefix-cache and pool gauges and counters, and
    the end of its log (where a quarantine, a fence or a lease's expiry shows)."""
    url = "http://%s:%d/metrics" % (_host(worker), worker.metrics)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            lines = r.read().decode().splitlines()
        # The non-zero samples, less the labels every sample of the worker carries.
        gauges = [re.sub(r'model="[^"]*",role="[^"]*",worker="[^"]*",?', "", line).replace("{}", "")
                  for line in lines
                  if line.startswith(("pdspark_kv_", "pdspark_prefix_cache_", "pdspark_cache_"))
                  and "_bucket" not in line and not line.endswith(" 0")]
    except OSError as e:
        gauges = ["/metrics unreadable: %s" % e]
    return "== %s\n%s\n-- log tail:\n%s" % (worker.name, "\n".join(gauges),
                                              worker.tail(log_lines))


def _status_field(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    return _status_field(pid, "VmRSS")


def threads(pid):
    return _status_field(pid, "Threads")


def mapping_rss_kib(pid, size_bytes):
    """Resident KiB of the process's one mapping of `size_bytes` (rounded up to whole pages,
    plus at most two pages of allocator header): the KV pool, which the allocator maps on its
    own. 0 when there is no such mapping."""
    low, high = size_bytes, size_bytes + 3 * 4096
    size = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                start, end = (int(x, 16) for x in fields[0].split("-"))
                size = end - start if low <= end - start <= high else None
            elif size is not None and fields[0] == "Rss:":
                return int(fields[1])
    return 0


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))




def parse_args(add_arguments=None):
    """The reliability tests' command line: --bin-dir, --model-dir, --source-dir, plus what
    `add_arguments(parser)` adds. Returns (arguments, argv for unittest.main)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--source-dir",
                        default=os.path.join(os.path.dirname(__file__), "..", ".."))
    if add_arguments:
        add_arguments(parser)
    args, rest = parser.parse_known_args()
    return args, [sys.argv[0]] + rest
