"""End-to-end security: a real router, prefill and decode worker with mutual TLS on every gRPC
link (client API, registry, router -> workers), HTTPS on the HTTP API, an API key and the
Registry on its own port. Certificates are made with openssl at test time. Checks that a proper
client is served over the disaggregated path, that clients without a certificate, with a
certificate from another CA, trusting another CA, or without the key are refused, that the
Registry is not reachable through the client port, and that a worker without a certificate
cannot register."""

import argparse
import os
import shutil
import ssl
import sys
import time
import unittest

from cluster import Cluster, free_port, grpc_modules, metric
from security_support import make_certs, request, ssl_context, tls_flags

ARGS = None
KEY = "sk-test-0123456789"
PROMPT = list(range(100, 140))


class MutualTlsClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = make_certs()
        cls.cluster = c = Cluster(ARGS.bin_dir, ARGS.model_dir)
        cls.registry_port = free_port()
        cls.router = c.start_router("router", [
            "--disagg-min-prompt-tokens", "1", "--registry-port", str(cls.registry_port),
            "--api-key", KEY, *tls_flags(cls.certs)])
        router_addr = "127.0.0.1:%d" % cls.registry_port
        cls.workers = {}
        for role in ("decode", "prefill"):
            metrics = free_port()
            p = c._start(role, "pdspark-" + role,
                         ["--model", ARGS.model_dir, "--router", router_addr, "--metrics-port",
                          str(metrics), *tls_flags(cls.certs)])
            p.metrics = metrics
            cls.workers[role] = p
        cls.https = ssl_context(cls.certs, client="client")
        c.wait_ready((lambda: cls.health() == (1, 1), "mTLS cluster ready"))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()
        shutil.rmtree(cls.certs, ignore_errors=True)

    @classmethod
    def health(cls):
        status, body = request(cls.router.http, "/health", scheme="https", context=cls.https,
                               timeout=5)
        return body.get("decode_workers"), body.get("prefill_workers")

    def complete(self, headers, context=None):
        return request(self.router.http, "/v1/completions",
                       {"model": "m", "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True},
                       headers=headers, scheme="https", context=context or self.https)

    def test_https_with_key_is_served_over_the_disaggregated_path(self):
        sent = metric(self.workers["prefill"].metrics, "pdspark_kv_transfer_bytes_total",
                      'direction="send"')
        status, body = self.complete({"Authorization": "Bearer " + KEY})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["usage"]["completion_tokens"], 8)
        self.assertGreater(metric(self.workers["prefill"].metrics,
                                  "pdspark_kv_transfer_bytes_total", 'direction="send"'), sent,
                           "the prompt did not go through the prefill worker")

    def test_http_api_key_is_enforced(self):
        for headers, message in (({}, "provide an API key"),
                                 ({"Authorization": "Bearer wrong"}, "Incorrect API key"),
                                 ({"Authorization": KEY}, "Incorrect API key")):
            status, body = self.complete(headers)
            self.assertEqual(status, 401, (headers, body))
            self.assertEqual(body["error"]["code"], "invalid_api_key")
            self.assertIn(message, body["error"]["message"])
        status, body = request(self.router.http, "/v1/models", scheme="https",
                               context=self.https)
        self.assertEqual(status, 401)
        # Probes and Prometheus need no key.
        status, _ = request(self.router.http, "/metrics", scheme="https", context=self.https)
        self.assertEqual(status, 200)

    def test_https_refuses_clients_without_a_trusted_certificate(self):
        headers = {"Authorization": "Bearer " + KEY}
        for name, ctx in (("no client cert", ssl_context(self.certs)),
                          ("rogue client cert", ssl_context(self.certs, client="rogue-client"))):
            with self.assertRaises((ssl.SSLError, ConnectionError, OSError), msg=name):
                self.complete(headers, context=ctx)
        with self.assertRaises(OSError, msg="client trusting another CA") as caught:
            self.complete(headers, context=ssl_context(self.certs, client="client",
                                                       ca="rogue-ca"))
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(caught.exception))
        with self.assertRaises((ConnectionError, OSError), msg="plain HTTP"):
            request(self.router.http, "/health", timeout=5)

    def grpc_or_skip(self):
        mods = grpc_modules(ARGS.source_dir)
        if mods is None:
            self.skipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        return mods

    def channel(self, grpc, port, client="client", ca="ca"):
        read = lambda n: open(os.path.join(self.certs, n), "rb").read()
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(ca + ".pem"),
            private_key=read(client + ".key") if client else None,
            certificate_chain=read(client + ".pem") if client else None)
        return grpc.secure_channel("127.0.0.1:%d" % port, creds)

    def test_grpc_mtls_and_api_key(self):
        grpc, common_pb2, inference_pb2, inference_pb2_grpc, registry_pb2, registry_pb2_grpc = \
            self.grpc_or_skip()
        request_ = inference_pb2.GenerateRequest(
            model="m", token_ids=inference_pb2.TokenIds(ids=PROMPT),
            sampling=common_pb2.SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
        auth = (("authorization", "Bearer " + KEY),)

        def generate(channel, metadata=auth):
            ids = []
            for r in inference_pb2_grpc.InferenceStub(channel).Generate(request_, timeout=60,
                                                                          metadata=metadata):
                ids.extend(r.token_ids)
            return ids

        good = self.channel(grpc, self.router.grpc)
        self.assertEqual(len(generate(good)), 8)

        def code_of(fn):
            try:
                fn()
            except grpc.RpcError as e:
                return e.code()
            return grpc.StatusCode.OK

        self.assertEqual(code_of(lambda: generate(good, metadata=())),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: generate(good, (("authorization", "Bearer x"),))),
                         grpc.StatusCode.UNAUTHENTICATED)
        stub = inference_pb2_grpc.InferenceStub(good)
        self.assertEqual(code_of(lambda: stub.ListModels(inference_pb2.ListModelsRequest(),
                                                         timeout=10)),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertTrue(stub.Health(inference_pb2.HealthRequest(), timeout=10).serving)
        for name, channel in (
                ("no client cert", self.channel(grpc, self.router.grpc, client=None)),
                ("rogue client cert", self.channel(grpc, self.router.grpc, "rogue-client")),
                ("trusts another CA", self.channel(grpc, self.router.grpc, ca="rogue-ca")),
                ("plaintext", grpc.insecure_channel("127.0.0.1:%d" % self.router.grpc))):
            self.assertEqual(code_of(lambda: generate(channel)), grpc.StatusCode.UNAVAILABLE,
                             name)

        # Admin operations are not on the client port; the registry port wants a certificate.
        register = registry_pb2.RegisterRequest(address="127.0.0.1:1", model_id="x")
        self.assertEqual(
            code_of(lambda: registry_pb2_grpc.RegistryStub(good).Register(
                register, timeout=10, metadata=auth)),
            grpc.StatusCode.UNIMPLEMENTED)
        self.assertEqual(
            code_of(lambda: registry_pb2_grpc.RegistryStub(
                self.channel(grpc, self.registry_port, client=None)).Register(register,
                                                                              timeout=10)),
            grpc.StatusCode.UNAVAILABLE)

    def test_zz_worker_without_a_certificate_cannot_register(self):
        for name, flags in (("plain", []),
                            ("rogue", tls_flags(self.certs, name="rogue-node"))):
            p = self.cluster._start("decode-" + name, "pdspark-decode",
                                    ["--model", ARGS.model_dir, "--router",
                                     "127.0.0.1:%d" % self.registry_port, "--metrics-port",
                                     str(free_port()), *flags])
            time.sleep(3)
            self.assertIsNone(p.proc.poll(), p.tail())
            self.assertEqual(self.health(), (1, 1), name)
            p.stop()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--source-dir", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ARGS, rest = parser.parse_known_args()
    if not shutil.which("openssl"):
        print("openssl not installed: skipping")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
