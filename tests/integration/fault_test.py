"""Fault injection on a real cluster (docs/reliability.md): router + 2 prefill + 2 decode
workers on loopback, KV over UCX, the bundled tiny model. Workers are killed (SIGKILL) or
stopped (SIGSTOP) in the middle of requests, clients hang up in storms and the router itself is
killed and restarted. Pass criterion for every test: each request ends with the text an
undisturbed greedy run gives or with a precise error, before its deadline, and afterwards no
process holds any request, cache block or lease (worker Stats and /metrics gauges).

Prints one `fault-figures {json}` line per test with what it sent and how each request ended."""

import json
import random
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
DEADLINE_S = 60


def body(prompt, max_tokens):
    return {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}


class FaultTest(unittest.TestCase):
    def setUp(self):
        if stubs(ARGS.source_dir) is None:
            self.skipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        self.cluster = c = Cluster(ARGS.bin_dir, ARGS.model_dir)
        self.router = self.start_router()
        self.prefill = [self.start_worker("prefill-%d" % i, "prefill") for i in range(2)]
        self.decode = [self.start_worker("decode-%d" % i, "decode") for i in range(2)]
        c.wait_ready((lambda: self.counts() == (2, 2), "2 prefill + 2 decode workers"))
        self.figures = {"sent": 0, "completed": 0, "failed": {}}

    def tearDown(self):
        for p in self.cluster.procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
        self.cluster.stop_all()
        print("fault-figures %s %s" % (self.id().rsplit(".", 1)[-1], json.dumps(self.figures)))

    def start_router(self, http=None, grpc=None):
        """A router; with `http`/`grpc`, a restarted one on the ports everyone knows."""
        return self.cluster.start_router(
            "router" if http is None else "router-restarted",
            ["--disagg-min-prompt-tokens", "1", "--policy", "round_robin", "--max-attempts", "3",
             "--prefill-attempt-timeout-ms", "5000", "--decode-stall-timeout-ms", "10000",
             "--request-timeout-s", str(DEADLINE_S), "--shutdown-grace-s", "1",
             # Long leases: a reservation freed by its lease instead of a Release is a leak.
             "--reservation-lease-ms", "120000"],
            http=http, grpc=grpc)

    def start_worker(self, name, role):
        # DSpark on the decode workers: a migrated stream must rebuild the drafter's state.
        spec = ["--spec-method", "dspark", "--spec-tokens", "3"] if role == "decode" else []
        return self.cluster.start_worker(name, role, [self.router], ["--ucx-tls", "tcp", *spec])

    def counts(self):
        h = health(self.router)
        return h.get("prefill_workers"), h.get("decode_workers")

    def router_metric(self, name, labels=""):
        return metric(self.router.http, name, labels)

    def live_workers(self):
        return [w for w in self.prefill + self.decode if w.proc.poll() is None]

    def record(self, stream, expected=None):
        """Counts how a request ended; asserts it is the reference text or a precise error."""
        self.figures["sent"] += 1
        if stream.error is None and stream.exception is None:
            self.figures["completed"] += 1
            if expected is not None:
                self.assertEqual(stream.text, expected.text)
                self.assertEqual(stream.usage, expected.usage)
            return
        code = (stream.error or {}).get("code") or type(stream.exception).__name__
        self.figures["failed"][code] = self.figures["failed"].get(code, 0) + 1

    def running_decode_worker(self):
        for w in self.decode:
            if w.proc.poll() is None and worker_stats(ARGS.source_dir, w).running_requests:
                return w
        return None

    def stream_until_tokens(self, prompt, max_tokens, tokens):
        s = Stream(self.router.http, body(prompt, max_tokens))
        while len(s.text) < tokens and s.read_event():
            pass
        self.assertFalse(s.done, "the request ended before the fault could be injected")
        return s

    def test_decode_killed_mid_stream_migrates_with_identical_text(self):
        reference = completion(self.router.http, body(PROMPTS[0], 400))
        self.assertIsNone(reference.error)
        started = time.time()
        s = self.stream_until_tokens(PROMPTS[0], 400, 20)
        victim = self.running_decode_worker()
        self.assertIsNotNone(victim)
        victim.proc.send_signal(signal.SIGSTOP)  # freeze it mid-stream, then kill it
        time.sleep(0.1)
        victim.proc.kill()
        victim.proc.wait()
        s.read_all()
        self.assertLess(time.time() - started, DEADLINE_S)
        self.assertIsNone(s.error)
        self.assertEqual(s.finish, "length")
        self.record(s, reference)
        self.assertEqual(self.router_metric("pdspark_router_migrations_total"), 1)
        self.figures["migrated"] = 1
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())

    def test_decode_stopped_mid_stream_is_given_up_and_frees_everything_on_resume(self):
        reference = completion(self.router.http, body(PROMPTS[1], 400))
        started = time.time()
        s = self.stream_until_tokens(PROMPTS[1], 400, 20)
        victim = self.running_decode_worker()
        victim.proc.send_signal(signal.SIGSTOP)
        s.read_all()  # it misses 3 heartbeats: the router moves the stream on
        self.assertLess(time.time() - started, DEADLINE_S)
        self.record(s, reference)
        self.assertEqual(self.router_metric("pdspark_router_migrations_total"), 1)
        self.figures["migrated"] = 1
        victim.proc.send_signal(signal.SIGCONT)  # back: it must drop the abandoned request
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())

    def concurrent(self, prompts, max_tokens):
        results = [None] * len(prompts)

        def run(i):
            results[i] = completion(self.router.http, body(prompts[i], max_tokens))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        return threads, results

    def test_prefill_killed_mid_request_is_retried_on_the_other(self):
        references = [completion(self.router.http, body(p, 32)) for p in PROMPTS[:2]] * 2
        victim = self.prefill[0]
        victim.proc.send_signal(signal.SIGSTOP)  # it takes requests (still healthy), answers none
        started = time.time()
        threads, results = self.concurrent([r for r in PROMPTS[:2]] * 2, 32)
        time.sleep(0.3)
        victim.proc.kill()
        victim.proc.wait()
        for t in threads:
            t.join()
        self.assertLess(time.time() - started, DEADLINE_S)
        for s, ref in zip(results, references):
            self.assertIsNone(s.error, s.error)
            self.record(s, ref)
        # Round robin sent two of the four to the victim: each was retried once.
        self.assertEqual(self.router_metric("pdspark_router_retries_total", 'stage="prefill"'), 2)
        self.figures["retried"] = 2
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())

    def test_prefill_stopped_is_given_up_and_frees_everything_on_resume(self):
        references = [completion(self.router.http, body(p, 32)) for p in PROMPTS[:2]] * 2
        victim = self.prefill[1]
        sent = self.sent_bytes(victim)
        victim.proc.send_signal(signal.SIGSTOP)
        started = time.time()
        threads, results = self.concurrent([r for r in PROMPTS[:2]] * 2, 32)
        for t in threads:
            t.join()
        # Given up after 3 missed heartbeats, well before the 5 s prefill stall timer.
        self.assertLess(time.time() - started, 5)
        for s, ref in zip(results, references):
            self.record(s, ref)
        self.assertEqual(self.router_metric("pdspark_router_retries_total", 'stage="prefill"'), 2)
        self.figures["retried"] = 2
        victim.proc.send_signal(signal.SIGCONT)
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())
        # Resumed, it must not push the abandoned requests' state into the leases the router
        # released (by now another request's memory).
        time.sleep(1)
        self.assertEqual(self.sent_bytes(victim), sent, "a given-up prefill wrote its KV")

    def sent_bytes(self, worker):
        return metric(worker.metrics, "pdspark_kv_transfer_bytes_total", 'direction="send"')

    def test_abort_storm_frees_everything(self):
        reference = completion(self.router.http, body(PROMPTS[2], 64))
        rng = random.Random(11)
        streams, hung_up = [], 0

        def client(i):
            nonlocal hung_up
            s = Stream(self.router.http, body(PROMPTS[i % 3], 200))
            # Hang up after 0..6 events: before the first token, mid-prefill, mid-stream.
            for _ in range(rng.randrange(7)):
                if not s.read_event():
                    break
            s.close()
            streams.append(s)

        aborted = []

        def grpc_client(i):
            # gRPC clients whose requests are ended by Abort(request_id) after the first chunk.
            grpc, _, _, common_pb2, inference_pb2, inference_pb2_grpc = stubs(ARGS.source_dir)
            with grpc.insecure_channel("127.0.0.1:%d" % self.router.grpc) as channel:
                stub = inference_pb2_grpc.InferenceStub(channel)
                request = inference_pb2.GenerateRequest(
                    request_id="storm-%d" % i, text=PROMPTS[i % 3],
                    sampling=common_pb2.SamplingParams(max_tokens=200, ignore_eos=True))
                finish = None
                for n, response in enumerate(stub.Generate(request, timeout=DEADLINE_S)):
                    if n == 0:
                        found = stub.Abort(inference_pb2.AbortRequest(request_id="storm-%d" % i))
                        self.assertTrue(found.found)
                    finish = response.finish_reason or finish
                aborted.append(finish)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(48)]
        threads += [threading.Thread(target=grpc_client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.figures["sent"] += len(streams) + len(aborted)
        self.figures["hung_up"] = len(streams)
        self.figures["aborted"] = len(aborted)
        # Each aborted stream ends with FINISH_REASON_ABORT (3), not an error and not a hang.
        self.assertEqual(aborted, [3] * 8)
        wait_for(lambda: self.router_metric("pdspark_requests_in_flight") == 0, timeout=30,
                 what="router to drop every abandoned request")
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())
        # Released by the router, not reclaimed by lease expiry.
        for w in self.decode:
            self.assertEqual(metric(w.metrics, "pdspark_kv_expired_leases_total"), 0, w.name)
        # The server keeps serving, with the same output.
        self.record(completion(self.router.http, body(PROMPTS[2], 64)), reference)

    def test_unused_lease_expires_and_frees_its_memory(self):
        # A reservation nobody delivers into (its router died between Reserve and Prefill)
        # is freed when its lease ends, and the gauges say so.
        grpc, worker_pb2, worker_pb2_grpc, common_pb2 = stubs(ARGS.source_dir)[:4]
        with grpc.insecure_channel("127.0.0.1:%d" % self.decode[0].grpc) as channel:
            reserved = worker_pb2_grpc.DecodeWorkerStub(channel).Reserve(worker_pb2.ReserveRequest(
                context=common_pb2.RequestContext(request_id="orphan"), prompt_tokens=16,
                max_tokens=16, lease_ms=300), timeout=10)
        self.assertTrue(reserved.reservation_id)
        self.assertEqual(metric(self.decode[0].metrics, "pdspark_kv_active_reservations"), 1)
        time.sleep(0.5)
        # Its pages then sit out the late-write grace (10 s: a prefill worker may still be
        # draining puts into them) before they return to the pool.
        assert_nothing_held(self, ARGS.source_dir, [self.decode[0]], timeout=20)
        self.assertEqual(metric(self.decode[0].metrics, "pdspark_kv_expired_leases_total"), 1)

    def test_router_killed_clients_get_errors_and_workers_reregister(self):
        reference = completion(self.router.http, body(PROMPTS[0], 300))
        streams = [self.stream_until_tokens(PROMPTS[i % 3], 300, 5) for i in range(4)]
        self.router.proc.kill()
        self.router.proc.wait()
        started = time.time()
        for s in streams:
            s.read_all()
            self.assertIsNotNone(s.exception, "a stream outlived its router")
            self.record(s)
        self.assertLess(time.time() - started, 5, "clients hung after the router died")
        # The workers' streams to the dead router were cancelled: nothing held.
        assert_nothing_held(self, ARGS.source_dir, self.live_workers())
        self.router = self.start_router(self.router.http, self.router.grpc)
        wait_for(lambda: self.counts() == (2, 2), timeout=30, what="workers to register again")
        self.record(completion(self.router.http, body(PROMPTS[0], 300)), reference)


def main():
    global ARGS
    ARGS, argv = parse_args()
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
