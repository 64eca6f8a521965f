"""Tensor parallelism across processes: the bundled tiny model prefilled on a TP=2 prefill
worker, its state shipped over UCX to a TP=8 decode worker running DSpark. Greedy output must
equal a plain TP=1 colocated decode worker's (docs/tensor_parallel.md: the state has no sharded
part and every TP size computes TP=1's bits)."""

import argparse
import sys
import unittest

from cluster import Cluster, health, http_json

ARGS = None
PROMPTS = ["ROMEO:", "First Citizen:\nWe are"]


def complete(router, prompt):
    status, out = http_json(router.http, "/v1/completions",
                            {"model": "m", "prompt": prompt, "max_tokens": 24, "temperature": 0,
                             "ignore_eos": True})
    assert status == 200, out
    return out["choices"][0]["text"]


class TensorParallelClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        cls.r_tp = c.start_router("router-tp", ["--disagg-min-prompt-tokens", "1"])
        cls.r_plain = c.start_router("router-plain")
        c.start_worker("decode-tp8", "decode", [cls.r_tp],
                       ["--tensor-parallel-size", "8", "--spec-method", "dspark",
                        "--spec-tokens", "4"])
        c.start_worker("prefill-tp2", "prefill", [cls.r_tp], ["--tensor-parallel-size", "2"])
        c.start_worker("decode-plain", "decode", [cls.r_plain])
        c.wait_ready((lambda: health(cls.r_tp).get("decode_workers") == 1 and
                      health(cls.r_tp).get("prefill_workers") == 1, "TP cluster"),
                     (lambda: health(cls.r_plain).get("decode_workers") == 1, "plain cluster"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def test_tp2_prefill_to_tp8_dspark_decode_equals_plain_tp1(self):
        for prompt in PROMPTS:
            self.assertEqual(complete(self.r_tp, prompt), complete(self.r_plain, prompt), prompt)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
