"""Bad input end to end, against a running router + prefill + decode cluster: each malformed or
out-of-range request, over HTTP and gRPC, gets a precise error (HTTP 4xx with an OpenAI-style
body naming the parameter; gRPC INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED), and the
cluster keeps serving the same output afterwards with nothing held. The parsing rules
themselves are unit-tested in tests/router/openai_protocol_test.cc; this proves the whole path
(HTTP server, router, workers) including the checks only the workers can make (token ids
outside the vocabulary).

Prints `bad-input-figures {json}` with the number of inputs tried."""

import http.client
import json
import unittest

from cluster import Cluster, health, http_json
from reliability_support import assert_nothing_held, completion, parse_args, stubs

ARGS = None
MAX_BODY = 65536
MAX_LEN = 1024  # the bundled model's max_position_embeddings
GOOD = {"model": "m", "prompt": "ROMEO:", "max_tokens": 16, "temperature": 0}


def raw_post(port, path, data, content_type="application/json"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, data, {"Content-Type": content_type})
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {"raw": raw.decode(errors="replace")}


def with_(**fields):
    body = dict(GOOD)
    for k, v in fields.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body).encode()


# (name, path, raw body, HTTP status, error param, error code); param/code None = not checked.
HTTP_CASES = [
    ("malformed_json", "/v1/completions", b'{"prompt": "x",', 400, None, "invalid_json"),
    ("not_json_at_all", "/v1/completions", b"prompt=x", 400, None, "invalid_json"),
    ("empty_body", "/v1/completions", b"", 400, None, None),
    ("json_array", "/v1/completions", b"[1, 2]", 400, None, None),
    ("deep_nesting", "/v1/completions", b"[" * 10000 + b"]" * 10000, 400, None, "invalid_json"),
    ("invalid_utf8", "/v1/completions", b'{"prompt": "\xff\xfe\xfd"}', 400, None, "invalid_utf8"),
    ("number_overflow", "/v1/completions", b'{"prompt": "x", "temperature": 1e999}', 400, None,
     "invalid_json"),
    ("prompt_wrong_type", "/v1/completions", with_(prompt=5), 400, "prompt", None),
    ("prompt_object", "/v1/completions", with_(prompt={"a": 1}), 400, "prompt", None),
    ("max_tokens_string", "/v1/completions", with_(max_tokens="5"), 400, "max_tokens", None),
    ("max_tokens_float", "/v1/completions", with_(max_tokens=2.5), 400, "max_tokens", None),
    ("max_tokens_zero", "/v1/completions", with_(max_tokens=0), 400, "max_tokens", None),
    ("max_tokens_negative", "/v1/completions", with_(max_tokens=-1), 400, "max_tokens", None),
    ("max_tokens_huge", "/v1/completions", with_(max_tokens=10**9), 400, "max_tokens",
     "context_length_exceeded"),
    ("max_tokens_over_uint32", "/v1/completions", with_(max_tokens=2**40), 400, "max_tokens",
     None),
    ("prompt_over_model_length", "/v1/completions", with_(prompt=[5] * (MAX_LEN + 10)), 400,
     "prompt", "context_length_exceeded"),
    ("prompt_text_over_model_length", "/v1/completions", with_(prompt="ab" * MAX_LEN), 400,
     "prompt", "context_length_exceeded"),
    ("empty_prompt", "/v1/completions", with_(prompt=""), 400, "prompt", None),
    ("empty_token_list", "/v1/completions", with_(prompt=[]), 400, "prompt", None),
    ("prompt_missing", "/v1/completions", with_(prompt=None), 400, "prompt", None),
    ("negative_token_id", "/v1/completions", with_(prompt=[1, -3]), 400, "prompt", None),
    ("token_id_outside_vocab", "/v1/completions", with_(prompt=[0, 5, 2**31 - 1]), 400, None,
     None),
    ("negative_temperature", "/v1/completions", with_(temperature=-0.5), 400, "temperature",
     None),
    ("temperature_nan", "/v1/completions", with_(temperature="NaN"), 400, "temperature", None),
    ("top_p_above_1", "/v1/completions", with_(top_p=1.5), 400, "top_p", None),
    ("top_p_zero", "/v1/completions", with_(top_p=0), 400, "top_p", None),
    ("top_k_negative", "/v1/completions", with_(top_k=-7), 400, "top_k", None),
    ("min_p_above_1", "/v1/completions", with_(min_p=3), 400, "min_p", None),
    ("unknown_model", "/v1/completions", with_(model="gpt-17"), 404, "model", "model_not_found"),
    ("too_many_stop_strings", "/v1/completions", with_(stop=["s%d" % i for i in range(33)]),
     400, "stop", None),
    ("stop_wrong_type", "/v1/completions", with_(stop=7), 400, "stop", None),
    ("n_above_limit", "/v1/completions", with_(n=129), 400, "n", None),
    ("best_of_below_n", "/v1/completions", with_(n=3, best_of=2), 400, "best_of", None),
    ("logprobs_above_20", "/v1/completions", with_(logprobs=21), 400, "logprobs", None),
    ("logit_bias_outside_vocab", "/v1/completions", with_(logit_bias={str(2**31): 1}), 400,
     "logit_bias", None),
    ("presence_penalty_above_2", "/v1/completions", with_(presence_penalty=3), 400,
     "presence_penalty", None),
    ("response_format", "/v1/completions",
     with_(response_format={"type": "json_schema", "json_schema": {
         "name": "n", "schema": {"type": "string", "format": "date"}}}), 400,
     "response_format", "invalid_value"),
    ("guided_grammar", "/v1/completions", with_(guided_grammar="root ::= x"), 400,
     "guided_grammar", "unsupported_parameter"),
    ("stream_wrong_type", "/v1/completions", with_(stream="yes"), 400, "stream", None),
    ("huge_body", "/v1/completions",
     json.dumps({"prompt": "x" * (MAX_BODY + 1)}).encode(), 413, None, "request_too_large"),
    ("chat_messages_not_list", "/v1/chat/completions",
     json.dumps({"model": "m", "messages": "hi"}).encode(), 400, "messages", None),
    ("chat_bad_role", "/v1/chat/completions",
     json.dumps({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}).encode(), 400,
     "messages[0].role", None),
    ("chat_empty_messages", "/v1/chat/completions",
     json.dumps({"model": "m", "messages": []}).encode(), 400, "messages", None),
]


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        cls.router = c.start_router("router", ["--disagg-min-prompt-tokens", "1",
                                               "--max-request-bytes", str(MAX_BODY)])
        cls.workers = [c.start_worker("prefill", "prefill", [cls.router]),
                       c.start_worker("decode", "decode", [cls.router])]
        c.wait_ready((lambda: health(cls.router).get("prefill_workers") == 1 and
                      health(cls.router).get("decode_workers") == 1, "cluster"))
        cls.reference = completion(cls.router.http, GOOD)
        cls.tried = 0

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()
        print("bad-input-figures %s" % json.dumps({"tried": cls.tried}))

    def assert_still_serving(self):
        self.assertIsNone(self.router.proc.poll(), "the router died")
        for w in self.workers:
            self.assertIsNone(w.proc.poll(), "%s died" % w.name)
        again = completion(self.router.http, GOOD)
        self.assertEqual((again.text, again.usage), (self.reference.text, self.reference.usage))

    def test_http_bad_inputs_get_openai_errors(self):
        for name, path, data, status, param, code in HTTP_CASES:
            with self.subTest(name):
                got, body = raw_post(self.router.http, path, data)
                type(self).tried += 1
                self.assertEqual(got, status, body)
                error = body.get("error")
                self.assertIsInstance(error, dict, body)
                self.assertTrue(error.get("message"), body)
                self.assertIn(error.get("type"), ("invalid_request_error", "not_found_error"),
                              body)
                if param is not None:
                    self.assertEqual(error.get("param"), param, body)
                if code is not None:
                    self.assertEqual(error.get("code"), code, body)
        self.assert_still_serving()
        assert_nothing_held(self, ARGS.source_dir, self.workers)

    def test_truncated_body_gets_an_error_response(self):
        # The client announces more bytes than it sends and stops sending: once the read times
        # out the router answers 400 with an OpenAI-style body saying so (it said "HTTP error
        # 400"). A client that also half-closes its side still gets nothing: Debian's
        # cpp-httplib 0.11 takes a half-closed socket for a dead one and writes no response
        # (docs/api.md, known limits).
        import socket
        s = socket.create_connection(("127.0.0.1", self.router.http), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: router\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n" + with_()[:20])
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        type(self).tried += 1
        self.assertTrue(data.startswith(b"HTTP/1.1 400"), data[:300])
        error = json.loads(data.split(b"\r\n\r\n", 1)[1])["error"]
        self.assertEqual(error["type"], "invalid_request_error", error)
        self.assertEqual(error["code"], "incomplete_request", error)
        self.assertIn("Content-Length", error["message"])
        self.assert_still_serving()

    def test_unknown_fields_are_ignored_as_vllm_does(self):
        # docs/api.md: unknown fields are accepted and ignored (newer OpenAI clients send them).
        type(self).tried += 1
        status, body = http_json(self.router.http, "/v1/completions",
                                 dict(GOOD, frobnicate=True, user="u", metadata={"k": "v"}))
        self.assertEqual(status, 200, body)
        self.assertEqual(body["choices"][0]["text"], self.reference.text)

    def test_grpc_bad_inputs_get_precise_codes(self):
        mods = stubs(ARGS.source_dir)
        if mods is None:
            self.skipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        grpc, _, _, common_pb2, inference_pb2, inference_pb2_grpc = mods
        channel = grpc.insecure_channel("127.0.0.1:%d" % self.router.grpc,
                                        options=[("grpc.max_send_message_length", 1 << 24)])
        stub = inference_pb2_grpc.InferenceStub(channel)
        S = common_pb2.SamplingParams
        ids = inference_pb2.TokenIds
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        cases = [
            ("negative_temperature", dict(text="hi", sampling=S(temperature=-1)), invalid),
            ("top_p_above_1", dict(text="hi", sampling=S(top_p=1.5)), invalid),
            ("min_p_above_1", dict(text="hi", sampling=S(min_p=2)), invalid),
            ("top_k_below_minus_1", dict(text="hi", sampling=S(top_k=-9)), invalid),
            ("empty_token_ids", dict(token_ids=ids(ids=[])), invalid),
            ("token_id_over_int32", dict(token_ids=ids(ids=[0, 4000000000]),
                                         sampling=S(max_tokens=4)), invalid),
            ("token_id_outside_vocab", dict(token_ids=ids(ids=[0, 5000]),
                                            sampling=S(max_tokens=4)), invalid),
            ("stop_token_id_over_int32", dict(text="hi", sampling=S(stop_token_ids=[2**32 - 1])),
             invalid),
            ("prompt_over_model_length", dict(token_ids=ids(ids=[5] * (MAX_LEN + 1))), invalid),
            ("max_tokens_huge", dict(text="hi", sampling=S(max_tokens=2**32 - 1)), invalid),
            ("too_many_stop_strings",
             dict(text="hi", sampling=S(stop=["s%d" % i for i in range(33)])), invalid),
            ("unknown_model", dict(model="gpt-17", text="hi"), grpc.StatusCode.NOT_FOUND),
            ("huge_message", dict(text="x" * (MAX_BODY * 4)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        ]
        for name, fields, code in cases:
            with self.subTest(name):
                type(self).tried += 1
                with self.assertRaises(grpc.RpcError) as caught:
                    for _ in stub.Generate(inference_pb2.GenerateRequest(**fields), timeout=60):
                        pass
                self.assertEqual(caught.exception.code(), code, caught.exception.details())
                self.assertTrue(caught.exception.details())
        # A request whose `text` is not UTF-8 (protobuf strings must be): hand-encoded bytes.
        # The router parses the bytes itself and says what is wrong (the gRPC library alone
        # would answer UNIMPLEMENTED on the callback API, INTERNAL on the synchronous one).
        type(self).tried += 1
        generate = channel.unary_stream("/pdspark.v1.Inference/Generate",
                                        request_serializer=lambda raw: raw,
                                        response_deserializer=lambda raw: raw)
        with self.assertRaises(grpc.RpcError) as caught:
            for _ in generate(b"\x1a\x03\xff\xfe\xfd", timeout=60):  # field 3: text
                pass
        self.assertEqual(caught.exception.code(), invalid, caught.exception.details())
        self.assertIn("UTF-8", caught.exception.details())
        self.assert_still_serving()
        assert_nothing_held(self, ARGS.source_dir, self.workers)


def main():
    global ARGS
    ARGS, argv = parse_args()
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
