"""The layering of the source tree (README, "Layout") as a test: which top-level folders a
source file may include from. common/ sits below the engine; engine/ knows no RPC, service or
transport; kernels/ are leaves; the router and the two workers talk over the wire only, so none
of them includes another's code.

  python3 tests/layering_test.py SOURCE_DIR
"""

import os
import re
import sys

# folder -> include prefixes its files must not use
FORBIDDEN = {
    "common": ["engine/", "engine_service/", "kernels/", "router/", "prefill_worker/",
               "decode_worker/", "tools/", "bench/"],
    "kernels": ["common/config/", "common/safetensors/", "common/transport/", "common/worker/",
                "engine/", "engine_service/", "router/", "prefill_worker/", "decode_worker/",
                "pdspark/v1/", "grpc"],
    "engine": ["engine_service/", "common/transport/", "common/worker/", "common/security/",
               "router/", "prefill_worker/", "decode_worker/", "tools/", "pdspark/v1/", "grpc",
               "prometheus/"],
    "engine_service": ["router/", "prefill_worker/", "decode_worker/", "tools/"],
    "router": ["engine/", "engine_service/", "kernels/", "prefill_worker/", "decode_worker/"],
    "prefill_worker": ["router/", "decode_worker/"],
    "decode_worker": ["router/", "prefill_worker/"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def violations(source_dir):
    found = []
    for folder, forbidden in FORBIDDEN.items():
        for root, _, files in os.walk(os.path.join(source_dir, folder)):
            for name in files:
                if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for included in INCLUDE.findall(text):
                    for prefix in forbidden:
                        if included.startswith(prefix):
                            found.append("%s includes %s" % (
                                os.path.relpath(path, source_dir), included))
    return found


def main():
    source_dir = sys.argv[1]
    for folder in FORBIDDEN:
        if not os.path.isdir(os.path.join(source_dir, folder)):
            sys.exit("layering: no folder %s under %s" % (folder, source_dir))
    found = violations(source_dir)
    for line in found:
        print(line)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
