#!/usr/bin/env python3
"""The seed reports' serving matrix on a local cluster: DSpark off, --spec-tokens 3, 5, 7 and
auto, each at several client concurrencies, measured with bench/serve/bench_serve.py.

For every spec setting it starts a fresh router + prefill worker + decode worker (KV over UCX,
every prompt disaggregated), runs the ShareGPT benchmark at each concurrency, and writes to
--out-dir:
  sweep.md                    the table (req/s, output tok/s, acceptance length and rate, mean
                              TTFT/TPOT/ITL, speedup of output tok/s against spec off at the
                              same concurrency) with the command and settings
  results.json                every run's bench_serve result
  throughput.png              output tokens/s against concurrency, one line per setting
  acceptance_per_position.png acceptance rate at each draft position, per setting

A --spec-tokens above the drafter's gamma (dspark_block_size) is clamped to gamma, as the seed
reports' "7" is: that row repeats the gamma measurement and says so.

  /usr/bin/python3 bench/sweep/sweep.py --bin-dir build/bin --model models/tiny-dsv4-dspark \\
      --dataset-path ../shared/data/sharegpt_prompts_2978.json --out-dir build/sweep
"""

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import bench_serve  # noqa: E402
from cluster import Cluster, health  # noqa: E402  (real processes on loopback ports)

SMOKE = {"configs": "off,3", "concurrency": "2", "num_prompts": 4, "output_len": 8}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True, help="pdspark-router, -prefill, -decode")
    ap.add_argument("--model", required=True, help="checkpoint directory with a DSpark drafter")
    ap.add_argument("--dataset-path", required=True, help="ShareGPT JSON")
    ap.add_argument("--configs", default="off,3,5,7,auto", help="off, N or auto, comma separated")
    ap.add_argument("--concurrency", default="1,16,64", help="client concurrencies")
    ap.add_argument("--num-prompts", type=int, default=200, help="requests per run")
    ap.add_argument("--output-len", type=int, default=256, help="tokens per request (ignore_eos)")
    ap.add_argument("--max-model-len", type=int, default=1024, help="drop prompt+output over it")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default="build/sweep")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny run for tests: %s" % ", ".join("%s=%s" % kv for kv in SMOKE.items()))
    args = ap.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in args.configs:
        if c not in ("off", "auto") and not c.isdigit():
            ap.error("--configs: %r is not off, auto or a number of draft tokens" % c)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    return args


def drafter_gamma(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return int(json.load(f).get("dspark_block_size", 0))


def decode_flags(config, gamma):
    """(decode worker flags, the setting actually run)."""
    if config == "off":
        return ["--spec-method", "none"], "off"
    if config == "auto":
        return ["--spec-method", "dspark", "--spec-tokens", "auto"], "auto"
    n = min(int(config), gamma)
    return ["--spec-method", "dspark", "--spec-tokens", str(n)], str(n)


def start_cluster(args, flags, label):
    cluster = Cluster(args.bin_dir, args.model)
    router = cluster.start_router("router", ["--disagg-min-prompt-tokens", "1"])
    decode = cluster.start_worker("decode", "decode", [router], flags)
    cluster.start_worker("prefill", "prefill", [router])
    print("[sweep] %s: starting router + prefill + decode (%s)" % (label, " ".join(flags)),
          flush=True)
    cluster.wait_ready((lambda: health(router).get("prefill_workers") == 1 and
                        health(router).get("decode_workers") == 1, "the %s cluster" % label))
    return cluster, router, decode


def run_bench(args, router, decode, label, concurrency, results_dir):
    name = "%s-c%d.json" % (label, concurrency)
    rc = bench_serve.main([
        "--base-url", "http://127.0.0.1:%d" % router.http, "--dataset-path", args.dataset_path,
        "--sharegpt-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts),
        "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", str(args.seed),
        "--max-model-len", str(args.max_model_len),
        "--metrics-url", "http://127.0.0.1:%d/metrics" % decode.metrics,
        "--save-result", "--result-dir", results_dir, "--result-filename", name, "--label", label])
    if rc != 0:
        raise RuntimeError("bench_serve failed for %s at concurrency %d" % (label, concurrency))
    with open(os.path.join(results_dir, name)) as f:
        return json.load(f)


def row_label(config, ran):
    return config if config == ran else "%s (clamped to %s)" % (config, ran)


def table(args, gamma, runs):
    """The markdown table; `runs` maps (config, concurrency) to (setting run, result)."""
    lines = ["| spec | concurrency | req/s | out tok/s | accept length | accept rate | "
             "mean TTFT ms | mean TPOT ms | mean ITL ms | speedup vs off |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in args.concurrency:
        base = runs.get(("off", c))
        for config in args.configs:
            ran, r = runs[(config, c)]
            rate, length = r.get("spec_decode_acceptance_rate"), r.get("spec_decode_acceptance_length")
            speedup = ("%.2fx" % (r["output_throughput"] / base[1]["output_throughput"])
                       if base else "n/a")
            lines.append("| %s | %d | %.2f | %.1f | %s | %s | %.1f | %.1f | %.1f | %s |" % (
                row_label(config, ran), c, r["request_throughput"], r["output_throughput"],
                "%.2f" % length if length else "1.00", "%.2f" % rate if rate is not None else "-",
                r["mean_ttft_ms"], r["mean_tpot_ms"], r["mean_itl_ms"], speedup))
    notes = ["", "%d prompts per run (ShareGPT, seed %d, prompt + output <= %d tokens), %d output "
             "tokens per request with ignore_eos; greedy." % (
                 args.num_prompts, args.seed, args.max_model_len, args.output_len)]
    if any(c.isdigit() and int(c) > gamma for c in args.configs):
        notes.append("--spec-tokens above the drafter's gamma = %d (dspark_block_size) is "
                     "clamped to %d: that row is the same measurement as the %d row." % (
                         gamma, gamma, gamma))
    return "\n".join(lines + notes) + "\n"


def lines(args, runs):
    """One plotted line per setting actually run: [(label, first config)], e.g. "spec 5 (= 7)"."""
    by_setting = {}
    for config in args.configs:
        by_setting.setdefault(runs[(config, args.concurrency[0])][0], []).append(config)
    return [("spec " + ran + ("".join(" (= %s)" % c for c in configs if c != ran)), configs[0])
            for ran, configs in by_setting.items()]


def plot(args, runs, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, config in lines(args, runs):
        ax.plot(args.concurrency, [runs[(config, c)][1]["output_throughput"] for c in args.concurrency],
                marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(args.concurrency, [str(c) for c in args.concurrency])
    ax.set_xlabel("client concurrency")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output throughput against concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=110)
    plt.close(fig)

    spec = [(label, config) for label, config in lines(args, runs) if config != "off"]
    fig, axes = plt.subplots(1, len(args.concurrency), figsize=(4.5 * len(args.concurrency), 4),
                             squeeze=False, sharey=True)
    for ax, c in zip(axes[0], args.concurrency):
        for label, config in spec:
            rates = runs[(config, c)][1].get("spec_decode_per_position_acceptance_rates") or []
            ax.plot(range(1, len(rates) + 1), rates, marker="o", label=label)
        ax.set_title("concurrency %d" % c)
        ax.set_xlabel("draft position")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("accepted / drafts")
    if spec:
        axes[0][0].legend()
    fig.suptitle("DSpark acceptance per draft position (accepted at k / all rounds)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "acceptance_per_position.png"), dpi=110)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    gamma = drafter_gamma(args.model)
    results_dir = os.path.join(args.out_dir, "results")
    shutil.rmtree(results_dir, ignore_errors=True)
    os.makedirs(results_dir)
    settings = {}  # setting actually run -> configs that map to it (7 and 5 share gamma's)
    for config in args.configs:
        flags, ran = decode_flags(config, gamma)
        settings.setdefault(ran, (flags, []))[1].append(config)
    total = len(settings) * len(args.concurrency)
    runs, done, started = {}, 0, time.time()
    for ran, (flags, configs) in settings.items():
        try:
            cluster, router, decode = start_cluster(args, flags, "spec " + ran)
        except AssertionError as e:  # wait_ready printed the logs and stopped the cluster
            print("[sweep] failed: %s" % e, file=sys.stderr)
            return 1
        try:
            for c in args.concurrency:
                done += 1
                print("[sweep %d/%d] spec %s, concurrency %d: %d prompts x %d tokens "
                      "(%.0f s so far)" % (done, total, ran, c, args.num_prompts, args.output_len,
                                           time.time() - started), flush=True)
                result = run_bench(args, router, decode, "spec-" + ran, c, results_dir)
                for config in configs:
                    runs[(config, c)] = (ran, result)
        except (RuntimeError, AssertionError, OSError) as e:
            for p in cluster.procs:
                sys.stderr.write("== %s\n%s" % (p.name, p.tail()))
            cluster.stop_all()
            print("[sweep] failed: %s" % e, file=sys.stderr)
            return 1
        cluster.stop_all()
    md = table(args, gamma, runs)
    with open(os.path.join(args.out_dir, "sweep.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out_dir, "results.json"), "w") as f:
        json.dump([{"config": k[0], "concurrency": k[1], "ran": v[0], "result": v[1]}
                   for k, v in runs.items()], f, indent=1)
    plot(args, runs, args.out_dir)
    print(md)
    print("[sweep] done in %.0f s: %s/{sweep.md,results.json,throughput.png,"
          "acceptance_per_position.png}" % (time.time() - started, args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
