"""Failures in the middle of a KV transfer (UCX tcp, real processes): a decode worker stopped
(SIGSTOP) or killed while a prefill worker streams into it, and a prefill worker killed while
streaming. Each must end the transfer on the prefill side with the precise reason (stall,
peer_failed), free memory on both sides (send buffers, reservations, cache) and never leave the
client's request hanging."""

import argparse
import os
import signal
import sys
import threading
import time
import unittest

from cluster import Cluster, grpc_modules, health, http_json, metric, wait_for

ARGS = None
MODS = None
PROMPT = [(i * 131 + 7) % 4000 + 10 for i in range(990)]


class Request(threading.Thread):
    """One completion in the background; `status` is its HTTP status once done."""

    def __init__(self, router):
        super().__init__(daemon=True)
        self.router, self.status, self.body = router, None, None
        self.start()

    def run(self):
        try:
            self.status, self.body = http_json(
                self.router.http, "/v1/completions",
                {"model": "m", "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
                 "ignore_eos": True}, timeout=120)
        except OSError as e:  # the router itself never answered
            self.status, self.body = -1, str(e)


class KvFaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if MODS is None:
            raise unittest.SkipTest("python3-grpcio / protoc / grpc_python_plugin not installed")

    def start(self):
        """A fresh router + prefill + decode (every test breaks its own cluster)."""
        c = self.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        self.addCleanup(c.stop_all)
        self.router = c.start_router("router", ["--disagg-min-prompt-tokens", "1"])
        tls = ["--ucx-tls", "tcp"]
        # Small prefill chunks: the prompt streams over many steps, so the transfer lasts long
        # enough to be caught in flight (with 64-token chunks it could end between two polls).
        self.prefill = c.start_worker("prefill", "prefill", [self.router],
                                      tls + ["--transfer-stall-ms", "1000",
                                             "--max-batch-tokens", "16"])
        self.decode = c.start_worker("decode", "decode", [self.router], tls)
        c.wait_ready((lambda: health(self.router).get("prefill_workers") == 1 and
                      health(self.router).get("decode_workers") == 1, "cluster"))

    def start_transfer(self):
        """Sends the long prompt and returns once the decode worker holds its reservation."""
        request = Request(self.router)
        wait_for(lambda: metric(self.decode.metrics, "pdspark_kv_active_reservations") == 1,
                 timeout=30, what="the decode worker's reservation", poll=0.02)
        return request

    def expect_prefill_side_clean(self, reason):
        failures = 'reason="%s"' % reason
        wait_for(lambda: metric(self.prefill.metrics, "pdspark_kv_transfer_failures_total",
                                failures) >= 1, timeout=20, what="a %s failure" % reason)
        wait_for(lambda: self.prefill_stats() == (0, 0), timeout=20,
                 what="the prefill worker to cancel the prefill and free its cache")

    def prefill_stats(self):
        """(running requests, cache bytes in use) from the prefill worker's Stats RPC."""
        grpc = MODS[0]
        from pdspark.v1 import worker_pb2, worker_pb2_grpc
        stub = worker_pb2_grpc.PrefillWorkerStub(
            grpc.insecure_channel("127.0.0.1:%d" % self.prefill.grpc))
        stats = stub.Stats(worker_pb2.StatsRequest(), timeout=5)
        return stats.running_requests, stats.used_cache_bytes

    def test_stopped_decode_fails_by_the_stall_timer(self):
        self.start()
        request = self.start_transfer()
        self.decode.proc.send_signal(signal.SIGSTOP)
        try:
            start = time.time()
            self.expect_prefill_side_clean("stall")
            self.assertLess(time.time() - start, 15)
            self.assertEqual(metric(self.prefill.metrics, "pdspark_kv_transfer_stalls_total"), 1)
        finally:
            self.decode.proc.send_signal(signal.SIGCONT)
        request.join(120)
        self.assertFalse(request.is_alive(), "the request hung")
        # The router falls back to prefilling on the (resumed) decode worker.
        self.assertEqual(request.status, 200, request.body)
        wait_for(lambda: metric(self.decode.metrics, "pdspark_kv_active_reservations") == 0 and
                 metric(self.decode.metrics, "pdspark_cache_used_bytes") == 0,
                 timeout=30, what="the decode worker to drop the reservation")

    def test_killed_decode_fails_as_peer_failed(self):
        self.start()
        request = self.start_transfer()
        self.decode.proc.send_signal(signal.SIGKILL)
        self.decode.proc.wait()
        self.expect_prefill_side_clean("peer_failed")
        request.join(120)
        self.assertFalse(request.is_alive(), "the request hung")
        self.assertNotEqual(request.status, 200, "no decode worker is left to serve it")

    def test_killed_prefill_releases_the_reservation(self):
        self.start()
        request = self.start_transfer()
        # Killed once its prompt runs (its KV link is up). Killed during the link's wire-up,
        # UCX 1.13 aborts the decode process (openucx/ucx#8175; prefill_service.cc).
        wait_for(lambda: self.prefill_stats()[0] == 1, timeout=30,
                 what="the prefill worker to run the prompt", poll=0.02)
        self.prefill.proc.send_signal(signal.SIGKILL)
        self.prefill.proc.wait()
        request.join(120)
        self.assertFalse(request.is_alive(), "the request hung")
        self.assertEqual(request.status, 200, request.body)  # prefilled on the decode worker
        self.assertEqual(request.body["usage"]["completion_tokens"], 8)
        wait_for(lambda: metric(self.decode.metrics, "pdspark_kv_active_reservations") == 0 and
                 metric(self.decode.metrics, "pdspark_cache_used_bytes") == 0,
                 timeout=30, what="the decode worker to release the reservation")


def main():
    global ARGS, MODS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ARGS, rest = parser.parse_known_args()
    MODS = grpc_modules(ARGS.source_dir)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
