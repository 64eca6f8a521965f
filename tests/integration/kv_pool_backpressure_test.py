"""A decode worker whose KV pool holds one request, under a burst of eight: the router, a
prefill worker and the decode worker on loopback, the router's stall watchdog at 1.5 s. The
first request leases the whole pool; the others' reservations are refused and (the router told
not to wait for a lease) they are prefilled on the decode worker, where they wait in the queue for
the pool. Every request must complete
(waiting is back-pressure, not a failure: the worker tells the router a queued request is alive),
with the tokens a request gets alone, and the pool's high-water mark within its size.

usage: kv_pool_backpressure_test.py --bin-dir B --model-dir M
"""

import argparse
import sys
import threading
import time
import unittest

from cluster import Cluster, health, http_json, metric, request_worst_case

ARGS = None
MAX_MODEL_LEN = 1024
PROMPT = 24
REQUESTS = 8
STALL_MS = 1500


def prompt(i):
    return [(j * 131 + i * 17) % 4000 + 10 for j in range(PROMPT)]


def complete(router, i, results, seconds):
    start = time.time()
    results[i] = http_json(router.http, "/v1/completions",
                           {"model": "m", "prompt": prompt(i), "max_tokens": MAX_MODEL_LEN - PROMPT,
                            "temperature": 0, "ignore_eos": True}, timeout=600)
    seconds[i] = time.time() - start


class KvPoolBackpressureTest(unittest.TestCase):
    def test_a_burst_on_a_pool_for_one_request_all_completes(self):
        one = request_worst_case(ARGS.bin_dir, ARGS.model_dir, MAX_MODEL_LEN)
        c = Cluster(ARGS.bin_dir, ARGS.model_dir)
        try:
            # --reserve-wait-ms 0: a refused reservation falls back to the decode worker at
            # once, so the queued requests wait there, where the watchdog watches them.
            router = c.start_router("router", ["--disagg-min-prompt-tokens", "1",
                                               "--decode-stall-timeout-ms", str(STALL_MS),
                                               "--reserve-wait-ms", "0"])
            c.start_worker("prefill", "prefill", [router])
            decode = c.start_worker("decode", "decode", [router],
                                    ["--max-model-len", str(MAX_MODEL_LEN),
                                     "--kv-cache-memory-bytes", str(one)])
            c.wait_ready((lambda: health(router).get("prefill_workers") == 1 and
                          health(router).get("decode_workers") == 1, "cluster"))
            # What one request gets with the cluster to itself.
            alone = {}
            complete(router, 0, alone, {})
            self.assertEqual(alone[0][0], 200, alone[0][1])

            results, seconds = [None] * REQUESTS, [0.0] * REQUESTS
            threads = [threading.Thread(target=complete, args=(router, i, results, seconds))
                       for i in range(REQUESTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i, (status, body) in enumerate(results):
                self.assertEqual(status, 200, "request %d: %s" % (i, body))
                self.assertEqual(body["usage"]["completion_tokens"], MAX_MODEL_LEN - PROMPT)
            self.assertEqual(results[0][1]["choices"][0]["text"],
                             alone[0][1]["choices"][0]["text"])
            # The scenario really happened: some request waited longer than the watchdog allows
            # a call without progress.
            self.assertGreater(max(seconds), 2 * STALL_MS / 1000.0, seconds)
            time.sleep(1.5)  # a metrics sample after the burst
            capacity = metric(decode.metrics, "pdspark_cache_capacity_bytes")
            self.assertEqual(capacity, one)
            self.assertLessEqual(metric(decode.metrics, "pdspark_cache_high_water_bytes"), capacity)
            self.assertEqual(metric(decode.metrics, "pdspark_cache_reserved_bytes"), 0)
        finally:
            c.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
