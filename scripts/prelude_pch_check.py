"""Build generated C++ units twice, plain and with the precompiled prelude (Note [Precompiled prelude] in
engine/runtime/build.py), each into a fresh cache of its own: the time of every build, and whether the two
libraries are the same bytes. The two builds of a unit run back to back, in alternating order, so a change in
the machine's load falls on both.

    python scripts/prelude_pch_check.py OUT_DIR SOURCE.cpp... [--limit N]

Only the sources that start with today's prelude (engine/codegen/cpp/prelude.h) are taken. Writes
OUT_DIR/results.jsonl (one line per unit) and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.codegen.cpp.module import PRELUDE  # noqa: E402
from engine.runtime import build  # noqa: E402


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=0)
    args = parser.parse_args()
    sources = [s for s in sorted(args.sources) if s.read_text().startswith(PRELUDE)]
    if args.limit:
        sources = sources[: args.limit]
    plain_cache, pch_cache = args.out / "plain", args.out / "pch"
    os.environ.pop("GLASSBOX_PCH_DIR", None)
    print(f"{len(sources)} units; load average at the start {_load()}", flush=True)

    os.environ["GLASSBOX_CACHE_DIR"] = str(pch_cache)
    start = time.perf_counter()
    assert build.precompiled_prelude(PRELUDE) is not None, "no precompiled prelude could be built"
    pch_seconds = time.perf_counter() - start
    print(f"precompiling the prelude: {pch_seconds:.2f} s", flush=True)

    results = []
    with open(args.out / "results.jsonl", "w") as out:
        for number, path in enumerate(sources):
            source = path.read_text()
            times = {}
            for kind in (("plain", "pch") if number % 2 == 0 else ("pch", "plain")):
                os.environ["GLASSBOX_CACHE_DIR"] = str(plain_cache if kind == "plain" else pch_cache)
                start = time.perf_counter()
                library, hit = build.build_library(source, prelude=PRELUDE if kind == "pch" else "")
                times[kind] = (time.perf_counter() - start, library, hit)
            same = times["plain"][1].read_bytes() == times["pch"][1].read_bytes()
            row = {"source": path.name, "lines": source.count("\n"), "plain_s": round(times["plain"][0], 4),
                   "pch_s": round(times["pch"][0], 4), "identical": same,
                   "hits": [times["plain"][2], times["pch"][2]]}
            results.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            if not same or number % 50 == 0:
                print(number, row, f"load {_load()}", flush=True)

    built = [r for r in results if r["hits"] == [False, False]]
    plain = [r["plain_s"] for r in built]
    pch = [r["pch_s"] for r in built]
    print(f"load average at the end {_load()}")
    print(f"units {len(results)}, built both ways {len(built)}, identical {sum(r['identical'] for r in results)}")
    if built:
        print(f"plain: total {sum(plain):.1f} s, median {statistics.median(plain):.3f} s")
        print(f"pch:   total {sum(pch):.1f} s, median {statistics.median(pch):.3f} s "
              f"(+ {pch_seconds:.2f} s once to precompile)")
        print(f"speedup of the total {sum(plain) / sum(pch):.2f}x")


if __name__ == "__main__":
    main()
