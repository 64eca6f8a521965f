"""DSpark under structured output: decode tokens/s and acceptance length of a json_schema
completion next to the same completion unconstrained, without speculation, with DSpark at a
fixed 4 drafts and with auto, on the bundled tiny model, through `pdspark generate` (the engine
the workers run). The runs alternate configuration by configuration, `--repeats` rounds, and
the table gives each one's median. The schema lets a completion run on (an array of unbounded
strings), so every run decodes --max-tokens tokens and the masks cost what a long structured
answer costs.

  /usr/bin/python3 bench/structured_spec_bench.py --bin-dir build/bin
"""

import argparse
import json
import os
import statistics
import subprocess

SCHEMA = {"type": "object", "properties": {"notes": {"type": "array",
                                                      "items": {"type": "string"}}},
          "required": ["notes"], "additionalProperties": False}
SPECS = {"none": ["--spec-method", "none"],
         "dspark-4": ["--spec-method", "dspark", "--spec-tokens", "4"],
         "dspark-auto": ["--spec-method", "dspark", "--spec-tokens", "auto"]}
CONSTRAINTS = {"free": [], "json_schema": ["--json-schema", json.dumps(SCHEMA)]}


def run(args, spec, constraint):
    cmd = [os.path.join(args.bin_dir, "pdspark"), "generate", "--model", args.model_dir,
           "--prompt", "KING RICHARD III:\nNow is the winter", "--max-tokens",
           str(args.max_tokens), "--ignore-eos", "--json", *SPECS[spec], *CONSTRAINTS[constraint]]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return out["timing"]["decode_tokens_per_s"], out.get("acceptance_length"), out["text"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", default="build/bin")
    parser.add_argument("--model-dir", default="models/tiny-dsv4-dspark")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = {(s, c): [] for s in SPECS for c in CONSTRAINTS}
    for _ in range(args.repeats):
        for key in results:
            results[key].append(run(args, *key))
    print("%-12s %-12s %10s %10s %12s" % ("spec", "constraint", "tok/s", "accept", "vs none"))
    for (spec, constraint), runs in results.items():
        tps = statistics.median(r[0] for r in runs)
        base = statistics.median(r[0] for r in results[("none", constraint)])
        accept = ("%.2f" % statistics.median(r[1] for r in runs)) if spec != "none" else "-"
        print("%-12s %-12s %10.1f %10s %11.2fx" % (spec, constraint, tps, accept, tps / base))
    # Greedy: every configuration writes the same text, so the masks kept DSpark lossless.
    for constraint in CONSTRAINTS:
        texts = {results[(s, constraint)][0][2] for s in SPECS}
        print("%s: %s" % (constraint, "same text in every configuration" if len(texts) == 1
                          else "TEXTS DIFFER"))


if __name__ == "__main__":
    main()
