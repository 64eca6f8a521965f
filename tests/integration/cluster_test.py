"""End-to-end: real router, prefill and decode processes on loopback. The disaggregated path
(prefill worker -> UCX -> decode worker) must give exactly the colocated tokens, concurrent
streams must all finish, the gRPC API and the single-process CLI give the same tokens, a client that goes away must free its cache, and a killed worker must
be marked unhealthy within 3 heartbeat intervals."""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

from cluster import Cluster, grpc_modules, health, http_json, metric, wait_for

ARGS = None
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], list(range(100, 160)), [7] * 33]


def completion(router, prompt, **kw):
    body = {"model": "m", "prompt": prompt, "max_tokens": 12, "ignore_eos": True}
    body.update(kw)
    status, out = http_json(router.http, "/v1/completions", body)
    assert status == 200, out
    return out["choices"][0]["text"], out["usage"]


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        c = cls.cluster
        # r_disagg sends every prompt through the prefill worker; r_coloc has no prefill worker,
        # so the same decode worker prefills locally: the colocated reference.
        cls.r_disagg = c.start_router("router-disagg", ["--disagg-min-prompt-tokens", "1"])
        cls.r_coloc = c.start_router("router-coloc")
        cls.decode = c.start_worker("decode", "decode", [cls.r_disagg, cls.r_coloc],
                                    ["--ucx-tls", ARGS.ucx_tls])
        cls.prefill = c.start_worker("prefill", "prefill", [cls.r_disagg],
                                     ["--ucx-tls", ARGS.ucx_tls])
        c.wait_ready((lambda: health(cls.r_disagg).get("prefill_workers") == 1 and
                      health(cls.r_disagg).get("decode_workers") == 1, "disagg cluster"),
                     (lambda: health(cls.r_coloc).get("decode_workers") == 1, "coloc cluster"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def test_disaggregated_equals_colocated(self):
        sent_before = metric(self.prefill.metrics, "pdspark_kv_transfer_bytes_total", 'direction="send"')
        for prompt in PROMPTS:
            for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 1234}):
                disagg = completion(self.r_disagg, prompt, **kw)
                coloc = completion(self.r_coloc, prompt, **kw)
                self.assertEqual(disagg, coloc, "prompt %s %s" % (prompt[:4], kw))
                self.assertEqual(disagg[1]["completion_tokens"], 12)
        sent = metric(self.prefill.metrics, "pdspark_kv_transfer_bytes_total", 'direction="send"')
        received = metric(self.decode.metrics, "pdspark_kv_transfer_bytes_total",
                          'direction="receive"')
        self.assertGreater(sent - sent_before, 0, "no KV bytes went over UCX")
        self.assertGreater(received, 0)

    def test_http_matches_pdspark_generate(self):
        # The single-process CLI and the whole cluster run the same engine: same greedy tokens.
        # With a seed, sampled tokens match too: both use the request's own seeded sampler.
        for prompt in PROMPTS:
            for temperature, seed in ((0, 0), (1.0, 1234)):
                out = subprocess.run(
                    [os.path.join(ARGS.bin_dir, "pdspark"), "generate", "--model", ARGS.model_dir,
                     "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "12",
                     "--temperature", str(temperature), "--seed", str(seed), "--ignore-eos",
                     "--json"],
                    check=True, capture_output=True, text=True).stdout
                cli = json.loads(out)
                text, usage = completion(self.r_disagg, prompt, temperature=temperature, seed=seed)
                self.assertEqual(text, cli["text"], "prompt %s T=%s" % (prompt[:4], temperature))
                self.assertEqual(usage["completion_tokens"], len(cli["token_ids"]))

    def test_grpc_generate_streams_the_same_tokens(self):
        # Debian's python3-grpcio with stubs generated now from our protos.
        mods = grpc_modules(ARGS.source_dir)
        if mods is None:
            self.skipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        grpc, common_pb2, inference_pb2, inference_pb2_grpc = mods[:4]
        stub = inference_pb2_grpc.InferenceStub(
            grpc.insecure_channel("127.0.0.1:%d" % self.r_disagg.grpc))
        request = inference_pb2.GenerateRequest(
            model="m", token_ids=inference_pb2.TokenIds(ids=PROMPTS[1]),
            sampling=common_pb2.SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
        text, ids, finish = "", [], None
        for response in stub.Generate(request, timeout=120):
            ids.extend(response.token_ids)
            text += response.text
            if response.finish_reason:
                finish = response.finish_reason
        self.assertEqual(len(ids), 12)
        self.assertEqual(finish, common_pb2.FINISH_REASON_LENGTH)
        self.assertEqual(text, completion(self.r_disagg, PROMPTS[1], temperature=0)[0])

    def test_concurrent_streams_all_finish(self):
        results = [None] * 64

        def stream(i):
            body = json.dumps({"model": "m", "prompt": PROMPTS[i % 3], "max_tokens": 8,
                               "ignore_eos": True, "stream": True, "temperature": 0}).encode()
            req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.r_disagg.http,
                                         data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as r:
                lines = [l.decode().strip() for l in r if l.strip()]
            results[i] = lines

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, lines in enumerate(results):
            self.assertIsNotNone(lines, "stream %d did not finish" % i)
            self.assertEqual(lines[-1], "data: [DONE]")
        texts = ["".join(json.loads(l[6:])["choices"][0]["text"] for l in lines
                         if l != "data: [DONE]" and json.loads(l[6:])["choices"])
                 for lines in results]
        # Same prompt, greedy: the same text whatever else was in the batch.
        for i in range(3, 64):
            self.assertEqual(texts[i], texts[i % 3])

    def test_client_disconnect_frees_cache(self):
        body = json.dumps({"model": "m", "prompt": PROMPTS[1], "max_tokens": 150, "ignore_eos": True,
                           "stream": True, "temperature": 0}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.r_coloc.http,
                                     data=body, headers={"Content-Type": "application/json"})
        r = urllib.request.urlopen(req, timeout=60)
        r.readline()  # the first chunk arrived: the request is running on the decode worker
        r.close()
        wait_for(lambda: metric(self.decode.metrics, "pdspark_decode_running_requests") == 0 and
                 metric(self.decode.metrics, "pdspark_cache_used_bytes") == 0,
                 timeout=60, what="decode worker to drop the abandoned request")

    def test_zz_killed_worker_is_marked_unhealthy(self):
        # Runs last (name order): it kills the prefill worker. 3 intervals of 200 ms + slack.
        self.prefill.proc.send_signal(signal.SIGKILL)
        self.prefill.proc.wait()
        start = time.time()
        wait_for(lambda: health(self.r_disagg).get("prefill_workers") == 0, timeout=10,
                 what="prefill worker marked unhealthy")
        self.assertLess(time.time() - start, 3.0)
        # New requests avoid it: they are served colocated, with the same tokens.
        self.assertEqual(completion(self.r_disagg, PROMPTS[0], temperature=0),
                         completion(self.r_coloc, PROMPTS[0], temperature=0))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--ucx-tls", default="tcp", help="KV transfer transports (UCX_TLS)")
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
