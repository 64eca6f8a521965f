"""Drain under load (docs/reliability.md "Drain"): with streams in flight and new requests
arriving, a decode worker gets SIGTERM and a prefill worker gets WorkerAdmin.Drain. Each must
deregister (the router stops sending it work), finish what it has (no stream is migrated or
retried, every text equals the undisturbed run), wait for its leases, and exit 0; the router
serves everything else on the remaining workers, and nothing is held afterwards.

Prints `drain-figures {json}`."""

import json
import signal
import threading
import time
import unittest

from cluster import Cluster, health, metric, wait_for
from reliability_support import (Stream, assert_nothing_held, completion, parse_args, stubs,
                                 worker_stats)

ARGS = None
PROMPTS = ["ROMEO:", "First Citizen:\nWe are accounted poor citizens",
           "KING RICHARD III:\nNow is the winter of our discontent"]


def body(i, max_tokens):
    return {"model": "m", "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}


class DrainTest(unittest.TestCase):
    def setUp(self):
        self.mods = stubs(ARGS.source_dir)
        if self.mods is None:
            self.skipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        c = self.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        self.router = c.start_router("router", ["--disagg-min-prompt-tokens", "1", "--policy",
                                                "round_robin"])
        extra = ["--ucx-tls", "tcp", "--drain-timeout-s", "120"]
        self.prefill = [c.start_worker("prefill-%d" % i, "prefill", [self.router], extra)
                        for i in range(2)]
        self.decode = [c.start_worker("decode-%d" % i, "decode", [self.router], extra)
                       for i in range(2)]
        c.wait_ready((lambda: self.counts() == (2, 2), "2 prefill + 2 decode workers"))

    def tearDown(self):
        self.cluster.stop_all()

    def counts(self):
        h = health(self.router)
        return h.get("prefill_workers"), h.get("decode_workers")

    def admin_drain(self, worker):
        grpc = self.mods[0]
        from pdspark.v1 import admin_pb2, admin_pb2_grpc
        with grpc.insecure_channel("127.0.0.1:%d" % worker.grpc) as channel:
            admin_pb2_grpc.WorkerAdminStub(channel).Drain(admin_pb2.WorkerDrainRequest(),
                                                          timeout=10)

    def test_drain_under_load_finishes_everything_and_exits_zero(self):
        max_tokens = 160
        references = [completion(self.router.http, body(i, max_tokens)) for i in range(3)]
        # 12 streams in flight on all four workers before the drains start.
        streams = [Stream(self.router.http, body(i, max_tokens)) for i in range(12)]
        for s in streams:
            self.assertTrue(s.read_event())
        readers = [threading.Thread(target=s.read_all) for s in streams]
        for t in readers:
            t.start()
        # New requests keep arriving during the drain.
        later, stop = [], threading.Event()

        def keep_sending():
            i = 0
            while not stop.is_set():
                later.append((i, completion(self.router.http, body(i, 24))))
                i += 1

        sender = threading.Thread(target=keep_sending)
        sender.start()
        # The decode worker to drain has streams of its own in flight.
        self.assertGreater(worker_stats(ARGS.source_dir, self.decode[0]).running_requests, 0)
        started = time.time()
        self.decode[0].proc.send_signal(signal.SIGTERM)
        self.admin_drain(self.prefill[0])
        # Deregistered at once: the router stops counting them.
        wait_for(lambda: self.counts() == (1, 1), timeout=10, what="drained workers deregistered")
        codes = [w.proc.wait(timeout=120) for w in (self.decode[0], self.prefill[0])]
        drain_s = time.time() - started
        stop.set()
        sender.join()
        for t in readers:
            t.join()
        self.assertEqual(codes, [0, 0])
        for i, s in enumerate(streams):
            self.assertIsNone(s.error, s.error)
            self.assertIsNone(s.exception)
            self.assertEqual((s.text, s.usage), (references[i % 3].text, references[i % 3].usage))
        short = {}
        for i, s in later:
            self.assertIsNone(s.error, s.error)
            short.setdefault(i % 3, s.text)
            self.assertEqual(s.text, short[i % 3])
        # Finished where they were: nothing was retried or migrated.
        self.assertEqual(metric(self.router.http, "pdspark_router_migrations_total"), 0)
        self.assertEqual(metric(self.router.http, "pdspark_router_retries_total"), 0)
        assert_nothing_held(self, ARGS.source_dir, [self.prefill[1], self.decode[1]])
        print("drain-figures %s" % json.dumps({
            "in_flight_at_drain": len(streams), "sent_during_drain": len(later),
            "completed": len(streams) + len(later), "drain_seconds": round(drain_s, 2)}))


def main():
    global ARGS
    ARGS, argv = parse_args()
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
