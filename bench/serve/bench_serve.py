#!/usr/bin/env python3
"""`vllm bench serve` semantics against any OpenAI-compatible /v1/completions endpoint, Python 3
standard library only.

  /usr/bin/python3 bench/serve/bench_serve.py --backend openai --base-url http://127.0.0.1:8000 \
      --endpoint /v1/completions --dataset-name sharegpt --dataset-path F --sharegpt-output-len 64 \
      --num-prompts 200 --max-concurrency 16 --request-rate inf --seed 0 --ignore-eos \
      --save-result --result-dir D [--goodput ttft:MS tpot:MS] [--metrics-url URL,...]

As vLLM: ShareGPT entries with >= 2 turns are shuffled with Python's random.seed(seed) (one-turn
entries are accepted too when --sharegpt-output-len is given), pairs with prompt or output < 4
tokens, prompt > 1024 or sum > 2048 are dropped; TTFT = first chunk with choices, ITL = gaps
between chunks with choices, E2EL = last such chunk, TPOT = (E2EL - TTFT) / (output - 1).
Token counts come from the server: prompt lengths from one max_tokens=1 request per candidate
(usage.prompt_tokens; no tokenizer on the client), output lengths from the final usage chunk.
Acceptance rate and length: deltas of the DSpark (pdspark_spec_decode_*) or vLLM
(vllm:spec_decode_*) counters on --metrics-url (default BASE_URL/metrics) before/after the run.
"""
import argparse
import datetime
import http.client
import json
import math
import os
import random
import sys
import threading
import time
import urllib.parse
import urllib.request


def percentile(values, p):  # numpy's default (linear) interpolation
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def mean(v):
    return sum(v) / len(v) if v else 0.0


def std(v):
    if not v:
        return 0.0
    m = mean(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / len(v))


def post(url, body, stream=False, timeout=600):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    conn.request("POST", u.path, json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def prompt_len(args, model, prompt):
    conn, r = post(args.base_url + args.endpoint,
                   {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0})
    try:
        data = json.loads(r.read() or b"{}")
    finally:
        conn.close()
    if r.status != 200:
        return None  # e.g. over the server's context: dropped like an over-long prompt
    return data["usage"]["prompt_tokens"]


def sample_sharegpt(args, model):
    with open(args.dataset_path, encoding="utf-8") as f:
        data = json.load(f)
    min_turns = 1 if args.sharegpt_output_len is not None else 2
    data = [e for e in data if "conversations" in e and len(e["conversations"]) >= min_turns]
    random.seed(args.seed)
    random.shuffle(data)
    samples = []
    for e in data:
        if len(samples) >= args.num_prompts:
            break
        prompt = e["conversations"][0]["value"]
        plen = prompt_len(args, model, prompt)
        if plen is None:
            continue
        if args.sharegpt_output_len is not None:
            olen = args.sharegpt_output_len
        else:
            olen = prompt_len(args, model, e["conversations"][1]["value"])
            if olen is None:
                continue
            olen -= 1  # the server counts the BOS it prepends; a completion has none
        if plen < 4 or (args.sharegpt_output_len is None and olen < 4) or plen > 1024 or plen + olen > 2048:
            continue
        if args.max_model_len and plen + olen > args.max_model_len:
            continue
        samples.append((prompt, plen, olen))
    if samples and len(samples) < args.num_prompts:
        random.seed(args.seed)
        samples += random.choices(samples, k=args.num_prompts - len(samples))
    return samples


class Output:
    def __init__(self, plen):
        self.prompt_len, self.success, self.ttft, self.latency = plen, False, 0.0, 0.0
        self.itl, self.text, self.output_tokens, self.error = [], "", None, ""


def send(args, model, prompt, plen, olen):
    out = Output(plen)
    body = {"model": model, "prompt": prompt, "temperature": args.temperature, "repetition_penalty": 1.0,
            "max_tokens": olen, "logprobs": None, "stream": True, "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    st = time.perf_counter()
    recent = st
    try:
        conn, r = post(args.base_url + args.endpoint, body, stream=True)
        if r.status != 200:
            out.error = "HTTP %d: %s" % (r.status, r.read()[:300].decode(errors="replace"))
            conn.close()
            return out
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            chunk = line[5:].strip()
            if chunk == b"[DONE]":
                break
            data = json.loads(chunk)
            if data.get("error"):
                out.error = json.dumps(data["error"])
                break
            if data.get("choices"):
                ts = time.perf_counter()
                if recent == st:
                    out.ttft = ts - st
                else:
                    out.itl.append(ts - recent)
                recent = ts
                out.text += data["choices"][0].get("text") or ""
            elif data.get("usage"):
                out.output_tokens = data["usage"].get("completion_tokens")
        conn.close()
        if recent != st and not out.error:
            out.success = True
        elif not out.error:
            out.error = "Never received a valid chunk to calculate TTFT."
        out.latency = recent - st
    except Exception as e:  # noqa: BLE001 - reported per request, as vLLM does
        out.error = repr(e)
    return out


def scrape(urls):
    """Sums of the spec-decode counters over every URL: {key: value}, per-position dict."""
    tot = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    pos = {}
    names = {"pdspark_spec_decode_drafts_total": "drafts", "vllm:spec_decode_num_drafts_total": "drafts",
             "pdspark_spec_decode_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "pdspark_spec_decode_accepted_tokens_total": "accepted",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted"}
    per_pos = ("pdspark_spec_decode_accepted_per_position_total",
               "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if not line or line[0] == "#":
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            value = float(line.rsplit(" ", 1)[1])
            if name in names:
                tot[names[name]] += value
            elif name in per_pos and 'position="' in line:
                p = int(line.split('position="', 1)[1].split('"', 1)[0])
                pos[p] = pos.get(p, 0.0) + value
    return tot, pos


class Progress:
    def __init__(self, total, disabled):
        self.total, self.n, self.t0, self.disabled, self.mu = total, 0, time.time(), disabled, threading.Lock()

    def update(self):
        with self.mu:
            self.n += 1
            if self.disabled:
                return
            el = time.time() - self.t0
            bar = "#" * int(30 * self.n / self.total)
            sys.stderr.write("\r%3d%%|%-30s| %d/%d [%.0fs, %.2f it/s]" % (
                100 * self.n / self.total, bar, self.n, self.total, el, self.n / max(el, 1e-9)))
            if self.n == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def run(args, model, samples):
    outputs = [None] * len(samples)
    sem = threading.Semaphore(args.max_concurrency or len(samples) or 1)
    bar = Progress(len(samples), args.disable_tqdm)
    rng = random.Random(args.seed)

    def task(i):
        with sem:
            outputs[i] = send(args, model, *samples[i])
        bar.update()

    threads = []
    start = time.perf_counter()
    for i in range(len(samples)):
        if i and args.request_rate != float("inf"):
            theta = 1.0 / (args.request_rate * args.burstiness)
            time.sleep(rng.gammavariate(args.burstiness, theta))
        t = threading.Thread(target=task, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return outputs, time.perf_counter() - start


def metrics(args, outputs, dur):
    lens, ttfts, tpots, all_tpots, itls, e2els = [], [], [], [], [], []
    completed = total_input = good = 0
    for o in outputs:
        if not o.success:
            lens.append(0)
            continue
        n = o.output_tokens if o.output_tokens else len([x for x in o.itl]) + 1
        lens.append(n)
        total_input += o.prompt_len
        tpot = 0.0
        if n > 1:
            tpot = (o.latency - o.ttft) / (n - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls += o.itl
        ttfts.append(o.ttft)
        e2els.append(o.latency)
        completed += 1
    slo = dict(g.split(":") for g in (args.goodput or []))
    if slo:
        series = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        keys = [k for k in ("ttft", "tpot", "e2el") if k in slo]
        for req in zip(*[series[k] for k in keys]):
            good += all(float(slo[k]) / 1000.0 >= v for k, v in zip(keys, req))
    total_output = sum(lens)
    r = {"duration": dur, "completed": completed, "total_input_tokens": total_input,
         "total_output_tokens": total_output, "request_throughput": completed / dur,
         "request_goodput": good / dur if slo else None, "output_throughput": total_output / dur,
         "total_token_throughput": (total_input + total_output) / dur,
         "input_lens": [o.prompt_len for o in outputs], "output_lens": lens,
         "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
         "generated_texts": [o.text for o in outputs], "errors": [o.error for o in outputs]}
    pcts = [float(p) for p in args.metric_percentiles.split(",")]
    for name, v in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        if name not in args.percentile_metrics.split(","):
            continue
        r["mean_%s_ms" % name] = mean(v) * 1000
        r["median_%s_ms" % name] = percentile(v, 50) * 1000
        r["std_%s_ms" % name] = std(v) * 1000
        for p in pcts:
            r["p%s_%s_ms" % (("%g" % p), name)] = percentile(v, p) * 1000
    return r


def parse_args(argv=None):
    """The options of `vllm bench serve` this client supports (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="openai", choices=["openai", "vllm"])
    ap.add_argument("--base-url")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--endpoint", default="/v1/completions")
    ap.add_argument("--model")
    ap.add_argument("--dataset-name", default="sharegpt", choices=["sharegpt"])
    ap.add_argument("--dataset-path", required=True)
    ap.add_argument("--sharegpt-output-len", type=int)
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--max-concurrency", type=int)
    ap.add_argument("--request-rate", type=float, default=float("inf"))
    ap.add_argument("--burstiness", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--goodput", nargs="+")
    ap.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el")
    ap.add_argument("--metric-percentiles", default="99")
    ap.add_argument("--metrics-url", help="comma-separated /metrics URLs (default BASE_URL/metrics)")
    ap.add_argument("--max-model-len", type=int, help="extra filter: drop prompt+output over this")
    ap.add_argument("--save-result", action="store_true")
    ap.add_argument("--save-detailed", action="store_true")
    ap.add_argument("--result-dir", default=".")
    ap.add_argument("--result-filename")
    ap.add_argument("--label")
    ap.add_argument("--disable-tqdm", action="store_true")
    args = ap.parse_args(argv)
    args.base_url = (args.base_url or "http://%s:%d" % (args.host, args.port)).rstrip("/")
    for g in args.goodput or []:
        k, _, v = g.partition(":")
        if k not in ("ttft", "tpot", "e2el") or not v.replace(".", "", 1).isdigit():
            ap.error("--goodput wants ttft:MS tpot:MS e2el:MS, got %r" % g)
    if not os.path.isfile(args.dataset_path):
        ap.error("--dataset-path %s: no such file" % args.dataset_path)
    return args


def main(argv=None):
    args = parse_args(argv)
    model = args.model
    if not model:
        with urllib.request.urlopen(args.base_url + "/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
    samples = sample_sharegpt(args, model)
    if not samples:
        print("no request passed the dataset filters", file=sys.stderr)
        return 1
    print("Starting initial single prompt test run...")
    test = send(args, model, *samples[0])
    if not test.success:
        print("Initial test run failed: " + test.error, file=sys.stderr)
        return 1
    print("Initial test run completed. Starting main benchmark run...")
    urls = (args.metrics_url or args.base_url + "/metrics").split(",")
    before, pos0 = scrape(urls)
    outputs, dur = run(args, model, samples)
    time.sleep(1.2)  # pdspark workers sample their engine every 0.5 s
    after, pos1 = scrape(urls)
    r = metrics(args, outputs, dur)
    d = {k: after[k] - before[k] for k in after}
    r["spec_decode_num_drafts"] = d["drafts"]
    r["spec_decode_draft_tokens"] = d["draft_tokens"]
    r["spec_decode_accepted_tokens"] = d["accepted"]
    r["spec_decode_acceptance_rate"] = d["accepted"] / d["draft_tokens"] if d["draft_tokens"] else None
    r["spec_decode_acceptance_length"] = 1 + d["accepted"] / d["drafts"] if d["drafts"] else None
    r["spec_decode_per_position_acceptance_rates"] = (
        [(pos1.get(p, 0) - pos0.get(p, 0)) / d["drafts"] for p in sorted(pos1)] if d["drafts"] else [])
    w = "{:<40} {:<10}"
    f = "{:<40} {:<10.2f}"
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(w.format("Successful requests:", r["completed"]))
    print(f.format("Benchmark duration (s):", dur))
    print(w.format("Total input tokens:", r["total_input_tokens"]))
    print(w.format("Total generated tokens:", r["total_output_tokens"]))
    print(f.format("Request throughput (req/s):", r["request_throughput"]))
    if r["request_goodput"] is not None:
        print(f.format("Request goodput (req/s):", r["request_goodput"]))
    print(f.format("Output token throughput (tok/s):", r["output_throughput"]))
    print(f.format("Total Token throughput (tok/s):", r["total_token_throughput"]))
    for name, head in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                       ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency")):
        if "mean_%s_ms" % name not in r:
            continue
        print("{s:{c}^{n}}".format(s=head, n=50, c="-"))
        for k in [k for k in r if k.endswith("_%s_ms" % name) and not k.startswith("std")]:
            print(f.format("%s %s (ms):" % (k.split("_")[0].capitalize().replace("P", "P"), name.upper()), r[k]))
    if r["spec_decode_acceptance_rate"] is not None:
        print("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        print(f.format("Acceptance rate (%):", 100 * r["spec_decode_acceptance_rate"]))
        print(f.format("Acceptance length:", r["spec_decode_acceptance_length"]))
        print(w.format("Drafts:", int(d["drafts"])))
        print(w.format("Draft tokens:", int(d["draft_tokens"])))
        print(w.format("Accepted tokens:", int(d["accepted"])))
    print("=" * 50)
    if args.save_result:
        r.update({"date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": args.backend,
                  "label": args.label, "model_id": model, "tokenizer_id": model + " (server usage)",
                  "num_prompts": args.num_prompts, "request_rate": args.request_rate,
                  "burstiness": args.burstiness, "max_concurrency": args.max_concurrency})
        if not args.save_detailed:
            for k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
                r.pop(k, None)
        conc = "-concurrency%d" % args.max_concurrency if args.max_concurrency else ""
        name = args.result_filename or "%s-%sqps%s-%s-%s.json" % (
            args.backend, args.request_rate, conc, os.path.basename(model.rstrip("/")), r["date"])
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, name), "w") as fp:
            json.dump(r, fp, indent=2)
    return 0 if r["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
