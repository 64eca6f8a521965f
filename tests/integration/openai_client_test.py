"""The unmodified official `openai` npm client against a real local cluster on the bundled tiny
model (tests/integration/openai_client/checks.mjs makes the calls): logprobs equal `pdspark
generate`'s for the same greedy run, through a plain colocated decode worker and through a
disaggregated cluster with DSpark on; an echoed prompt's logprobs equal generate's prompt
logprobs; chat logprobs are the same whole and streamed, with and without DSpark; penalties give
generate's text, greedy (DSpark too) and on a fixed seed; n samples are generate's with seed + i,
best_of keeps the most likely, a batch of prompts answers prompt-major; a response_format
json_schema gives generate's `--json-schema` text (DSpark and disaggregated too), a chat reply
held to it parses and matches it, guided_choice answers one of its choices."""

import argparse
import json
import os
import subprocess
import sys
import unittest

from cluster import Cluster, health, metric

ARGS = None
PROMPT = [0, 45, 311, 20, 117, 66, 8, 290, 13, 71, 5, 202]
MAX_TOKENS = 12
SCHEMA = {"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
    "required": ["color", "ok", "tags"], "additionalProperties": False}


def generate(extra, prompt=PROMPT):
    out = subprocess.run([os.path.join(ARGS.bin_dir, "pdspark"), "generate", "--model",
                          ARGS.model_dir, "--prompt-ids", ",".join(map(str, prompt)), "--json",
                          *extra], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def node(script, *args):
    client_dir = os.path.join(ARGS.source_dir, "tests", "integration", "openai_client")
    if not os.path.isdir(os.path.join(client_dir, "node_modules", "openai")):
        raise AssertionError("the openai npm client is not installed in %s: run "
                             "scripts/bootstrap.sh (it runs `npm ci` there)" % client_dir)
    out = subprocess.run(["node", os.path.join(client_dir, script), *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def client_checks(router):
    return node("checks.mjs", "http://127.0.0.1:%d/v1" % router.http, json.dumps(PROMPT),
                json.dumps(SCHEMA))


class OpenAiClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        r_spec = c.start_router("router-spec", ["--disagg-min-prompt-tokens", "1"])
        r_plain = c.start_router("router-plain")
        cls.spec_decode = c.start_worker("decode-spec", "decode", [r_spec],
                                         ["--spec-method", "dspark", "--spec-tokens", "4"])
        c.start_worker("prefill", "prefill", [r_spec])
        c.start_worker("decode-plain", "decode", [r_plain], ["--spec-method", "none"])
        c.wait_ready((lambda: health(r_spec).get("decode_workers") == 1 and
                      health(r_spec).get("prefill_workers") == 1, "spec cluster"),
                     (lambda: health(r_plain).get("decode_workers") == 1, "plain cluster"))
        cls.plain = client_checks(r_plain)
        cls.spec = client_checks(r_spec)
        # Twenty json_schema chats through the DSpark cluster, its acceptance counted around them.
        accepted = lambda: metric(cls.spec_decode.metrics,
                                  "pdspark_spec_decode_accepted_tokens_total")
        before = accepted()
        cls.structured = node("structured.mjs", "http://127.0.0.1:%d/v1" % r_spec.http,
                              json.dumps(SCHEMA))
        cls.structured_accepted = accepted() - before
        cls.reference = generate(["--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--logprobs",
                                  "3", "--prompt-logprobs", "1", "--spec-method", "none"])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def test_completion_logprobs_equal_generate(self):
        expected = [t["logprob"] for t in self.reference["logprobs"]]
        self.assertEqual(len(expected), MAX_TOKENS)
        for name, run in (("plain", self.plain), ("dspark", self.spec)):
            lp = run["completion"]["logprobs"]
            self.assertEqual(lp["token_logprobs"], expected, name)
            self.assertEqual("".join(lp["tokens"]), run["completion"]["text"], name)
            self.assertEqual(lp["text_offset"][0], 0, name)
            for i, top in enumerate(lp["top_logprobs"]):
                # The 3 most likely and the chosen one (the most likely here: greedy), keyed by
                # text: tokens that read alike share a key, the more likely one's.
                reference_top = [t["logprob"] for t in self.reference["logprobs"][i]["top"]]
                self.assertEqual(max(top.values()), expected[i], name)
                self.assertEqual(top[lp["tokens"][i]], expected[i], name)
                self.assertLessEqual(set(top.values()), set(reference_top), name)

    def test_echoed_prompt_logprobs_equal_generate(self):
        prompt_expected = [t["logprob"] for t in self.reference["prompt_logprobs"]]
        self.assertEqual(len(prompt_expected), len(PROMPT) - 1)
        for name, run in (("plain", self.plain), ("dspark", self.spec)):
            lp = run["echo"]["logprobs"]
            self.assertEqual(len(lp["tokens"]), len(PROMPT) + 1, name)
            self.assertIsNone(lp["token_logprobs"][0], name)
            self.assertIsNone(lp["top_logprobs"][0], name)
            self.assertEqual(lp["token_logprobs"][1:len(PROMPT)], prompt_expected, name)
            self.assertEqual(lp["token_logprobs"][-1], self.reference["logprobs"][0]["logprob"])
            # The choice's text is the prompt's and the token's; offsets count characters.
            self.assertEqual("".join(lp["tokens"]), run["echo"]["text"], name)
            lengths = [b - a for a, b in zip(lp["text_offset"], lp["text_offset"][1:])]
            self.assertEqual(lengths, [len(t) for t in lp["tokens"][:-1]], name)

    def test_chat_logprobs_same_whole_streamed_and_with_dspark(self):
        whole = self.plain["chat"]
        self.assertEqual(len(whole["logprobs"]), MAX_TOKENS)
        for t in whole["logprobs"]:
            self.assertEqual(len(t["top_logprobs"]), 2)
            self.assertEqual(t["top_logprobs"][0]["logprob"], t["logprob"])  # greedy
            self.assertEqual(bytes(t["bytes"]).decode("utf-8"), t["token"])
        for name, run in (("plain stream", self.plain["chat_stream"]),
                          ("dspark", self.spec["chat"]), ("dspark stream", self.spec["chat_stream"])):
            self.assertEqual(run, whole, name)

    def test_penalties_change_output_as_generate_does(self):
        penalties = ["--max-tokens", "24", "--ignore-eos", "--spec-method", "none",
                     "--frequency-penalty", "1.0", "--presence-penalty", "0.5",
                     "--repetition-penalty", "1.2"]
        greedy = generate(penalties)["text"]
        sampled = generate(penalties + ["--temperature", "0.8", "--seed", "7"])["text"]
        self.assertEqual(self.plain["penalties"]["greedy"], greedy)
        # DSpark's acceptance sees the penalised target rows: the same greedy text.
        self.assertEqual(self.spec["penalties"]["greedy"], greedy)
        self.assertEqual(self.plain["penalties"]["sampled"], sampled)
        self.assertNotEqual(sampled, self.plain["penalties"]["unpenalised_sampled"])

    # n, best_of and batches of prompts.

    def sampled(self, seed, prompt=PROMPT, logprobs=False):
        extra = ["--max-tokens", "10", "--ignore-eos", "--spec-method", "none", "--temperature",
                 "0.9", "--seed", str(seed)] + (["--logprobs", "0"] if logprobs else [])
        return generate(extra, prompt)

    def test_n_samples_use_seed_plus_index(self):
        got = self.plain["n"]
        self.assertEqual([c["index"] for c in got], [0, 1, 2])
        self.assertEqual([c["text"] for c in got],
                         [self.sampled(11 + i)["text"] for i in range(3)])
        self.assertEqual(len(set(c["text"] for c in got)), 3, "seeds should give different text")

    def test_best_of_keeps_the_most_likely_sample(self):
        runs = [self.sampled(11 + i, logprobs=True) for i in range(3)]
        best = max(runs, key=lambda r: sum(t["logprob"] for t in r["logprobs"]))
        self.assertEqual(self.plain["best_of"], [{"index": 0, "text": best["text"]}])

    def test_a_batch_answers_prompt_major(self):
        batch = self.plain["batch"]
        short = PROMPT[:5]
        expected = [self.sampled(11)["text"], self.sampled(12)["text"],
                    self.sampled(11, short)["text"], self.sampled(12, short)["text"]]
        self.assertEqual([c["index"] for c in batch["choices"]], [0, 1, 2, 3])
        self.assertEqual([c["text"] for c in batch["choices"]], expected)
        self.assertEqual(batch["usage"]["prompt_tokens"], len(PROMPT) + len(short))
        self.assertEqual(batch["usage"]["completion_tokens"], 4 * 10)

    def test_chat_n_streams_each_choice_under_its_index(self):
        for run in (self.plain, self.spec):
            chat = run["chat_n"]
            self.assertEqual(chat["streamed"], chat["whole"])
            self.assertNotEqual(chat["whole"][0], chat["whole"][1])


    def test_structured_output_holds_to_the_schema(self):
        expected = generate(["--max-tokens", "120", "--spec-method", "none", "--json-schema",
                             json.dumps(SCHEMA)])["text"]
        for name, run in (("plain", self.plain), ("dspark", self.spec)):
            got = run["structured"]
            self.assertEqual(got["schema"], {"text": expected, "finish_reason": "stop"}, name)
            for text in (got["schema"]["text"], got["chat"]):
                reply = json.loads(text)
                self.assertEqual(set(reply), {"color", "ok", "tags"}, name)
                self.assertIn(reply["color"], ("red", "green", "blue"), name)
                self.assertIsInstance(reply["ok"], bool, name)
                self.assertTrue(all(len(t) <= 6 for t in reply["tags"]), name)
            self.assertIn(got["choice"]["text"], ("alpha", "beta gamma"), name)
            self.assertEqual(got["choice"]["finish_reason"], "stop", name)
            self.assertRegex(got["regex"]["text"], r"^[A-Z]{2}-\d{3}( [a-z]+){0,2}$", name)
            self.assertEqual(got["regex"]["finish_reason"], "stop", name)

    def test_forced_tool_choice_calls_the_tools(self):
        for name, run in (("plain", self.plain), ("dspark", self.spec)):
            named = run["forced_tools"]["named"]
            self.assertEqual(named["finish_reason"], "stop", name)  # as OpenAI's
            self.assertEqual(len(named["calls"]), 1, named)
            self.assertEqual(named["calls"][0]["name"], "get_weather", named)
            self.assertIn(named["calls"][0]["arguments"]["city"], ("Paris", "Rome"), named)
            self.assertTrue(named["calls"][0]["id"].startswith("call_"), named)
            required = run["forced_tools"]["required"]
            self.assertEqual(required["finish_reason"], "tool_calls", required)
            self.assertEqual(len(required["calls"]), 1, required)  # parallel_tool_calls false
            self.assertEqual(run["forced_tools"]["required_streamed"],
                             [{k: c[k] for k in ("name", "arguments")} for c in required["calls"]])
            for call in required["calls"]:
                expected = {"get_weather": {"city"}, "get_time": {"utc"}}[call["name"]]
                self.assertEqual(set(call["arguments"]), expected, required)

    def test_twenty_json_schema_chats_validate_with_dspark(self):
        self.assertEqual(len(self.structured), 20)
        for reply in self.structured:
            self.assertEqual(reply["finish_reason"], "stop", reply)
            doc = json.loads(reply["content"])
            self.assertEqual(set(doc), {"color", "ok", "tags"}, reply)
            self.assertIn(doc["color"], ("red", "green", "blue"), reply)
            self.assertIsInstance(doc["ok"], bool, reply)
            self.assertLessEqual(len(doc["tags"]), 2, reply)
            self.assertTrue(all(isinstance(t, str) and len(t) <= 6 for t in doc["tags"]), reply)
        # They speculated: drafts were accepted while they ran.
        self.assertGreater(self.structured_accepted, 20)
        print("structured-acceptance accepted_tokens=%d" % self.structured_accepted,
              file=sys.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
