#!/usr/bin/env python3
"""bench/serve/bench_serve.py against a canned OpenAI SSE server on loopback: sampling/filters,
token counts from usage, TTFT/ITL/TPOT timing, spec-decode deltas from /metrics, result JSON."""
import http.server, json, os, sys, tempfile, threading, time, unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "serve"))
import bench_serve  # noqa: E402

GAP = 0.02
STATE = {"drafts": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "m"}]}).encode()
        else:
            d = STATE["drafts"]
            body = ("pdspark_spec_decode_drafts_total{role=\"decode\"} %d\n"
                    "pdspark_spec_decode_draft_tokens_total %d\n"
                    "pdspark_spec_decode_accepted_tokens_total %d\n"
                    "pdspark_spec_decode_accepted_per_position_total{position=\"0\"} %d\n" % (d, 2 * d, d, d)).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        plen = len(req["prompt"].split()) + 1  # words + BOS
        if plen > 20:
            self.send_response(400); self.end_headers(); self.wfile.write(b"{}"); return
        self.send_response(200)
        self.end_headers()
        if not req.get("stream"):
            self.wfile.write(json.dumps({"usage": {"prompt_tokens": plen, "completion_tokens": 1}}).encode())
            return
        n = req["max_tokens"]
        for i in range(n):
            time.sleep(GAP)
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": "x"}]}).encode() + b"\n\n")
            self.wfile.flush()
        STATE["drafts"] += 1
        self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": n}}).encode()
                         + b"\n\ndata: [DONE]\n\n")


class BenchServeTest(unittest.TestCase):
    def test_against_canned_server(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        tmp = tempfile.mkdtemp()
        data = [{"conversations": [{"from": "human", "value": "w " * k}]} for k in range(1, 40)]
        path = os.path.join(tmp, "d.json")
        json.dump(data, open(path, "w"))
        rc = bench_serve.main(["--base-url", "http://127.0.0.1:%d" % srv.server_address[1],
                               "--dataset-path", path, "--sharegpt-output-len", "5", "--num-prompts", "8",
                               "--max-concurrency", "4", "--seed", "1", "--save-result", "--result-dir", tmp,
                               "--result-filename", "r.json", "--goodput", "ttft:1000", "--disable-tqdm"])
        self.assertEqual(rc, 0)
        r = json.load(open(os.path.join(tmp, "r.json")))
        self.assertEqual(r["completed"], 8)
        self.assertEqual(r["total_output_tokens"], 40)
        # Prompts of 4..20 tokens only (k words + BOS, filters: >= 4, server limit 20).
        self.assertGreaterEqual(r["total_input_tokens"], 8 * 4)
        self.assertLessEqual(r["total_input_tokens"], 8 * 20)
        self.assertAlmostEqual(r["mean_ttft_ms"], GAP * 1000, delta=15)
        self.assertAlmostEqual(r["mean_itl_ms"], GAP * 1000, delta=15)
        self.assertAlmostEqual(r["mean_tpot_ms"], GAP * 1000, delta=15)
        self.assertGreater(r["mean_e2el_ms"], 4 * GAP * 1000)
        self.assertEqual(r["spec_decode_num_drafts"], 8)
        self.assertAlmostEqual(r["spec_decode_acceptance_rate"], 0.5)
        self.assertAlmostEqual(r["spec_decode_acceptance_length"], 2.0)
        self.assertAlmostEqual(r["request_goodput"] * r["duration"], 8)
        srv.shutdown()

    def test_percentile_matches_numpy_linear(self):
        self.assertAlmostEqual(bench_serve.percentile([1, 2, 3, 4], 99), 3.97)
        self.assertEqual(bench_serve.percentile([5], 50), 5)


if __name__ == "__main__":
    unittest.main()
