"""The bundled tiny model through the whole system with DSpark on: prompts prefilled on a
prefill worker (tensor-parallel size 2), KV over UCX, speculative decoding on the decode worker
(tensor-parallel size 8, as deployed). Greedy output must equal a plain (no speculation,
colocated, TP=1) decode worker's, and the drafter's acceptance must show in the decode worker's
Prometheus counters."""

import argparse
import sys
import time
import unittest

from cluster import Cluster, health, http_json, metric, wait_for

ARGS = None
PROMPTS = ["ROMEO:", "First Citizen:\nWe are", "KING RICHARD III:\nNow is the winter"]


def complete(router, prompt):
    status, out = http_json(router.http, "/v1/completions",
                            {"model": "m", "prompt": prompt, "max_tokens": 32, "temperature": 0,
                             "ignore_eos": True})
    assert status == 200, out
    return out["choices"][0]["text"]


class DSparkClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        cls.r_spec = c.start_router("router-spec", ["--disagg-min-prompt-tokens", "1"])
        cls.r_plain = c.start_router("router-plain")
        cls.decode_spec = c.start_worker("decode-spec", "decode", [cls.r_spec],
                                         ["--spec-method", "dspark", "--spec-tokens", "5",
                                          "--tensor-parallel-size", "8"])
        cls.prefill = c.start_worker("prefill", "prefill", [cls.r_spec],
                                     ["--tensor-parallel-size", "2"])
        # Speculation is on by default with the bundled drafter: this one runs plainly.
        cls.decode_plain = c.start_worker("decode-plain", "decode", [cls.r_plain],
                                          ["--spec-method", "none"])
        c.wait_ready((lambda: health(cls.r_spec).get("decode_workers") == 1 and
                      health(cls.r_spec).get("prefill_workers") == 1, "spec cluster"),
                     (lambda: health(cls.r_plain).get("decode_workers") == 1, "plain cluster"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def test_disaggregated_dspark_equals_plain_greedy(self):
        for prompt in PROMPTS:
            self.assertEqual(complete(self.r_spec, prompt), complete(self.r_plain, prompt), prompt)
        port = self.decode_spec.metrics
        # The worker samples its engine every 0.5 s: wait until a sample after the last request
        # is exported (two equal reads 1.2 s apart), so every read below is of one snapshot.
        def settled():
            first = metric(port, "pdspark_spec_decode_drafts_total")
            time.sleep(1.2)
            return first > 0 and metric(port, "pdspark_spec_decode_drafts_total") == first
        wait_for(settled, timeout=30, what="spec counters to settle")
        drafts = metric(port, "pdspark_spec_decode_drafts_total")
        proposed = metric(port, "pdspark_spec_decode_draft_tokens_total")
        accepted = metric(port, "pdspark_spec_decode_accepted_tokens_total")
        # At most --spec-tokens per round (fewer near max_tokens, where the draft is clamped).
        self.assertLessEqual(proposed, 5 * drafts)
        self.assertGreaterEqual(proposed, drafts)
        self.assertLessEqual(accepted, proposed)
        # The trained drafter predicts its target: well above one token per round.
        self.assertGreater(1 + accepted / drafts, 1.5, "acceptance length")
        self.assertEqual(metric(self.decode_plain.metrics, "pdspark_spec_decode_drafts_total"), 0)
        # Every round is in the verify-length histogram; none verified more than 5 drafts.
        self.assertEqual(metric(port, "pdspark_spec_decode_verify_length_count"), drafts)
        self.assertEqual(metric(port, "pdspark_spec_decode_verify_length_sum"), proposed)
        self.assertEqual(metric(port, "pdspark_spec_decode_verify_length_bucket", 'le="5"'), drafts)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
