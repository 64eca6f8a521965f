"""Time from prefill end to decode admission, through the real processes: a router, a prefill
worker and a decode worker (DSpark on, so the drafter ring travels too) on loopback, for
prompts of 1k, 8k and 32k tokens on the bundled tiny model, with the prefill worker shipping
the state layer by layer while it computes (--kv-transfer layerwise) and all at once after the
prompt (--kv-transfer whole), measured side by side in one run.

Per request the workers report (Prometheus):
  request = the client's time for a 2-token completion (prefill and transfer included), to show
            what streaming costs the prefill itself on this machine.
  handoff = pdspark_kv_handoff_seconds (decode): the prompt's last layer on the prefill worker
            to the state verified and restored on the decode worker; includes the rest of the
            transfer, the completion notice through the router, and the checksums and restore.
  tail    = pdspark_kv_transfer_tail_seconds (prefill): the prompt's last layer to remote
            completion of everything (what streaming leaves on the critical path).
  copied  = pdspark_kv_copied_bytes_total (both workers): bytes the transfer path copied in
            local memory, next to the bytes put over the network (kv_transfer_bytes, send).
The tiny model's config caps positions at 1024: the bench runs a copy of the model directory
with a larger max_position_embeddings, written under the build directory (symlinks to the
weights), and leaves the committed model alone.

  /usr/bin/python3 bench/kv_handoff_bench.py --bin-dir build/bin --work-dir build/bench

With --baseline-bin-dir (the binaries of another commit, built elsewhere) each mode runs on
the baseline's cluster, then on this one's, and the table puts the two side by side.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from cluster import Cluster, health, http_json, long_context_model, metric  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


TINY_MODEL = os.path.join(SOURCE, "models", "tiny-dsv4-dspark")


def run_mode(args, bin_dir, model, mode, lengths):
    c = Cluster(bin_dir, model)
    try:
        router = c.start_router("router", ["--disagg-min-prompt-tokens", "1",
                                           "--reservation-lease-ms", "1800000",
                                           "--request-timeout-s", "1800",
                                           # a 32k-token prefill takes minutes on a CPU
                                           "--prefill-attempt-timeout-ms", "1800000"])
        tls = ["--ucx-tls", args.ucx_tls]
        prefill = c.start_worker("prefill", "prefill", [router],
                                 tls + ["--kv-transfer", mode, "--transfer-timeout-ms", "600000"])
        decode = c.start_worker("decode", "decode", [router],
                                tls + ["--spec-method", "dspark", "--spec-tokens", "5"])
        c.wait_ready((lambda: health(router).get("prefill_workers") == 1 and
                      health(router).get("decode_workers") == 1, "cluster"))
        results = {}
        for n in lengths:
            prompt = [(i * 131 + 7) % 4000 + 10 for i in range(n)]
            handoffs, tails, totals, requests, copied, sent = [], [], [], [], [], []

            def counters():
                return [metric(decode.metrics, "pdspark_kv_handoff_seconds_sum"),
                        metric(prefill.metrics, "pdspark_kv_transfer_tail_seconds_sum"),
                        metric(prefill.metrics, "pdspark_kv_transfer_seconds_sum"),
                        metric(decode.metrics, "pdspark_kv_handoff_seconds_count"),
                        (metric(prefill.metrics, "pdspark_kv_copied_bytes_total") or 0) +
                        (metric(decode.metrics, "pdspark_kv_copied_bytes_total") or 0),
                        metric(prefill.metrics, "pdspark_kv_transfer_bytes_total",
                               'direction="send"')]
            for _ in range(args.repeats):
                before = counters()
                start = time.time()
                status, body = http_json(router.http, "/v1/completions",
                                         {"model": "m", "prompt": prompt, "max_tokens": 2,
                                          "temperature": 0, "ignore_eos": True}, timeout=1800)
                requests.append(time.time() - start)
                assert status == 200, body
                after = counters()
                assert after[3] == before[3] + 1, "the request did not go over UCX"
                handoffs.append(after[0] - before[0])
                tails.append(after[1] - before[1])
                totals.append(after[2] - before[2])
                copied.append(after[4] - before[4])
                sent.append(after[5] - before[5])
            results[n] = (statistics.median(handoffs), statistics.median(tails),
                          statistics.median(totals), statistics.median(requests),
                          statistics.median(copied), statistics.median(sent))
            sys.stderr.write("%s %d tokens: handoff %.1f ms, tail %.1f ms, transfer %.1f ms\n" % (
                mode, n, 1e3 * results[n][0], 1e3 * results[n][1], 1e3 * results[n][2]))
        return results
    finally:
        c.stop_all()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--baseline-bin-dir", help="another build's binaries, run side by side")
    parser.add_argument("--work-dir", required=True, help="where the long-context model copy goes")
    parser.add_argument("--tokens", default="1024,8192,32768")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ucx-tls", default="tcp")
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    model = long_context_model(TINY_MODEL, args.work_dir, max(lengths) + 1024)
    if args.baseline_bin_dir:
        compare(args, model, lengths)
        return
    modes = {mode: run_mode(args, args.bin_dir, model, mode, lengths)
             for mode in ("layerwise", "whole")}
    print("| prompt tokens | handoff, layer-wise ms | handoff, whole ms | layer-wise / whole | "
          "tail, layer-wise ms | tail, whole ms | request (2 tokens), layer-wise s | "
          "request, whole s | sent MB | copied MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        lw, wh = modes["layerwise"][n], modes["whole"][n]
        print("| %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |" % (
            n, 1e3 * lw[0], 1e3 * wh[0], lw[0] / wh[0], 1e3 * lw[1], 1e3 * wh[1], lw[3], wh[3],
            lw[5] / 1e6, lw[4] / 1e6))


def compare(args, model, lengths):
    """Baseline and this build, each mode on one cluster after the other."""
    runs = {}
    for mode in ("layerwise", "whole"):
        for name, bin_dir in (("baseline", args.baseline_bin_dir), ("this", args.bin_dir)):
            runs[name, mode] = run_mode(args, bin_dir, model, mode, lengths)
    print("| prompt tokens | mode | handoff, baseline ms | handoff, this ms | this / baseline | "
          "request, baseline s | request, this s | sent MB | copied MB, this |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        for mode in ("layerwise", "whole"):
            b, t = runs["baseline", mode][n], runs["this", mode][n]
            print("| %d | %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
                n, mode, 1e3 * b[0], 1e3 * t[0], t[0] / b[0], b[3], t[3], t[5] / 1e6,
                t[4] / 1e6))


if __name__ == "__main__":
    main()
