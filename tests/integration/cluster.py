"""Starts real pdspark processes (router, prefill and decode workers) on loopback ports chosen
at run time, for the integration tests. Standard library only."""

import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


_HANDED_OUT = set()
_RANDOM = random.Random()  # seeded from the OS: two test processes draw different ports


def ephemeral_port_range():
    """The kernel's range for the local ports of outgoing connections (and of binds to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port():
    """A port free now, not handed out before by this process, and outside the kernel's
    ephemeral range. A port from that range (what a bind to port 0 gives) can be taken by any
    process's outgoing connection, a worker's gRPC or UCX link, before the process it is meant
    for binds it: a prefill worker once exited with "cannot listen" that way."""
    low, high = ephemeral_port_range()
    candidates = range(10000, low) if low - 10000 >= 1000 else range(high + 1, 65536)
    for _ in range(1000):
        port = _RANDOM.choice(candidates)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or a socket of it still in TIME_WAIT
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port in %d-%d" % (candidates[0], candidates[-1]))


class Process:
    def __init__(self, name, args, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        crashed = self.crash()
        if crashed:
            sys.stderr.write("== %s %s; its log ends:\n%s" % (self.name, crashed, self.tail(40)))
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def crash(self):
        """How the process ended by itself, if it did with an error (an exit code, or a fatal
        signal other than the SIGTERM and SIGKILL the tests send); None otherwise. Said before
        stopping it, so that a crash a test saw only as a reset connection has its log printed
        (CTest shows it when the test fails)."""
        code = self.proc.poll()
        if not code or -code in (signal.SIGTERM, signal.SIGKILL):
            return None
        return "exited with %d" % code if code > 0 else "died of %s" % signal.Signals(-code).name

    def tail(self, n=20):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])


class Cluster:
    """router(s) + workers; call start_*(), then wait_ready(); always stop_all()."""

    def __init__(self, bin_dir, model_dir):
        self.bin_dir = bin_dir
        self.model_dir = model_dir
        self.log_dir = tempfile.mkdtemp(prefix="pdspark-it-")
        self.procs = []

    def _start(self, name, binary, args, wrapper=()):
        """`wrapper`: a command that runs the binary (`ip netns exec NS`)."""
        p = Process(name, [*wrapper, os.path.join(self.bin_dir, binary)] + args, self.log_dir)
        self.procs.append(p)
        return p

    def start_router(self, name, extra=(), http=None, grpc=None, heartbeat_ms=200):
        """`http`/`grpc`: fixed ports (a restarted router), else free ones."""
        http, grpc = http or free_port(), grpc or free_port()
        p = self._start(name, "pdspark-router",
                        ["--model", self.model_dir, "--http-port", str(http), "--grpc-port",
                         str(grpc), "--heartbeat-interval-ms", str(heartbeat_ms),
                         "--served-model-name", "m", *extra])
        p.http, p.grpc = http, grpc
        return p

    def start_worker(self, name, role, routers, extra=()):
        metrics, grpc = free_port(), free_port()
        p = self._start(name, "pdspark-" + role,
                        ["--model", self.model_dir, "--router",
                         ",".join("127.0.0.1:%d" % r.grpc for r in routers),
                         "--metrics-port", str(metrics), "--port", str(grpc), *extra])
        p.metrics, p.grpc, p.role = metrics, grpc, role
        return p

    def wait_ready(self, *checks):
        """Waits for each (predicate, what); on a timeout prints every process's log tail,
        stops the cluster and re-raises."""
        try:
            for predicate, what in checks:
                wait_for(predicate, what=what)
        except AssertionError:
            for p in self.procs:
                sys.stderr.write("== %s\n%s" % (p.name, p.tail()))
            self.stop_all()
            raise

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop()
        if os.environ.get("PDSPARK_KEEP_LOGS"):
            sys.stderr.write("logs kept in %s\n" % self.log_dir)
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def long_context_model(src, dst_root, positions):
    """A copy of the model in `src` (files symlinked) whose config.json allows `positions`
    positions, as `dst_root`/<name>-<positions>; reused when it is already there."""
    dst = os.path.join(os.path.abspath(dst_root),
                       "%s-%d" % (os.path.basename(os.path.normpath(src)), positions))
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        target = os.path.join(dst, name)
        if name == "config.json":
            with open(os.path.join(src, name)) as f:
                config = json.load(f)
            config["max_position_embeddings"] = positions
            with open(target, "w") as f:
                json.dump(config, f, indent=2)
        elif not os.path.exists(target):
            os.symlink(os.path.abspath(os.path.join(src, name)), target)
    return dst


def request_worst_case(bin_dir, model_dir, max_model_len, extra=()):
    """The KV pool bytes one --max-model-len request leases on a decode worker (started with
    `extra`): what the worker reports when a 256 KiB pool cannot hold it."""
    out = subprocess.run([os.path.join(bin_dir, "pdspark-decode"), "--model", model_dir,
                          "--port", "0", "--kv-staging-mb", "0", "--max-model-len",
                          str(max_model_len), "--kv-cache-memory-bytes", "256K", *extra],
                         capture_output=True, text=True, timeout=300)
    found = re.search(r"needs (\d+) bytes", out.stderr)
    if not found:
        raise AssertionError("no cache size in the decode worker's refusal:\n" + out.stderr[-2000:])
    return int(found.group(1))


def http_json(port, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def http_text(port, path, timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.read().decode()


def metric(port, name, labels=""):
    """Sum of the samples of `name` whose label set contains `labels` (e.g. 'direction="send"')."""
    total = 0.0
    for line in http_text(port, "/metrics").splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(predicate, timeout=120, what="condition", poll=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if predicate():
                return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(poll)
    raise AssertionError("timed out waiting for " + what)


def health(router):
    status, body = http_json(router.http, "/health", timeout=5)
    return body


def grpc_modules(source_dir):
    """(grpc, common_pb2, inference_pb2, inference_pb2_grpc, registry_pb2, registry_pb2_grpc) or
    None when python3-grpcio / protoc / grpc_python_plugin is missing."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        return None
    plugin = shutil.which("grpc_python_plugin")
    if not plugin or not shutil.which("protoc"):
        return None
    proto_dir = os.path.join(source_dir, "proto")
    stubs = tempfile.mkdtemp(prefix="pdspark-stubs-")
    subprocess.run(["protoc", "--proto_path=" + proto_dir, "--python_out=" + stubs,
                    "--grpc_python_out=" + stubs, "--plugin=protoc-gen-grpc_python=" + plugin]
                   + glob.glob(os.path.join(proto_dir, "pdspark", "v1", "*.proto")), check=True)
    for d in ("pdspark", "pdspark/v1"):
        open(os.path.join(stubs, d, "__init__.py"), "a").close()
    sys.path.insert(0, stubs)
    import grpc
    from pdspark.v1 import (common_pb2, inference_pb2, inference_pb2_grpc, registry_pb2,
                            registry_pb2_grpc)
    return grpc, common_pb2, inference_pb2, inference_pb2_grpc, registry_pb2, registry_pb2_grpc
