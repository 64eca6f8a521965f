"""Prefix caching changes nothing but the work done: 50 multi-turn ShareGPT conversations
(tests/data/sharegpt_multiturn_50.json, conversations with 2-3 human turns taken from the ShareGPT
file the project was given), each turn sent to /v1/chat/completions with the whole history
before it (the recorded answers), greedy, DSpark on. The bundled tiny model behind three routers:
  colocated       one decode worker, prefix caching on (the default)
  disaggregated   one prefill + one decode worker, caching on, every prompt over UCX (from
                  turn 2 on only the part the decode worker does not hold yet)
  reference       one decode worker started with --no-enable-prefix-caching
Every turn's answer through the first two equals the reference's; the cached workers reused
prefixes (turn k's prompt starts with turn k-1's), the counters say how much, and the pool
pages only the cache holds are not reported as in use. A fourth router with --policy kv_aware
over two workers sends a conversation's second turn to the worker whose heartbeats report its
first turn cached."""

import argparse
import json
import os
import sys
import time
import unittest

from cluster import Cluster, health, http_json, metric, wait_for

ARGS = None
SPEC = ["--spec-method", "dspark", "--spec-tokens", "3"]
MAX_TOKENS = 12


def conversations():
    with open(os.path.join(ARGS.source_dir, "tests", "data", "sharegpt_multiturn_50.json")) as f:
        return json.load(f)


def turns(conversation):
    """The messages of each human turn: the history with the recorded answers, then the turn."""
    history = []
    for message in conversation["conversations"]:
        role = "user" if message["from"] == "human" else "assistant"
        history.append({"role": role, "content": message["value"]})
        if role == "user":
            yield list(history)


class PrefixCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        tls = ["--ucx-tls", ARGS.ucx_tls]
        cls.colocated = c.start_router("router-colocated")
        cls.disagg = c.start_router("router-disagg", ["--disagg-min-prompt-tokens", "1"])
        cls.reference = c.start_router("router-reference")
        cls.colocated_worker = c.start_worker("decode-colocated", "decode", [cls.colocated],
                                              tls + SPEC)
        cls.prefill = c.start_worker("prefill", "prefill", [cls.disagg], tls)
        # Small pages, so that every later turn's history spares whole pages of the transfer
        # (a cached prefix shorter than a page of every group spares nothing).
        cls.decode = c.start_worker("decode", "decode", [cls.disagg],
                                    tls + SPEC + ["--block-size", "16"])
        cls.reference_worker = c.start_worker("decode-reference", "decode", [cls.reference],
                                              tls + SPEC + ["--no-enable-prefix-caching"])
        # kv_aware on reported caches: worker x is also behind a router of its own (solo), so it
        # can cache prompts the kv_aware router never sent anywhere.
        cls.solo = c.start_router("router-solo")
        cls.kv = c.start_router("router-kv", ["--policy", "kv_aware"])
        cls.x = c.start_worker("decode-x", "decode", [cls.solo, cls.kv], tls)
        cls.y = c.start_worker("decode-y", "decode", [cls.kv], tls)
        c.wait_ready(
            (lambda: health(cls.colocated).get("decode_workers") == 1, "colocated router"),
            (lambda: health(cls.disagg).get("prefill_workers") == 1 and
             health(cls.disagg).get("decode_workers") == 1, "disaggregated router"),
            (lambda: health(cls.reference).get("decode_workers") == 1, "reference router"),
            (lambda: health(cls.kv).get("decode_workers") == 2, "kv_aware router"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def chat(self, router, messages):
        status, body = http_json(router.http, "/v1/chat/completions", {
            "model": "m", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True})
        self.assertEqual(status, 200, body)
        return body["choices"][0]["message"]["content"], body["usage"]

    def test_multi_turn_answers_equal_an_uncached_worker(self):
        requests, later_turns, earlier_prompts = 0, 0, 0
        for number, conversation in enumerate(conversations()):
            for turn, messages in enumerate(turns(conversation)):
                expected, usage = self.chat(self.reference, messages)
                self.assertEqual(usage["completion_tokens"], MAX_TOKENS)
                self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0)
                for name, router in (("colocated", self.colocated), ("disaggregated", self.disagg)):
                    answer, cached_usage = self.chat(router, messages)
                    what = "%s: conversation %d (%s), turn %d" % (
                        name, number, conversation["id"], turn + 1)
                    self.assertEqual(answer, expected, what)
                    # OpenAI's usage says how much of the prompt came from the cache: from turn
                    # 2 on, at least the previous turn's prompt.
                    cached = cached_usage["prompt_tokens_details"]["cached_tokens"]
                    self.assertLess(cached, usage["prompt_tokens"], what)
                    if turn > 0:
                        self.assertGreaterEqual(cached, previous_prompt, what)
                if turn > 0:
                    earlier_prompts += previous_prompt
                previous_prompt = usage["prompt_tokens"]
                requests += 1
                later_turns += 1 if turn > 0 else 0
        self.assertGreaterEqual(later_turns, 50)

        # Every later turn started with the turn before it, so each cached worker that computed
        # prompts reused a prefix for at least those; the reference looked nothing up.
        for worker in (self.colocated_worker, self.prefill):
            # The workers export their counters every 500 ms.
            wait_for(lambda: metric(worker.metrics, "pdspark_prefix_cache_lookups_total") ==
                     requests, timeout=10, what="%s's lookups" % worker.name)
            hits = metric(worker.metrics, "pdspark_prefix_cache_lookup_hits_total")
            self.assertGreaterEqual(hits, later_turns, worker.name)
            self.assertGreater(metric(worker.metrics, "pdspark_prefix_cache_hits_total"), 0)
            self.assertLess(metric(worker.metrics, "pdspark_prefix_cache_hits_total"),
                            metric(worker.metrics, "pdspark_prefix_cache_queries_total"))
            self.assertGreater(metric(worker.metrics, "pdspark_prefix_cache_entries"), 0)
        self.assertEqual(metric(self.reference_worker.metrics,
                                "pdspark_prefix_cache_lookups_total"), 0)
        # Every disaggregated prompt went over UCX, and the decode worker drafted.
        self.assertEqual(metric(self.prefill.metrics, "pdspark_kv_transfer_seconds_count"),
                         requests)
        self.assertGreater(metric(self.decode.metrics, "pdspark_spec_decode_drafts_total"), 0)
        # The decode worker cached each prompt it received, so every later turn's transfer
        # carried only what followed the turn before it.
        wait_for(lambda: metric(self.decode.metrics,
                                "pdspark_kv_transfer_cached_prompt_tokens_total") >=
                 earlier_prompts, timeout=10, what="suffix-only transfers")
        # Pages only the cache holds are free for the taking, not "used".
        for worker in (self.colocated_worker, self.prefill, self.decode):
            wait_for(lambda: metric(worker.metrics, "pdspark_cache_used_bytes") == 0, timeout=10,
                     what="%s's pages to return" % worker.name)
            self.assertGreater(metric(worker.metrics, "pdspark_prefix_cache_bytes"), 0)


    def test_kv_aware_follows_the_prefixes_workers_report(self):
        """Turn 1 of each conversation goes to worker x through its own router; turn 2, through
        the kv_aware router, lands on x because x's heartbeats say it holds turn 1, though that
        router never sent turn 1 anywhere (without the report both workers would look alike)."""
        hits_before = metric(self.x.metrics, "pdspark_prefix_cache_lookup_hits_total")
        conversations_run = 0
        for conversation in conversations()[:8]:
            history = list(turns(conversation))
            self.chat(self.solo, history[0])
            second = history[1]  # turn 1, its recorded answer, turn 2
            # The worker reports its cache with the next heartbeat (200 ms in these tests).
            wait_for(lambda: metric(self.x.metrics, "pdspark_prefix_cache_entries") > 0,
                     timeout=10, what="x's cache")
            time.sleep(0.5)
            self.chat(self.kv, second)
            conversations_run += 1
        wait_for(lambda: metric(self.x.metrics, "pdspark_prefix_cache_lookup_hits_total") -
                 hits_before >= conversations_run, timeout=10,
                 what="every second turn to reuse x's cache")
        self.assertEqual(metric(self.y.metrics, "pdspark_prefix_cache_lookups_total"), 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--ucx-tls", default="tcp")
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
