"""The KV pool under 4x oversubscription, through the real processes: a router, a prefill
worker and a decode worker (DSpark on) on loopback, the decode worker's pool sized
(--kv-cache-memory-bytes) to hold the worst case of 16 requests, and rounds of 64 concurrent
requests of 1k-token prompts. Every request must complete (the rest wait in the queue, or are
prefilled on the decode worker when no lease is left for a transfer); the pool's high-water mark
must stay within its size, and the decode worker's resident memory flat from round to round.

One request's worst case is what the decode worker reports when its pool cannot hold one
--max-model-len request, so the bench asks a worker started with a tiny pool, then sizes the
real one at 16 times that (prompt + max_tokens = --max-model-len). The bundled tiny model caps
positions at 1024, so the bench runs kv_handoff_bench's copy of it with more positions.

  /usr/bin/python3 bench/kv_pool_load.py --bin-dir build/bin --work-dir build/bench
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from cluster import (Cluster, health, http_json, long_context_model, metric,  # noqa: E402
                     request_worst_case)
from kv_handoff_bench import TINY_MODEL  # noqa: E402

SPEC = ["--spec-method", "dspark", "--spec-tokens", "5"]


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_round(router, requests, prompt_tokens, max_tokens, salt):
    results = [None] * requests

    def one(i):
        prompt = [(j * 131 + i * 7 + salt * 101) % 4000 + 10 for j in range(prompt_tokens)]
        status, body = http_json(router.http, "/v1/completions",
                                 {"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                                  "temperature": 0, "ignore_eos": True}, timeout=3600)
        results[i] = status == 200 and body["usage"]["completion_tokens"] == max_tokens
        if not results[i]:
            sys.stderr.write("request %d: HTTP %d %s\n" % (i, status, str(body)[:300]))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(1 for r in results if r), time.time() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--work-dir", required=True, help="where the long-context model copy goes")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--fits", type=int, default=16, help="requests the pool holds")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    max_model_len = args.prompt_tokens + args.max_tokens
    model = long_context_model(TINY_MODEL, args.work_dir, 4096)
    one = request_worst_case(args.bin_dir, model, max_model_len, SPEC)
    budget = args.fits * one
    sys.stderr.write("one request leases %d bytes; pool of %d bytes\n" % (one, budget))
    c = Cluster(args.bin_dir, model)
    try:
        router = c.start_router("router", ["--disagg-min-prompt-tokens", "1",
                                           "--request-timeout-s", "3600"])
        c.start_worker("prefill", "prefill", [router], ["--max-model-len", str(max_model_len)])
        decode = c.start_worker("decode", "decode", [router],
                                SPEC + ["--max-model-len", str(max_model_len),
                                        "--max-num-seqs", str(args.requests),
                                        "--kv-cache-memory-bytes", str(budget)])
        c.wait_ready((lambda: health(router).get("prefill_workers") == 1 and
                      health(router).get("decode_workers") == 1, "cluster"))
        print("| round | completed | seconds | decode RSS MiB | pool high-water MiB | "
              "pool MiB | transfers | decode-side prefills |")
        print("|---|---|---|---|---|---|---|---|")
        for r in range(args.rounds):
            handoffs = metric(decode.metrics, "pdspark_kv_handoff_seconds_count")
            completed, seconds = run_round(router, args.requests, args.prompt_tokens,
                                           args.max_tokens, r)
            time.sleep(1)  # one metrics sample after the round
            high = metric(decode.metrics, "pdspark_cache_high_water_bytes")
            capacity = metric(decode.metrics, "pdspark_cache_capacity_bytes")
            transfers = metric(decode.metrics, "pdspark_kv_handoff_seconds_count") - handoffs
            print("| %d | %d/%d | %.1f | %.1f | %.1f | %.1f | %d | %d |" % (
                r + 1, completed, args.requests, seconds, rss_bytes(decode.proc.pid) / 2**20,
                high / 2**20, capacity / 2**20, transfers, args.requests - transfers))
            sys.stdout.flush()
    finally:
        c.stop_all()


if __name__ == "__main__":
    main()
