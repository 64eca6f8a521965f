"""Network cut between a prefill and a decode worker (docs/reliability.md "Network cut"), with
network namespaces: the router in namespace R, the prefill worker in P, the decode worker in D,
and a veth pair between each two of them. The KV transfer (UCX tcp) is pinned to the P-D pair,
gRPC to the R-P and R-D pairs, so `ip link set ... down` on the P-D pair cuts exactly the KV
path. Every address lives inside the namespaces made here; they are deleted at the end.

With the link down, each request's transfer fails (or stalls until --transfer-timeout-ms), the
router retries it, falling back to prefill on the decode worker, and the client gets the text of
an undisturbed run before its deadline; afterwards neither worker holds anything. With the link
back up, requests take the disaggregated path again.

UCX 1.13 may segfault the prefill worker within seconds of the return of its own link, after it
aborted a transfer across the cut (docs/reliability.md, Known limits). After that cut the test
waits 20 s; a prefill worker that died then of one of UCX's crashes (UCX_CRASHES: a segfault, or
an assertion in its tcp transport) is restarted, as `pdspark launch` or Kubernetes would, and
counted in the figures. Any other death fails the test.

Needs root and permission to create namespaces and veth pairs; exits 77 (CTest: skipped)
where that is refused. The test body runs inside namespace R (re-executed there)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from cluster import Cluster, free_port, health, metric
from reliability_support import assert_nothing_held, completion, parse_args, stubs, worker_metric

ARGS = None
SKIP = 77
DEADLINE_S = 60
# How UCX 1.13 kills the prefill worker after the cut on its side (docs/reliability.md, Known
# limits): the signal and the line UCX's own handler logs for it.
UCX_CRASHES = ((signal.SIGSEGV, r"Caught signal 11 \(Segmentation fault"),
               (signal.SIGABRT, r"tcp_\w+\.c:\d+ +Assertion .* failed"))
NET = "10.231"  # 10.231.1.0/24 R-P, 10.231.2.0/24 R-D, 10.231.3.0/24 P-D: inside our namespaces


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Namespaces:
    """Three namespaces joined by three veth pairs; `delete()` removes all of it."""

    def __init__(self):
        tag = "pds%d" % os.getpid()
        self.r, self.p, self.d = tag + "r", tag + "p", tag + "d"
        self.made = []

    def create(self):
        for ns in (self.r, self.p, self.d):
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        pairs = ((self.r, self.p, 1, "rp", "pr"), (self.r, self.d, 2, "rd", "dr"),
                 (self.p, self.d, 3, "pd", "dp"))
        for a, b, net, ifa, ifb in pairs:
            ip("-n", a, "link", "add", ifa, "type", "veth", "peer", "name", ifb, "netns", b)
            ip("-n", a, "addr", "add", "%s.%d.1/24" % (NET, net), "dev", ifa)
            ip("-n", b, "addr", "add", "%s.%d.2/24" % (NET, net), "dev", ifb)
            ip("-n", a, "link", "set", ifa, "up")
            ip("-n", b, "link", "set", ifb, "up")
        # The kernel reports a veth running a moment later; UCX skips devices that are not.
        self.wait_running([(self.r, "rp"), (self.r, "rd"), (self.p, "pr"), (self.p, "pd"),
                           (self.d, "dr"), (self.d, "dp")])

    @staticmethod
    def wait_running(devices, timeout=10):
        deadline = time.time() + timeout
        while True:
            down = [(ns, dev) for ns, dev in devices
                    if "state UP" not in ip("-n", ns, "link", "show", dev).stdout]
            if not down:
                return
            if time.time() > deadline:
                raise AssertionError("veth devices not running: %s" % down)
            time.sleep(0.1)

    def delete(self):
        for ns in self.made:
            ip("netns", "del", ns, check=False)


def outer():
    """Creates the namespaces (or skips), runs the test inside R, always cleans up."""
    if os.geteuid() != 0 or subprocess.run(["which", "ip"], capture_output=True).returncode:
        print("netcut: needs root and iproute2; skipped")
        return SKIP
    ns = Namespaces()
    try:
        try:
            ns.create()
        except subprocess.CalledProcessError as e:
            print("netcut: cannot create namespaces / veth pairs (%s); skipped" %
                  (e.stderr or "").strip())
            return SKIP
        return subprocess.run(["ip", "netns", "exec", ns.r, sys.executable, __file__, "--inner",
                               ns.p, ns.d] + sys.argv[1:]).returncode
    finally:
        ns.delete()


class NetCutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if stubs(ARGS.source_dir) is None:
            raise unittest.SkipTest("python3-grpcio / protoc / grpc_python_plugin not installed")
        c = cls.cluster = Cluster(ARGS.bin_dir, ARGS.model_dir)
        # The router listens on every address of R (its veth ends and its own loopback).
        cls.router = c.start_router("router", ["--host", "0.0.0.0", "--disagg-min-prompt-tokens",
                                               "1", "--prefill-attempt-timeout-ms", "4000",
                                               "--request-timeout-s", str(DEADLINE_S)])
        cls.prefill = cls.start_prefill("prefill")
        cls.decode = cls.start_in(ARGS.d, "decode", "%s.2.2" % NET, "%s.2.1" % NET, "dp", [])
        c.wait_ready((cls.ready, "prefill and decode workers registered across the veths"))

    @classmethod
    def start_prefill(cls, name):
        """The prefill worker, in P (at start, and again after a crash)."""
        return cls.start_in(ARGS.p, "prefill", "%s.1.2" % NET, "%s.1.1" % NET, "pd",
                            ["--transfer-timeout-ms", "2000"], name=name)

    @classmethod
    def start_in(cls, ns, role, host, router_host, kv_device, extra, name=None):
        """A worker inside namespace `ns`, listening on `host`, its KV pinned to `kv_device`."""
        metrics, grpc = free_port(), free_port()  # free in R; the other namespaces start empty
        p = cls.cluster._start(name or role, "pdspark-" + role, [
            "--model", cls.cluster.model_dir, "--host", host, "--port", str(grpc),
            "--metrics-port", str(metrics), "--router", "%s:%d" % (router_host, cls.router.grpc),
            "--ucx-tls", "tcp", "--ucx-net-devices", kv_device, *extra],
            wrapper=("ip", "netns", "exec", ns))
        p.metrics, p.grpc, p.role, p.host = metrics, grpc, role, host
        return p

    @classmethod
    def ready(cls):
        h = health(cls.router)
        return h.get("prefill_workers") == 1 and h.get("decode_workers") == 1

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop_all()

    def body(self, prompt):
        return {"model": "m", "prompt": prompt, "max_tokens": 24, "temperature": 0,
                "ignore_eos": True}

    def fallbacks(self):
        """Requests the decode worker prefilled: (transfer failed and retried, reserve refused)."""
        return (metric(self.router.http, "pdspark_router_retries_total", 'stage="prefill"'),
                metric(self.router.http, "pdspark_scheduling_decisions_total",
                       'outcome="reserve_refused"'))

    def sent_bytes(self):
        return worker_metric(self.prefill, "pdspark_kv_transfer_bytes_total", 'direction="send"')

    def run_cut(self, ns, device, references, prompts, figures):
        """Takes `device` in namespace `ns` down, sends 6 requests, brings it back up."""
        retried, refused = self.fallbacks()
        ip("-n", ns, "link", "set", device, "down")
        started = time.time()
        for i in range(6):
            s = completion(self.router.http, self.body(prompts[i % 3]))
            figures["sent"] += 1
            self.assertIsNone(s.error, s.error)
            self.assertEqual((s.text, s.usage), (references[i % 3].text, references[i % 3].usage))
            figures["completed"] += 1
        self.assertLess(time.time() - started, 6 * DEADLINE_S)
        # Each one went to the decode worker: its transfer failed and the router retried it
        # there, or, once the decode worker fenced its KV connections and its device has no
        # carrier, its reservation was refused.
        retried, refused = (after - before for after, before in zip(self.fallbacks(),
                                                                    (retried, refused)))
        self.assertEqual(retried + refused, 6)
        figures["retried"] += retried
        figures["reserve_refused"] += refused
        assert_nothing_held(self, ARGS.source_dir, [self.prefill, self.decode])
        ip("-n", ns, "link", "set", device, "up")
        Namespaces.wait_running([(ARGS.p, "pd"), (ARGS.d, "dp")])
        if ns == ARGS.p:
            figures["prefill_restarts"] += self.outlive_ucx_crash_window()
        # With the link back, requests take the disaggregated path again.
        before = self.sent_bytes()
        for i in range(3):
            self.assertEqual(completion(self.router.http, self.body(prompts[i])).text,
                             references[i].text)
        self.assertGreater(self.sent_bytes(), before, "transfers did not resume after the cut")
        return time.time() - started

    def outlive_ucx_crash_window(self, window_s=20):
        """Waits out the window in which UCX 1.13 may crash the prefill worker after the cut on
        its side; restarts it if it died there of one of UCX_CRASHES (1, else 0)."""
        deadline = time.time() + window_s
        while time.time() < deadline and self.prefill.proc.poll() is None:
            time.sleep(0.25)
        code = self.prefill.proc.poll()
        if code is None:
            return 0
        log = self.prefill.tail(40)
        self.assertTrue(any(-code == sig and re.search(line, log) for sig, line in UCX_CRASHES),
                        "the prefill worker died otherwise (%d):\n%s" % (code, log))
        sys.stderr.write("netcut: the prefill worker crashed in UCX 1.13 after the cut (a known "
                         "limit); restarting it. Its log ends:\n%s" % log)
        cls = type(self)
        self.cluster.wait_ready((lambda: health(cls.router).get("prefill_workers") == 0,
                                 "the router to stop counting the dead prefill worker"))
        cls.prefill = cls.start_prefill("prefill-restarted")
        self.cluster.wait_ready((cls.ready, "the restarted prefill worker registered"),
                                (lambda: self.sent_bytes() == 0, "its metrics endpoint"))
        return 1

    def test_cut_link_requests_fall_back_and_nothing_leaks(self):
        prompts = ["ROMEO:", "First Citizen:\nWe are", "KING RICHARD III:\nNow is the winter"]
        before = self.sent_bytes()
        references = [completion(self.router.http, self.body(p)) for p in prompts]
        self.assertGreater(self.sent_bytes(), before, "the warm-up did not go over UCX")
        figures = {"sent": 0, "completed": 0, "failed": 0, "retried": 0, "reserve_refused": 0,
                   "prefill_restarts": 0}
        # Down on the prefill side: no route. A transfer over the connection made before stalls
        # (its packets queue) and is aborted by the stall timer.
        figures["unreachable_phase_s"] = round(self.run_cut(ARGS.p, "pd", references, prompts,
                                                            figures), 2)
        # Down on the decode side only: packets vanish, the transfer stalls until the prefill
        # worker's --transfer-timeout-ms, and the stall is counted as one.
        stalls = worker_metric(self.prefill, "pdspark_kv_transfer_stalls_total")
        figures["stalled_phase_s"] = round(self.run_cut(ARGS.d, "dp", references, prompts,
                                                        figures), 2)
        figures["stalls"] = worker_metric(self.prefill, "pdspark_kv_transfer_stalls_total") - stalls
        figures["transfer_failures"] = worker_metric(self.prefill,
                                                     "pdspark_kv_transfer_failures_total")
        # Before reusing a failed transfer's pages the decode worker closed its KV connections,
        # so nothing retransmitted after the link returned landed in them (the texts above).
        figures["fences"] = worker_metric(self.decode, "pdspark_kv_fences_total")
        print("netcut-figures %s" % json.dumps(figures))
        self.assertGreaterEqual(figures["stalls"], 1)
        self.assertGreaterEqual(figures["fences"], 2)


def main():
    global ARGS
    ARGS, argv = parse_args(
        lambda parser: parser.add_argument("--inner", nargs=2, metavar=("P", "D")))
    if not ARGS.inner:
        sys.exit(outer())
    ARGS.p, ARGS.d = ARGS.inner
    unittest.main(argv=argv, verbosity=2)


if __name__ == "__main__":
    main()
