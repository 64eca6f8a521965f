#!/usr/bin/python3
"""Copy the training corpus from the shared reference folder into tools/train/data/.

Run once by a maintainer (the outputs are committed, so users never need ../shared):
  tinyshakespeare.txt            (1.1 MB, verbatim)
  sharegpt_train.json            training split of the ShareGPT prompts, trimmed to ~1 MB
  sharegpt_heldout_ids.txt       the 500 held-out prompt ids (seeded split), one per line
  sharegpt_heldout.json          the held-out prompts, truncated to 600 chars each (for eval)
"""
import argparse
import json
import os
import random
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared/data")
    ap.add_argument("--out", default=os.path.join(HERE, "data"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--heldout", type=int, default=500)
    ap.add_argument("--train-bytes", type=int, default=1_000_000)
    ap.add_argument("--max-prompt-chars", type=int, default=2000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(os.path.join(args.shared, "tinyshakespeare.txt"), os.path.join(args.out, "tinyshakespeare.txt"))

    data = json.load(open(os.path.join(args.shared, "sharegpt_prompts_2978.json"), encoding="utf-8"))
    items = []
    for d in data:
        text = "\n".join(m["value"] for m in d["conversations"] if m["from"] in ("human", "system"))
        if text.strip():
            items.append({"id": d["id"], "text": text})
    items.sort(key=lambda x: x["id"])
    rng = random.Random(args.seed)
    rng.shuffle(items)
    held, train = items[: args.heldout], items[args.heldout:]
    with open(os.path.join(args.out, "sharegpt_heldout_ids.txt"), "w") as f:
        for it in sorted(held, key=lambda x: x["id"]):
            f.write(it["id"] + "\n")
    with open(os.path.join(args.out, "sharegpt_heldout.json"), "w", encoding="utf-8") as f:
        json.dump([{"id": it["id"], "text": it["text"][:600]} for it in held], f, ensure_ascii=False, indent=0)
    kept, total = [], 0
    for it in train:
        t = it["text"][: args.max_prompt_chars]
        n = len(t.encode("utf-8"))
        if total + n > args.train_bytes:
            break
        kept.append({"id": it["id"], "text": t})
        total += n
    with open(os.path.join(args.out, "sharegpt_train.json"), "w", encoding="utf-8") as f:
        json.dump(kept, f, ensure_ascii=False, indent=0)
    print(f"train prompts kept: {len(kept)} ({total} bytes), held out: {len(held)}")


if __name__ == "__main__":
    main()
