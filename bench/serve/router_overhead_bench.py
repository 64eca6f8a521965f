#!/usr/bin/env python3
"""What the router costs: generation throughput of one gRPC client at --concurrency through the
router's pdspark.v1.Inference/Generate (A) against the same client talking straight to the
decode worker's pdspark.v1.DecodeWorker/Generate (B), measured side by side in one run.

One cluster on loopback: a router and one colocated decode worker (--model-dir, by default the
bundled tiny model, DSpark as the worker decides: --spec-method). Every request is the same in
A and B: token-id prompts of --prompt-tokens, --max-tokens, ignore_eos, greedy. A round sends
--requests requests, --concurrency at a time (a closed loop); rounds alternate A B A B after
one unmeasured warm-up round of each. The worker's prefix cache is off unless --prefix-caching,
so a round never reuses another's prompts' state (the same prompts in every round).

Reported (medians over the measured rounds): generated tokens per second (tokens the client
received / round wall time), requests per second, mean time to first token, the ratio
router / direct of tokens per second (1.0 = the router costs nothing), and whether A and B gave
the same tokens for every prompt (greedy).

  /usr/bin/python3 bench/serve/router_overhead_bench.py --bin-dir build/bin \\
      [--model-dir models/tiny-dsv4-dspark --work-dir build/bench] --concurrency 64 \\
      --requests 256 --max-tokens 64 --rounds 3 [--threads 1 --pin-worker 1]

--pin-worker gives the worker CPUs of its own (the router and the client get the rest), as where
the router runs on a host of its own; without it all three share the machine's cores.

Logs go to stderr; one line of JSON figures goes to stdout (and to --work-dir/
router_overhead.json with every round). Needs python3-grpcio, protoc and grpc_python_plugin
(the stubs are generated from proto/ at start)."""

import argparse
import asyncio
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
from cluster import Cluster, grpc_modules, health  # noqa: E402

VOCAB = 4096


def log(message):
    sys.stderr.write("router-overhead: %s\n" % message)
    sys.stderr.flush()


def prompts(args):
    rng = random.Random(args.seed)
    return [[0] + [rng.randrange(2, VOCAB - 1) for _ in range(args.prompt_tokens - 1)]
            for _ in range(args.requests)]


class Target:
    """How one path builds a request and reads a stream."""

    def __init__(self, name, address, mods, args):
        self.name, self.address, self.args = name, address, args
        (self.grpc, self.common_pb2, self.inference_pb2, self.inference_pb2_grpc,
         self.worker_pb2, self.worker_pb2_grpc) = mods
        self.calls = 0

    def sampling(self):
        return self.common_pb2.SamplingParams(temperature=0, max_tokens=self.args.max_tokens,
                                              ignore_eos=True)

    def open(self, channel):
        if self.name == "router":
            stub = self.inference_pb2_grpc.InferenceStub(channel)

            def call(ids):
                return stub.Generate(self.inference_pb2.GenerateRequest(
                    model="m", token_ids=self.inference_pb2.TokenIds(ids=ids),
                    sampling=self.sampling()))
        else:
            stub = self.worker_pb2_grpc.DecodeWorkerStub(channel)

            def call(ids):
                self.calls += 1
                return stub.Generate(self.worker_pb2.WorkerGenerateRequest(
                    context=self.common_pb2.RequestContext(
                        request_id="bench-%d-%d" % (os.getpid(), self.calls)),
                    prompt_token_ids=ids, sampling=self.sampling()))
        return call


async def run_round(target, ids_list, concurrency):
    """{tokens, seconds, ttft_s, errors, outputs} of one closed-loop round."""
    channel = target.grpc.aio.insecure_channel(target.address)
    call = target.open(channel)
    pending = list(range(len(ids_list)))
    outputs = [None] * len(ids_list)
    ttfts, errors = [], []

    async def client():
        while pending:
            i = pending.pop()
            start = time.perf_counter()
            first, tokens = None, []
            try:
                async for response in call(ids_list[i]):
                    if getattr(response, "error", ""):
                        errors.append(response.error)
                    if response.token_ids:
                        if first is None:
                            first = time.perf_counter() - start
                        tokens.extend(response.token_ids)
            except target.grpc.RpcError as e:
                errors.append("%s: %s" % (e.code(), e.details()))
            outputs[i] = tokens
            if first is not None:
                ttfts.append(first)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    await channel.close()
    tokens = sum(len(o) for o in outputs if o)
    return {"tokens": tokens, "seconds": seconds, "ttft_s": statistics.mean(ttfts) if ttfts else 0,
            "errors": errors[:3], "error_count": len(errors), "outputs": outputs}


def pin(worker, router, worker_cpus):
    """Every thread of the worker on `worker_cpus`, the router's and this process's elsewhere."""
    subprocess.run(["taskset", "-a", "-cp", worker_cpus, str(worker.proc.pid)], check=True,
                   stdout=subprocess.DEVNULL)
    taken = set(os.sched_getaffinity(worker.proc.pid))
    others = set(os.sched_getaffinity(0)) - taken
    if not others:
        raise SystemExit("--pin-worker %s leaves no CPU for the router and client" % worker_cpus)
    subprocess.run(["taskset", "-a", "-cp", ",".join(map(str, sorted(others))),
                    str(router.proc.pid)], check=True, stdout=subprocess.DEVNULL)
    os.sched_setaffinity(0, others)
    log("worker on CPUs %s, router and client on %s" % (sorted(taken), sorted(others)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--model-dir", default=os.path.join(SOURCE, "models", "tiny-dsv4-dspark"))
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "build", "bench"))
    ap.add_argument("--source-dir", default=SOURCE)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=256, help="per round")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds of each path")
    ap.add_argument("--threads", type=int, default=0, help="the worker's compute threads")
    ap.add_argument("--spec-method", default="auto", choices=["auto", "dspark", "none"])
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pin-worker", help="CPUs (taskset list) for the decode worker's threads; "
                    "the router and this client get the others: the router's CPU is then not "
                    "taken from the worker, as where the router runs on a host of its own")
    args = ap.parse_args()

    mods = grpc_modules(args.source_dir)
    if mods is None:
        log("python3-grpcio / protoc / grpc_python_plugin not installed")
        return 2
    from pdspark.v1 import worker_pb2, worker_pb2_grpc
    mods = tuple(mods[:4]) + (worker_pb2, worker_pb2_grpc)
    os.makedirs(args.work_dir, exist_ok=True)
    ids_list = prompts(args)

    c = Cluster(args.bin_dir, args.model_dir)
    try:
        router = c.start_router("router", ["--max-queue", str(max(256, 4 * args.concurrency))],
                                heartbeat_ms=1000)
        worker_flags = ["--threads", str(args.threads), "--spec-method", args.spec_method,
                        "--max-num-seqs", str(args.concurrency), "--kv-staging-mb", "0",
                        "--kv-cache-memory-bytes", "2G"]
        if not args.prefix_caching:
            worker_flags.append("--no-enable-prefix-caching")
        worker = c.start_worker("decode", "decode", [router], worker_flags)
        c.wait_ready((lambda: health(router).get("decode_workers") == 1, "router and worker"))
        if args.pin_worker:
            pin(worker, router, args.pin_worker)
        targets = {"router": Target("router", "127.0.0.1:%d" % router.grpc, mods, args),
                   "direct": Target("direct", "127.0.0.1:%d" % worker.grpc, mods, args)}
        rounds = []
        reference = {}
        for r in range(args.rounds + 1):
            for name in ("router", "direct"):
                result = asyncio.run(run_round(targets[name], ids_list, args.concurrency))
                outputs = result.pop("outputs")
                row = {"round": r, "path": name, "warmup": r == 0,
                       "tokens_per_s": result["tokens"] / result["seconds"],
                       "requests_per_s": len(ids_list) / result["seconds"], **result}
                row["same_tokens_as_router"] = None
                if name == "router":
                    reference = outputs
                else:
                    row["same_tokens_as_router"] = sum(1 for a, b in zip(reference, outputs)
                                                       if a == b)
                rounds.append(row)
                log(json.dumps(row))
    finally:
        c.stop_all()

    measured = [r for r in rounds if not r["warmup"]]

    def median(path, key):
        return statistics.median(r[key] for r in measured if r["path"] == path)

    expected = args.requests * args.max_tokens
    binary = os.path.join(args.bin_dir, "pdspark-router")
    with open(binary, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    figures = {
        "router_binary": {"sha256": digest, "mtime": time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.gmtime(os.path.getmtime(binary)))},
        "concurrency": args.concurrency, "requests_per_round": args.requests,
        "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
        "rounds": args.rounds, "spec_method": args.spec_method, "pin_worker": args.pin_worker,
        "router_tokens_per_s": round(median("router", "tokens_per_s"), 1),
        "direct_tokens_per_s": round(median("direct", "tokens_per_s"), 1),
        "router_over_direct": round(median("router", "tokens_per_s") /
                                    median("direct", "tokens_per_s"), 3),
        "router_requests_per_s": round(median("router", "requests_per_s"), 2),
        "direct_requests_per_s": round(median("direct", "requests_per_s"), 2),
        "router_ttft_ms": round(1e3 * median("router", "ttft_s"), 1),
        "direct_ttft_ms": round(1e3 * median("direct", "ttft_s"), 1),
        "errors": sum(r["error_count"] for r in rounds),
        "all_tokens_received": all(r["tokens"] == expected for r in rounds),
        "prompts_with_same_tokens": min(r["same_tokens_as_router"] for r in rounds
                                        if r["path"] == "direct"),
    }
    with open(os.path.join(args.work_dir, "router_overhead.json"), "w") as f:
        json.dump({"figures": figures, "rounds": rounds}, f, indent=1)
    print(json.dumps(figures), flush=True)
    return 0 if figures["errors"] == 0 and figures["all_tokens_received"] else 1


if __name__ == "__main__":
    sys.exit(main())
