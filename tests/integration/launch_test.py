"""`pdspark launch` (the README's cluster) keeps serving when a worker dies: it logs the death,
the router fails requests over to the workers left, and the dead worker is started again with
back-off and registers anew. With --restart-workers false the whole cluster stops instead."""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from cluster import free_port, http_json, wait_for

ARGS = None
BODY = {"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0}  # "model": the served path


def decode_pids(grpc_port):
    """The pdspark-decode processes registered with the router on `grpc_port`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"pdspark-decode") and b"127.0.0.1:%d" % grpc_port in argv:
            pids.append(int(pid))
    return pids


class LaunchTest(unittest.TestCase):
    def launch(self, *extra):
        self.http, self.grpc = free_port(), free_port()
        self.run_dir = tempfile.mkdtemp(prefix="pdspark-launch-test-")
        self.stderr = open(os.path.join(self.run_dir, "launch.stderr"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(ARGS.bin_dir, "pdspark"), "launch", "--model", ARGS.model_dir,
             "--prefill", "1", "--decode", "2", "--http-port", str(self.http), "--grpc-port",
             str(self.grpc), "--run-dir", self.run_dir, "--bin-dir", ARGS.bin_dir, *extra],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        ready = self.proc.stdout.readline()
        self.assertIn("cluster ready", ready, self.log())
        self.body = dict(BODY, model=ARGS.model_dir)

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)

    def log(self):
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()

    def test_a_killed_decode_worker_is_restarted_and_the_cluster_keeps_serving(self):
        self.launch()
        status, reference = http_json(self.http, "/v1/completions", self.body)
        self.assertEqual(status, 200, reference)
        victims = decode_pids(self.grpc)
        self.assertEqual(len(victims), 2)
        os.kill(victims[0], signal.SIGKILL)
        # Served by the decode worker left, with the same output.
        for _ in range(3):
            status, again = http_json(self.http, "/v1/completions", self.body)
            self.assertEqual(status, 200, again)
            self.assertEqual(again["choices"][0]["text"], reference["choices"][0]["text"])
        self.assertIsNone(self.proc.poll(), "launch stopped the cluster")
        # Started again and registered: two decode workers once more, the victim not among them.
        wait_for(lambda: http_json(self.http, "/health", timeout=5)[1].get("decode_workers") == 2
                 and len(decode_pids(self.grpc)) == 2 and victims[0] not in decode_pids(self.grpc),
                 timeout=120, what="the decode worker to be restarted and registered")
        self.assertIn("restarting it", self.log())
        status, after = http_json(self.http, "/v1/completions", self.body)
        self.assertEqual(status, 200, after)
        self.assertEqual(after["choices"][0]["text"], reference["choices"][0]["text"])
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(120), 0)

    def test_without_restarts_a_death_stops_the_cluster(self):
        self.launch("--restart-workers", "false")
        os.kill(decode_pids(self.grpc)[0], signal.SIGKILL)
        self.assertEqual(self.proc.wait(120), 1)
        self.assertIn("stopping the cluster", self.log())


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
