"""Bounded soak (docs/reliability.md "Soak"): router + prefill + decode worker with DSpark
(--spec-method dspark --spec-tokens 3), 64 concurrent clients for --duration-s seconds, mixed
prompt lengths (short ones prefill on the decode worker, long ones go through the prefill worker
and UCX), streaming and not, greedy and seeded, in a warm-up phase and --phases identical load
phases. Pass: no request fails, every greedy repeat of a prompt gives the same text, every cache
block and lease is free when idle after each phase, and no process's idle RSS (less the KV
pool's resident pages, which the prefix cache fills by design) climbs more than 5% (at least
8 MiB) above its high-water mark of the first two phases, nor its threads or open files.

    tests/integration/soak_test.py --bin-dir build/bin --model-dir models/tiny-dsv4-dspark \\
        --duration-s 1800 --phases 9     # the long run; CTest runs 160 s in 4 phases

Prints `soak-figures {json}` (requests, tokens, errors, RSS and fd readings)."""

import collections
import json
import random
import threading
import time
import unittest

from cluster import Cluster, health, http_json, metric
from reliability_support import (assert_nothing_held, completion, mapping_rss_kib, open_fds,
                                 parse_args, rss_kib, stubs, threads, token_counts)

ARGS = None
CONCURRENCY = 64
VOCAB = 4096
MAX_LEN = 1024
# (prompt length, max_tokens), drawn uniformly: a mix of short chat-like turns and long prompts.
SHAPES = [(6, 64), (24, 48), (48, 96), (160, 32), (400, 64), (700, 24)]
FIXED = 8  # prompts asked again and again, greedy: their text must never change


def prompt_ids(rng, length):
    return [0] + [rng.randrange(2, VOCAB - 1) for _ in range(length - 1)]


def retry_reasons(router):
    """How many retries and migrations the router logged, by the failure it logged, and how
    often a worker came back after missing heartbeats."""
    reasons = collections.Counter()
    with open(router.log_path) as log:
        for line in log:
            if "attempt failed" in line or "decode call failed" in line:
                reasons[line.split("error=", 1)[-1].strip()[:80]] += 1
            elif "worker healthy again" in line:  # it had missed 3 heartbeats
                reasons["missed heartbeats"] += 1
    return dict(reasons)


class SoakTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if stubs(ARGS.source_dir) is None:
            raise unittest.SkipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        # --max-queue sized for the 64 clients (plus a few whose slot is freed just after
        # their answer went out): no request gets 429.
        # Heartbeats every second, as deployed (the other tests' 200 ms, 600 ms to unhealthy,
        # is too tight for a saturated two-core machine).
        # A prefill attempt's 30 s default includes queueing on the one prefill worker: on a
        # saturated two-core machine some attempts time out and fall back to a prefill on the
        # decode worker, whose larger prefill buffers then raise its RSS high-water mark in a
        # late phase (a change of workload, not a leak). The retry path has its own tests.
        cls.router = c.start_router("router", ["--disagg-min-prompt-tokens", "32",
                                               "--max-queue", str(CONCURRENCY + 8),
                                               "--prefill-attempt-timeout-ms", "300000"],
                                    heartbeat_ms=1000)
        # A pool of 1 GiB each: 64 requests' worst case (about 12 MB each for 1024 tokens) and
        # room for the prefix cache, which keeps finished requests' pages until the pool needs
        # them (readings() leaves the pool's resident pages out).
        pool = ["--kv-cache-memory-bytes", "1G"]
        cls.prefill = c.start_worker("prefill", "prefill", [cls.router],
                                     ["--ucx-tls", "tcp"] + pool)
        cls.decode = c.start_worker("decode", "decode", [cls.router],
                                    ["--ucx-tls", "tcp", "--spec-method", "dspark",
                                     "--spec-tokens", "3", "--max-num-seqs", "64"] + pool)
        c.wait_ready((lambda: health(cls.router).get("prefill_workers") == 1 and
                      health(cls.router).get("decode_workers") == 1, "soak cluster"))
        rng = random.Random(7)
        cls.fixed = [(prompt_ids(rng, SHAPES[i % len(SHAPES)][0]), SHAPES[i % len(SHAPES)][1])
                     for i in range(FIXED)]

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def processes(self):
        return {"router": self.router, "prefill": self.prefill, "decode": self.decode}

    def readings(self):
        """RSS, less the KV pool's resident pages: the pool is one mapping of a fixed size whose
        pages become resident as they are first used, and the prefix cache keeps finished
        requests' pages until the pool needs them, so the pool fills up to its size by design.
        What else a process holds must stay flat."""
        out = {}
        for name, p in self.processes().items():
            pool = 0
            if name != "router":
                capacity = int(metric(p.metrics, "pdspark_cache_capacity_bytes"))
                pool = mapping_rss_kib(p.proc.pid, capacity)
            out[name] = {"rss_kib": rss_kib(p.proc.pid) - pool, "pool_rss_kib": pool,
                         "fds": open_fds(p.proc.pid), "threads": threads(p.proc.pid)}
        return out

    def run_load(self, seconds, seed, results):
        """64 clients until `seconds` pass (each finishes the request it is in); appends
        (kind, ok, detail) per request."""
        stop_at = time.time() + seconds
        lock = threading.Lock()

        def client(k):
            rng = random.Random(seed * 1000 + k)
            while time.time() < stop_at:
                if rng.random() < 0.25:
                    i = rng.randrange(FIXED)
                    ids, max_tokens = self.fixed[i]
                    kind, extra = ("fixed", i), {"temperature": 0}
                else:
                    length, max_tokens = SHAPES[rng.randrange(len(SHAPES))]
                    ids = prompt_ids(rng, length)
                    kind = ("random", None)
                    extra = ({"temperature": 0} if rng.random() < 0.5 else
                             {"temperature": 0.8, "top_p": 0.95, "seed": rng.randrange(1 << 30)})
                body = dict({"model": "m", "prompt": ids, "max_tokens": max_tokens,
                             "ignore_eos": True}, **extra)
                if rng.random() < 0.5:
                    s = completion(self.router.http, body)
                    ok = s.error is None and s.exception is None and s.finish == "length"
                    out = (s.text, s.usage, s.error or repr(s.exception))
                else:
                    status, r = http_json(self.router.http, "/v1/completions", body, timeout=600)
                    ok = status == 200 and r["choices"][0]["finish_reason"] == "length"
                    out = (r["choices"][0]["text"] if ok else None,
                           token_counts(r["usage"]) if ok else None,
                           None if ok else r)
                with lock:
                    results.append((kind, ok, out))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def burst(self, results):
        length, max_tokens = max(SHAPES, key=lambda shape: shape[0] + shape[1])
        rng = random.Random(3)
        bodies = [{"model": "m", "prompt": prompt_ids(rng, length), "max_tokens": max_tokens,
                   "ignore_eos": True, "temperature": 0} for _ in range(CONCURRENCY)]
        out = [None] * CONCURRENCY

        def one(k):
            out[k] = completion(self.router.http, bodies[k])

        threads = [threading.Thread(target=one, args=(k,)) for k in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results += [(("burst", None), s.error is None and s.exception is None,
                     (s.text, s.usage, s.error or repr(s.exception))) for s in out]

    def check(self, results, reference):
        errors = [out[2] for _, ok, out in results if not ok]
        self.assertEqual(errors[:5], [], "%d of %d requests failed" % (len(errors), len(results)))
        for (kind, i), ok, out in results:
            if kind == "fixed":
                self.assertEqual(out[:2], reference.setdefault(i, out[:2]), "fixed prompt %d" % i)

    def test_soak(self):
        # A warm-up phase, then identical phases (same request mix, same seeds): every cache,
        # pool and high-water mark is reached in the first ones, so growth across the later
        # ones is memory that requests leave behind.
        phase_s = ARGS.duration_s / (ARGS.phases + 1)
        reference, results, readings = {}, [], []
        started = time.time()
        # First a burst of the longest requests at full concurrency: the decode cache, the
        # prefill worker's staged states and the router's threads reach their high-water mark.
        self.burst(results)
        for phase in range(ARGS.phases + 1):
            done = []
            self.run_load(phase_s, 1, done)
            self.check(done, reference)
            results += done
            assert_nothing_held(self, ARGS.source_dir, [self.prefill, self.decode])
            readings.append(self.readings())
            print("soak phase %d: %d requests, %s" % (phase, len(done), json.dumps(readings[-1])),
                  flush=True)
        elapsed = time.time() - started
        tokens = sum(out[1]["completion_tokens"] for _, ok, out in results if ok and out[1])
        figures = {"duration_s": round(elapsed, 1), "requests": len(results),
                   "errors": sum(1 for _, ok, _ in results if not ok),
                   "tokens_per_s": round(tokens / elapsed, 1),
                   "router_migrations": metric(self.router.http, "pdspark_router_migrations_total"),
                   "router_retries": metric(self.router.http, "pdspark_router_retries_total"),
                   "drafts": metric(self.decode.metrics, "pdspark_spec_decode_drafts_total"),
                   "retry_reasons": retry_reasons(self.router), "readings": readings}
        print("soak-figures %s" % json.dumps(figures))
        self.assertGreater(figures["drafts"], 0, "DSpark did not run")
        # The high-water mark of the first two phases is the base: idle RSS moves up and down
        # with what the allocator keeps from each phase's peak (the prefill worker's staged
        # states, the decode batch), but a later phase may not climb more than 5% above it, or
        # 8 MiB where that is more (without the pool a worker holds about 60 MB, and its
        # allocator's arenas swing by a few MB from phase to phase); threads and open files may
        # not grow at all beyond a few pooled connections.
        for name in readings[0]:
            high = max(r[name]["rss_kib"] for r in readings[:2])
            for phase, r in enumerate(readings[2:], start=2):
                a = r[name]
                self.assertLessEqual(a["rss_kib"], max(1.05 * high, high + 8 * 1024),
                                     "%s RSS %d KiB after phase %d, high-water %d KiB" %
                                     (name, a["rss_kib"], phase, high))
                self.assertLessEqual(a["fds"], readings[1][name]["fds"] + 4, name)
                self.assertEqual(a["threads"], readings[1][name]["threads"], name)


def main():
    global ARGS

    def soak_arguments(parser):
        parser.add_argument("--duration-s", type=float, default=160)
        parser.add_argument("--phases", type=int, default=3,
                            help="identical load phases after the warm-up")

    ARGS, argv = parse_args(soak_arguments)
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
