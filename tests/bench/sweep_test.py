#!/usr/bin/env python3
"""bench/sweep/sweep.py --smoke on a real local cluster with the bundled tiny model (spec off and
--spec-tokens 3, one concurrency, 4 prompts x 8 tokens): the table has both rows with numbers
taken from the runs, spec off is the 1.00x baseline, the trained drafter shows acceptance, and
both plots are written as PNGs.

usage: sweep_test.py BIN_DIR MODEL_DIR SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BIN_DIR, MODEL_DIR, SOURCE_DIR = sys.argv[1:4]
PROMPTS = ["ROMEO:\nWhat light through yonder window breaks", "JULIET:\nO Romeo, Romeo,",
           "First Citizen:\nBefore we proceed any further,", "KING RICHARD III:\nNow is the winter"]


class SweepSmokeTest(unittest.TestCase):
    def test_smoke_sweep_writes_table_and_plots(self):
        out = tempfile.mkdtemp(prefix="pdspark-sweep-")
        self.addCleanup(shutil.rmtree, out, True)
        data = os.path.join(out, "prompts.json")
        with open(data, "w") as f:
            json.dump([{"id": str(i), "conversations": [{"from": "human", "value": p}]}
                       for i, p in enumerate(PROMPTS)], f)
        run = subprocess.run(
            [sys.executable, os.path.join(SOURCE_DIR, "bench", "sweep", "sweep.py"), "--smoke",
             "--bin-dir", BIN_DIR, "--model", MODEL_DIR, "--dataset-path", data, "--out-dir", out],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
        self.assertIn("[sweep 1/2] spec off, concurrency 2", run.stdout)  # progress lines
        self.assertIn("[sweep 2/2] spec 3, concurrency 2", run.stdout)
        with open(os.path.join(out, "sweep.md")) as f:
            rows = [line.split("|")[1:-1] for line in f if re.match(r"\| (off|3) \|", line)]
        self.assertEqual([r[0].strip() for r in rows], ["off", "3"])
        with open(os.path.join(out, "results.json")) as f:
            results = {(r["config"], r["concurrency"]): r["result"] for r in json.load(f)}
        for row in rows:
            config = row[0].strip()
            r = results[(config, 2)]
            self.assertEqual(r["completed"], 4)
            self.assertEqual(r["total_output_tokens"], 4 * 8)
            self.assertEqual(float(row[3]), round(r["output_throughput"], 1))
        off, spec = rows
        self.assertEqual(off[9].strip(), "1.00x")
        self.assertEqual(off[4].strip(), "1.00")  # no drafts: acceptance length 1
        self.assertGreater(float(spec[4]), 1.2, "the trained drafter should be accepted")
        self.assertGreater(float(spec[5]), 0.0)
        for png in ("throughput.png", "acceptance_per_position.png"):
            with open(os.path.join(out, png), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
