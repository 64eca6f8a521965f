#!/usr/bin/env python3
"""Multi-turn chat replay: what prefix caching and KV-aware routing buy, measured side by side.

Workload: each conversation opens with a long ShareGPT prompt (a task with its document, from
--prompts, 300-1500 tokens) followed by the human turns of a multi-turn ShareGPT conversation
(--conversations). Every turn is sent to /v1/chat/completions with the whole history before it
(the answers the server gave), streamed, greedy, --max-tokens tokens. --concurrency
conversations run at once, each one turn after the other.

Configurations (each a fresh cluster on loopback, started from --bin-dir):
  off         1 decode worker, --no-enable-prefix-caching
  on          1 decode worker, prefix caching on (the default)
  least_loaded / kv_aware
              2 prefill + 2 decode workers, caching on, the router's --policy
  disagg_whole / disagg_suffix
              1 prefill + 1 decode worker, every prompt prefilled on the prefill worker (caching
              on there); the decode worker's cache off (every transfer carries the whole
              prompt's state) or on (a later turn carries only what the decode worker lacks)
Rounds interleave the configurations (A B A B ...). Reported per configuration: mean TTFT of
first turns and of later turns, prompt tokens the workers computed (pdspark_prefill_prompt_
tokens_total) against prompt tokens sent, the prefix-cache hit rate (hit tokens / looked-up
tokens, from the workers' counters), the KV bytes decode workers received (at concurrency 1 also
per first and per later turn) and the prompt tokens whose rows a decode worker already held (and
so were not sent).

  /usr/bin/python3 bench/serve/multiturn_bench.py --bin-dir build/bin --model DIR \\
      [--tokenizer-from models/tiny-dsv4-dspark --work-dir build/bench] \\
      --configs off,on --concurrency 1,16 --conversations-count 32 --rounds 2 [--json OUT]

--tokenizer-from gives a checkpoint without a tokenizer (bench/make_synthetic_model.py's) the
bundled model's tokenizer and chat template: the bench runs a copy of --model under --work-dir
(weights symlinked) with them added.
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
from cluster import Cluster, health, metric  # noqa: E402

SHARED_DATA = os.path.join(SOURCE, "..", "shared", "data")


def with_tokenizer(model, tokenizer_dir, work_dir):
    """A copy of `model` (files symlinked) with tokenizer_dir's tokenizer files."""
    dst = os.path.join(os.path.abspath(work_dir), os.path.basename(os.path.normpath(model)) +
                       "-chat")
    os.makedirs(dst, exist_ok=True)
    for directory, names in ((model, os.listdir(model)),
                             (tokenizer_dir, ["tokenizer.json", "tokenizer_config.json"])):
        for name in names:
            target = os.path.join(dst, name)
            if os.path.lexists(target):
                os.remove(target)
            os.symlink(os.path.abspath(os.path.join(directory, name)), target)
    return dst


def load_workload(args):
    """[(document, [human turn, ...])] for --conversations-count conversations."""
    with open(args.prompts) as f:
        prompts = [c["conversations"][0]["value"] for c in json.load(f)
                   if args.min_doc_chars <= len(c["conversations"][0]["value"]) <= args.max_doc_chars]
    with open(args.conversations) as f:
        chats = [[m["value"] for m in c["conversations"] if m["from"] == "human"]
                 for c in json.load(f)]
    chats = [c for c in chats if len(c) >= 2]
    rng = random.Random(args.seed)
    rng.shuffle(prompts)
    rng.shuffle(chats)
    n = args.conversations_count
    return [(prompts[i % len(prompts)], chats[i % len(chats)]) for i in range(n)]


def stream_chat(port, messages, max_tokens):
    """(ttft seconds, answer text) of one streamed chat completion."""
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError("HTTP %d: %s" % (response.status, response.read()[:300]))
    ttft, text = None, []
    for line in response:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk.get("choices", []):
            content = choice.get("delta", {}).get("content")
            if content:
                if ttft is None:
                    ttft = time.perf_counter() - start
                text.append(content)
    conn.close()
    return ttft if ttft is not None else time.perf_counter() - start, "".join(text)


def replay(port, workload, concurrency, max_tokens, received=None):
    """TTFTs of first turns and of later turns, and (at concurrency 1, with `received`, a
    function giving the KV bytes decode workers received so far) the bytes each turn's transfer
    brought, first turns and later turns apart."""
    first, later = [], []
    turn_bytes = ([], [])
    if concurrency != 1:
        received = None
    lock = threading.Lock()
    queue = list(workload)

    def run_conversations():
        while True:
            with lock:
                if not queue:
                    return
                document, turns = queue.pop()
            messages = []
            for k, turn in enumerate(turns):
                content = document + "\n\n" + turn if k == 0 else turn
                messages.append({"role": "user", "content": content})
                before = received() if received else 0
                ttft, answer = stream_chat(port, messages, max_tokens)
                if received:
                    turn_bytes[k > 0].append(received() - before)
                messages.append({"role": "assistant", "content": answer})
                with lock:
                    (first if k == 0 else later).append(ttft)

    threads = [threading.Thread(target=run_conversations) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return first, later, turn_bytes


COUNTERS = ["pdspark_prefill_prompt_tokens_total", "pdspark_prefix_cache_hits_total",
            "pdspark_prefix_cache_queries_total", "pdspark_kv_transfer_cached_prompt_tokens_total"]
RECEIVED = ("pdspark_kv_transfer_bytes_total", 'direction="receive"')


def counters(workers):
    values = {name: sum(metric(w.metrics, name) for w in workers) for name in COUNTERS}
    values["received"] = sum(metric(w.metrics, *RECEIVED) for w in workers)
    return values


def start_cluster(args, config):
    c = Cluster(args.bin_dir, args.model)
    common = ["--threads", str(args.threads), "--max-num-seqs", "32", "--kv-cache-memory-bytes", "2G"]
    if config in ("off", "on"):
        router = c.start_router("router")
        extra = ["--no-enable-prefix-caching"] if config == "off" else []
        workers = [c.start_worker("decode", "decode", [router], common + extra)]
        ready = lambda: health(router).get("decode_workers") == 1  # noqa: E731
    elif config in ("disagg_whole", "disagg_suffix"):
        router = c.start_router("router", ["--disagg-min-prompt-tokens", "1"])
        extra = ["--no-enable-prefix-caching"] if config == "disagg_whole" else []
        workers = [c.start_worker("prefill", "prefill", [router], common),
                   c.start_worker("decode", "decode", [router], common + extra)]
        ready = lambda: (health(router).get("prefill_workers") == 1 and  # noqa: E731
                         health(router).get("decode_workers") == 1)
    else:
        router = c.start_router("router", ["--policy", config, "--disagg-min-prompt-tokens", "1"])
        workers = [c.start_worker("%s-%d" % (role, i), role, [router], common)
                   for role in ("prefill", "decode") for i in range(2)]
        ready = lambda: (health(router).get("prefill_workers") == 2 and  # noqa: E731
                         health(router).get("decode_workers") == 2)
    c.wait_ready((ready, config + " cluster"))
    return c, router, workers


def run_config(args, config, workload, concurrency):
    cluster, router, workers = start_cluster(args, config)
    try:
        before = counters(workers)
        decode = [w for w in workers if "prefill" not in w.name]
        first, later, turn_bytes = replay(
            router.http, workload, concurrency, args.max_tokens,
            lambda: sum(metric(w.metrics, *RECEIVED) for w in decode))
        time.sleep(1.5)  # the workers export their counters every 500 ms
        after = counters(workers)
    finally:
        cluster.stop_all()
    grown = {name: after[name] - before[name] for name in after}
    queries = grown["pdspark_prefix_cache_queries_total"]
    return {
        "config": config, "concurrency": concurrency,
        "ttft_first_s": statistics.mean(first), "ttft_later_s": statistics.mean(later),
        "turns_first": len(first), "turns_later": len(later),
        "prompt_tokens_computed": grown["pdspark_prefill_prompt_tokens_total"],
        "hit_rate": grown["pdspark_prefix_cache_hits_total"] / queries if queries else 0.0,
        "kv_bytes_received": grown["received"],
        "prompt_tokens_not_sent": grown["pdspark_kv_transfer_cached_prompt_tokens_total"],
        # Per turn at concurrency 1 (0 when not measured).
        "kv_bytes_first_turn": statistics.mean(turn_bytes[0]) if turn_bytes[0] else 0,
        "kv_bytes_later_turn": statistics.mean(turn_bytes[1]) if turn_bytes[1] else 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--tokenizer-from", help="take tokenizer.json and its chat template from here")
    ap.add_argument("--work-dir", default="build/bench")
    ap.add_argument("--prompts", default=os.path.join(SHARED_DATA, "sharegpt_prompts_2978.json"))
    ap.add_argument("--conversations",
                    default=os.path.join(SOURCE, "tests", "data", "sharegpt_multiturn_50.json"))
    ap.add_argument("--configs", default="off,on")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--conversations-count", type=int, default=32)
    ap.add_argument("--min-doc-chars", type=int, default=1200)
    ap.add_argument("--max-doc-chars", type=int, default=6000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every round's figures here")
    args = ap.parse_args()
    if args.tokenizer_from:
        args.model = with_tokenizer(args.model, args.tokenizer_from, args.work_dir)
    workload = load_workload(args)
    results = []
    for concurrency in [int(c) for c in args.concurrency.split(",")]:
        for r in range(args.rounds):
            for config in args.configs.split(","):
                result = run_config(args, config, workload, concurrency)
                result["round"] = r
                results.append(result)
                sys.stderr.write("round %d %s\n" % (r, json.dumps(result)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("| config | concurrency | TTFT turn 1 ms | TTFT turns >= 2 ms | prompt tokens computed "
          "| hit rate | KV MB received | prompt tokens held by decode | KV MB per turn 1 / later "
          "turn |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for concurrency in sorted({r["concurrency"] for r in results}):
        for config in args.configs.split(","):
            rows = [r for r in results if r["config"] == config and r["concurrency"] == concurrency]
            med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
            per_turn = "%.2f / %.2f" % (med("kv_bytes_first_turn") / 1e6,
                                        med("kv_bytes_later_turn") / 1e6) if concurrency == 1 \
                else "-"
            print("| %s | %d | %.0f | %.0f | %.0f | %.2f | %.1f | %.0f | %s |" % (
                config, concurrency, 1e3 * med("ttft_first_s"), 1e3 * med("ttft_later_s"),
                med("prompt_tokens_computed"), med("hit_rate"), med("kv_bytes_received") / 1e6,
                med("prompt_tokens_not_sent"), per_turn))


if __name__ == "__main__":
    main()
