"""Router at scale: thousands of open streams on one router, and overload past --max-queue.

One cluster on loopback: two routers (A for the open streams, B for overload) and --decode-workers
colocated decode workers registered with both (model: a copy of --model-dir with a long
max_position_embeddings, weights symlinked; DSpark off, one running request per worker, KV pool
for one request of that length).

(a) Idle streams, router A (--max-queue --streams + 64). Each decode worker first gets one
    "blocker" request straight over DecodeWorker/Generate (not through a router) that decodes for
    minutes and takes the worker's only batch slot. Then --streams (2000) streaming
    /v1/completions requests go to router A at once (short prompts, max_tokens long, ignore_eos):
    every one of them waits in a worker's queue, so the router holds that many open streams
    that carry nothing but the workers' queue keepalives. Once router A's
    pdspark_requests_in_flight reaches --streams, or every stream has its HTTP 200 head (at most
    --open-timeout-s), router A's RSS, threads and open files are read from /proc. Pass: RSS
    below --max-router-rss-mb, threads at most --max-router-threads (a bound that does not grow
    with the streams), each decode worker's threads at most --max-worker-threads, every stream
    answered 200. Then the clients hang up; router A's in-flight
    gauge must return to 0 and the workers must free everything (assert_nothing_held).
(b) Overload, router B (--max-queue --overload-queue, 256): a warm-up round and --rounds rounds
    of --overload-requests (600) concurrent non-streaming requests (max_tokens 16, the same
    prompts every round). Every answer is 200 or 429, every 429 carries Retry-After, each round
    gets some of each. After each round, idle: RSS, threads and open files. Pass: RSS after the
    last round within 5% of the reading after warm-up, threads within 4 of it.

    tests/integration/router_scale_test.py --bin-dir build/bin \\
        --model-dir models/tiny-dsv4-dspark --source-dir .

Prints `router-scale-figures {json}` with every reading (also when an assertion fails). Clients
are plain asyncio sockets (standard library); python3-grpcio for the blockers and worker Stats
(exit 77 = skipped without it). RLIMIT_NOFILE's soft limit is raised to the hard one, for this
process and the processes it starts."""

import asyncio
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
import unittest

from cluster import Cluster, health, long_context_model, metric, request_worst_case, wait_for
from reliability_support import (assert_nothing_held, held, open_fds, parse_args, rss_kib, stubs,
                                 threads)

ARGS = None
SKIP = 77
VOCAB = 4096
PROMPT = 6
STREAM_MAX_TOKENS = 1000
OVERLOAD_MAX_TOKENS = 16
IN_FLIGHT = "pdspark_requests_in_flight"
FIGURES = {}


def reading(process):
    """RSS, threads and open files of a started Process; its exit code instead once it died."""
    if process.proc.poll() is not None:
        return {"exited": process.proc.returncode}
    pid = process.proc.pid
    try:
        return {"rss_kib": rss_kib(pid), "threads": threads(pid), "fds": open_fds(pid)}
    except OSError:  # it died between the two looks
        return {"exited": process.proc.wait()}


def died(process):
    """A line saying how the process ended (and its log's last lines), or None while it runs."""
    if process.proc.poll() is None:
        return None
    return "%s exited with %s; log ends:\n%s" % (process.name, process.proc.returncode,
                                                  process.tail(5))


def log(message):
    sys.stderr.write("router-scale: %s\n" % message)
    sys.stderr.flush()


# ---- asyncio HTTP/1.1 clients (standard library) ----

async def read_head(reader):
    """(status, {lower-case header: value}) of a response."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed before the response head")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return status, headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


def request_bytes(method, path, body=None, close=True):
    data = b"" if body is None else json.dumps(body).encode()
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           "Content-Length: %d\r\n%s\r\n" % (method, path, len(data),
                                             "Connection: close\r\n" if close else "")
    return head.encode() + data


async def fetch(port, method, path, body=None, timeout=10.0):
    """(status, headers, body bytes) of one request on its own connection."""
    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request_bytes(method, path, body))
            await writer.drain()
            status, headers = await read_head(reader)
            return status, headers, await reader.read()  # Connection: close: up to EOF
        finally:
            writer.close()
    return await asyncio.wait_for(go(), timeout)


async def async_metric(port, name, timeout=3.0):
    """The gauge's value on /metrics, or None when the router does not answer in time (a router
    whose HTTP threads are all held by streams queues the scrape behind them)."""
    try:
        status, _, body = await fetch(port, "GET", "/metrics", timeout=timeout)
    except (OSError, asyncio.TimeoutError, ValueError, IndexError):
        return None
    if status != 200:
        return None
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


class OpenStream:
    """One streaming /v1/completions held open: `status` once the head arrived, `received` bytes
    of events, `done` when the server ended it ([DONE] or EOF), `error` when it could not be
    opened."""

    def __init__(self, body):
        self.body = body
        self.status = self.error = None
        self.received, self.done, self.finished_normally = 0, False, False
        self.writer = None

    async def run(self, port, connect_gate):
        try:
            async with connect_gate:
                reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
                self.writer.write(request_bytes("POST", "/v1/completions", self.body, close=False))
                await self.writer.drain()
            self.status, _ = await read_head(reader)
            tail = b""
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                self.received += len(chunk)
                tail = (tail + chunk)[-64:]
                if b"data: [DONE]" in tail:
                    self.finished_normally = True
            self.done = True
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 (recorded and asserted on)
            self.error = repr(e)
            self.done = True

    def close(self):
        if self.writer is not None:
            self.writer.close()


class RouterScaleTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if stubs(ARGS.source_dir) is None:
            raise unittest.SkipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        cls.tmp = tempfile.mkdtemp(prefix="pdspark-router-scale-")
        try:
            cls.start_cluster()
        except BaseException:
            if getattr(cls, "cluster", None) is not None:
                cls.cluster.stop_all()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        FIGURES.update({"streams": ARGS.streams, "decode_workers": ARGS.decode_workers,
                        "overload_queue": ARGS.overload_queue,
                        "overload_requests": ARGS.overload_requests, "phases": {}})
        cls.record("idle")

    @classmethod
    def start_cluster(cls):
        model = long_context_model(ARGS.model_dir, cls.tmp, ARGS.positions)
        worker_flags = ["--spec-method", "none", "--kv-staging-mb", "0", "--threads", "1",
                        "--max-num-seqs", "1"]
        one = request_worst_case(ARGS.bin_dir, model, ARGS.positions, ["--spec-method", "none"])
        c = cls.cluster = Cluster(ARGS.bin_dir, model)
        # Heartbeats every second (3 s to unhealthy): a two-core machine under 2000 streams
        # answers late. The decode stall watchdog (60 s) stays on: a queued request gets its
        # worker's keepalive every half second while the blocker keeps the engine stepping.
        cls.router_a = c.start_router("router-streams",
                                      ["--max-queue", str(ARGS.streams + 64),
                                       "--log-level", ARGS.router_log_level],
                                      heartbeat_ms=1000)
        cls.router_b = c.start_router("router-overload",
                                      ["--max-queue", str(ARGS.overload_queue)],
                                      heartbeat_ms=1000)
        # The KV pool holds the one running request (a blocker of `positions` tokens) plus a
        # page or two of slack; the queued ones hold nothing.
        cls.workers = [c.start_worker("decode-%d" % i, "decode", [cls.router_a, cls.router_b],
                                      worker_flags + ["--kv-cache-memory-bytes",
                                                      str(one + (4 << 20))])
                       for i in range(ARGS.decode_workers)]
        n = ARGS.decode_workers
        c.wait_ready((lambda: health(cls.router_a).get("decode_workers") == n and
                      health(cls.router_b).get("decode_workers") == n, "routers see the workers"))

    @classmethod
    def tearDownClass(cls):
        print("router-scale-figures %s" % json.dumps(FIGURES, sort_keys=True), flush=True)
        cls.cluster.stop_all()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def record(cls, phase, **extra):
        r = {"router_a": reading(cls.router_a), "router_b": reading(cls.router_b)}
        for w in cls.workers:
            r[w.name] = reading(w)
        r.update(extra)
        FIGURES["phases"][phase] = r
        log("%s %s" % (phase, json.dumps(r, sort_keys=True)))
        return r

    # ---- (a) ----

    def start_blockers(self):
        """One long greedy request per worker over DecodeWorker/Generate, read (and dropped) on
        a thread each; [(call, thread, channel)]."""
        grpc, worker_pb2, worker_pb2_grpc, common_pb2 = stubs(ARGS.source_dir)[:4]
        out = []
        for i, w in enumerate(self.workers):
            channel = grpc.insecure_channel("127.0.0.1:%d" % w.grpc)
            stub = worker_pb2_grpc.DecodeWorkerStub(channel)
            call = stub.Generate(worker_pb2.WorkerGenerateRequest(
                context=common_pb2.RequestContext(request_id="blocker-%d" % i),
                prompt_token_ids=[0, 11, 12, 13],
                sampling=common_pb2.SamplingParams(temperature=0, max_tokens=ARGS.positions - 8,
                                                   ignore_eos=True)))

            def drain(call=call):
                try:
                    for _ in call:
                        pass
                except grpc.RpcError:
                    pass  # cancelled at the end of the phase

            t = threading.Thread(target=drain, daemon=True)
            t.start()
            out.append((call, t, channel))
        wait_for(lambda: all(held(ARGS.source_dir, w).get("running") == 1 for w in self.workers),
                 timeout=60, what="a blocker running on every worker")
        return out

    async def open_streams(self, result):
        rng = random.Random(11)
        streams = [OpenStream({"model": "m", "stream": True, "ignore_eos": True,
                               "max_tokens": STREAM_MAX_TOKENS, "temperature": 0,
                               "prompt": [0] + [rng.randrange(2, VOCAB - 1)
                                                for _ in range(PROMPT - 1)]})
                   for _ in range(ARGS.streams)]
        gate = asyncio.Semaphore(256)  # connections being set up at once
        started = time.time()
        tasks = [asyncio.ensure_future(s.run(self.router_a.http, gate)) for s in streams]
        deadline = started + ARGS.open_timeout_s
        gauge, last_log = None, 0.0
        while True:
            headed = sum(1 for s in streams if s.status is not None)
            broken = sum(1 for s in streams if s.error is not None)
            gauge = await async_metric(self.router_a.http, IN_FLIGHT)
            if time.time() - last_log > 5:
                log("open: %d heads, %d broken, in flight %s, %.0f s" %
                    (headed, broken, gauge, time.time() - started))
                last_log = time.time()
            if (gauge is not None and gauge >= ARGS.streams) or headed == ARGS.streams:
                break
            if time.time() > deadline or headed + broken == ARGS.streams:
                break
            await asyncio.sleep(1.0)
        result["open_s"] = round(time.time() - started, 1)
        result["heads"] = sum(1 for s in streams if s.status is not None)
        result["statuses"] = {}
        for s in streams:
            if s.status is not None:
                key = str(s.status)
                result["statuses"][key] = result["statuses"].get(key, 0) + 1
        result["in_flight_gauge"] = gauge
        await asyncio.sleep(1.0)  # let the router settle on what it holds
        queued = {w.name: held(ARGS.source_dir, w) for w in self.workers}
        result["at_open"] = self.record("a_open", workers_held=queued,
                                        in_flight_gauge=gauge, heads=result["heads"])
        result["broken"] = sum(1 for s in streams if s.error)
        result["errors"] = [s.error for s in streams if s.error][:5]
        result["ended_early"] = sum(1 for s in streams if s.done)
        # Hang up on every stream (FIN, as a client that goes away).
        closed_at = time.time()
        for s in streams:
            s.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        result["drained_gauge"] = None
        while time.time() - closed_at < ARGS.drain_timeout_s:
            result["drained_gauge"] = await async_metric(self.router_a.http, IN_FLIGHT)
            if result["drained_gauge"] == 0 or self.router_a.proc.poll() is not None:
                break
            await asyncio.sleep(0.5)
        result["drain_s"] = round(time.time() - closed_at, 1)

    def test_a_idle_streams(self):
        blockers = self.start_blockers()
        result = {}
        try:
            asyncio.run(self.open_streams(result))
        finally:
            for call, _, _ in blockers:
                call.cancel()
            for _, t, channel in blockers:
                t.join(30)
                channel.close()
        readings = result.pop("at_open")
        at_open = readings["router_a"]
        FIGURES["streams_phase"] = result
        log("streams phase %s" % json.dumps(result, sort_keys=True))
        # The workers free the streams' queue entries and the blockers.
        assert_nothing_held(self, ARGS.source_dir, self.workers, timeout=60)
        self.record("a_closed")
        failures = [line for line in [died(self.router_a)] if line]
        if result["errors"]:
            failures.append("%d streams broke: %s" % (result["broken"], result["errors"]))
        if result["heads"] != ARGS.streams and result["in_flight_gauge"] != ARGS.streams:
            failures.append("only %d of %d streams answered (router in-flight gauge %s) within "
                            "%d s" % (result["heads"], ARGS.streams, result["in_flight_gauge"],
                                      ARGS.open_timeout_s))
        if set(result["statuses"]) - {"200"}:
            failures.append("statuses other than 200: %s" % result["statuses"])
        if "exited" in at_open:
            failures.append("router A had exited when the streams were open")
        elif at_open["rss_kib"] >= ARGS.max_router_rss_mb * 1024:
            failures.append("router RSS %d KiB with %d streams open (limit %d MB)" %
                            (at_open["rss_kib"], ARGS.streams, ARGS.max_router_rss_mb))
        if at_open.get("threads", 0) > ARGS.max_router_threads:
            failures.append("router has %d threads with %d streams open (limit %d)" %
                            (at_open["threads"], ARGS.streams, ARGS.max_router_threads))
        # The decode workers hold their share of the streams (queued behind the blockers) with
        # a bounded thread count too: Generate streams run on gRPC's callback API.
        for w in self.workers:
            threads = readings[w.name].get("threads", 0)
            if threads > ARGS.max_worker_threads:
                failures.append("%s has %d threads with %d streams open over %d workers "
                                "(limit %d)" % (w.name, threads, ARGS.streams,
                                                len(self.workers), ARGS.max_worker_threads))
        if result["drained_gauge"] != 0:
            failures.append("router in-flight gauge %s %.0f s after the clients hung up" %
                            (result["drained_gauge"], ARGS.drain_timeout_s))
        self.assertEqual(failures, [])

    # ---- (b) ----

    async def overload_round(self):
        # The same prompts every round (as the soak's identical phases): what the workers'
        # prefix caches hold, and so what they publish to the router, is the same after each.
        rng = random.Random(5)
        bodies = [{"model": "m", "max_tokens": OVERLOAD_MAX_TOKENS, "ignore_eos": True,
                   "temperature": 0,
                   "prompt": [0] + [rng.randrange(2, VOCAB - 1) for _ in range(PROMPT - 1)]}
                  for _ in range(ARGS.overload_requests)]

        async def one(body):
            try:
                return await fetch(self.router_b.http, "POST", "/v1/completions", body,
                                   timeout=300)
            except Exception as e:  # noqa: BLE001 (counted as an error)
                return None, {}, repr(e).encode()

        started = time.time()
        answers = await asyncio.gather(*(one(b) for b in bodies))
        counts = {}
        problems = []
        for status, headers, body in answers:
            counts[str(status)] = counts.get(str(status), 0) + 1
            if status == 429 and not headers.get("retry-after"):
                problems.append("429 without Retry-After")
            elif status == 200:
                choice = json.loads(body)["choices"][0]
                if choice["finish_reason"] != "length":
                    problems.append("finish_reason %s" % choice["finish_reason"])
            elif status != 429:
                problems.append("HTTP %s: %s" % (status, body[:200]))
        return {"counts": counts, "seconds": round(time.time() - started, 1),
                "problems": problems[:5]}

    def wait_idle_b(self):
        self.assertIsNone(died(self.router_b))
        wait_for(lambda: metric(self.router_b.http, IN_FLIGHT) == 0, timeout=60,
                 what="router B idle")
        assert_nothing_held(self, ARGS.source_dir, self.workers, timeout=60)
        time.sleep(1.0)

    def test_b_overload(self):
        rounds = []
        for r in range(ARGS.rounds + 1):
            name = "b_warmup" if r == 0 else "b_round%d" % r
            result = asyncio.run(self.overload_round())
            self.wait_idle_b()
            result["reading"] = self.record(name, counts=result["counts"])["router_b"]
            rounds.append(result)
            log("%s %s" % (name, json.dumps(result, sort_keys=True)))
        FIGURES["overload_rounds"] = [{k: v for k, v in r.items() if k != "reading"}
                                      for r in rounds]
        self.assertIsNone(died(self.router_b))
        for r in rounds:
            self.assertEqual(r["problems"], [])
            self.assertGreater(r["counts"].get("200", 0), 0, r["counts"])
            self.assertGreater(r["counts"].get("429", 0), 0, r["counts"])
        base, last = rounds[0]["reading"], rounds[-1]["reading"]
        self.assertLessEqual(last["rss_kib"], 1.05 * base["rss_kib"],
                             "router RSS %d KiB after round %d, %d KiB after warm-up" %
                             (last["rss_kib"], ARGS.rounds, base["rss_kib"]))
        self.assertLessEqual(last["threads"], base["threads"] + 4,
                             "router threads %d after round %d, %d after warm-up" %
                             (last["threads"], ARGS.rounds, base["threads"]))


def main():
    global ARGS

    def scale_arguments(parser):
        parser.add_argument("--streams", type=int, default=2000)
        parser.add_argument("--decode-workers", type=int, default=3,
                            help="each queues at most 1024 requests (ServingOptions::max_waiting)")
        parser.add_argument("--positions", type=int, default=262144,
                            help="max_position_embeddings of the model copy: how long the "
                                 "blockers decode (about 1,500 tokens/s each)")
        parser.add_argument("--open-timeout-s", type=float, default=60)
        parser.add_argument("--drain-timeout-s", type=float, default=60)
        parser.add_argument("--max-router-rss-mb", type=int, default=300)
        parser.add_argument("--max-router-threads", type=int, default=64)
        parser.add_argument("--max-worker-threads", type=int, default=64,
                            help="per decode worker while the streams are open")
        parser.add_argument("--overload-queue", type=int, default=256)
        parser.add_argument("--overload-requests", type=int, default=600)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--router-log-level", default="info",
                            help="router A's (PDSPARK_KEEP_LOGS=1 keeps the logs)")

    ARGS, argv = parse_args(scale_arguments)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = ARGS.streams + ARGS.overload_requests + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        log("RLIMIT_NOFILE hard limit %d is below the %d this test needs" % (hard, need))
        return SKIP
    if stubs(ARGS.source_dir) is None:
        log("skipped: python3-grpcio / protoc / grpc_python_plugin not installed")
        return SKIP
    result = unittest.main(argv=argv, verbosity=2, exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
