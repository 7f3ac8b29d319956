"""The compile's cost in numbers and words (Note [Compile trace] in engine/runtime/spans.py): the record's spans
summed per stage, per pass and per kernel, with the compile cache's part (hits, and what they saved). Reads the
typed record only; the CLI prints cost_lines, the app and the offline report draw cost_rows."""
from __future__ import annotations

from engine.record import Exploration


def compile_cost(record: Exploration) -> dict:
    """Seconds per stage (own time, `timings`), per pass (summed over graphs), per graph's build (whether the
    cache had its kernels, the build's seconds, the remembered cold build and what the cache saved), and per
    kernel its first launch's build and autotuning where the runtime did them."""
    passes: dict[str, float] = {}
    builds, per_kernel = [], []
    for entry in record.trace:
        if entry.cat != "pass":
            continue
        passes[entry.name] = passes.get(entry.name, 0.0) + entry.dur_s
        kernel = entry.args.get("kernel")  # a span's args are its own free-form notes
        if kernel:  # a kernel's own build or autotuning at its first launch
            per_kernel.append({"kernel": kernel, "what": entry.name, "seconds": entry.dur_s, "graph": entry.graph})
        if entry.name == "compile and load kernels":
            args = entry.args
            builds.append({"graph": entry.graph, "seconds": entry.dur_s, "cache_hit": args.get("cache_hit"),
                           "cold_s": args.get("cold_s"), "saved_s": args.get("saved_s"),
                           "language": args.get("language"), "kernels": args.get("kernels")})
    timings = dict(record.timings)
    return {"stages": timings, "total_s": sum(v for k, v in timings.items() if k != "profile"),
            "passes": passes,
            "builds": builds, "kernels": per_kernel, "cache_hits": sum(1 for b in builds if b["cache_hit"]),
            "saved_s": sum(b["saved_s"] or 0.0 for b in builds)}


def cost_lines(cost: dict) -> list[str]:
    """compile_cost in words, for the CLI."""
    stages = ", ".join(f"{name} {seconds:.3f}s" for name, seconds in cost["stages"].items() if name != "profile")
    passes = ", ".join(f"{name} {seconds * 1e3:.1f}ms" for name, seconds in
                       sorted(cost["passes"].items(), key=lambda item: -item[1]))
    lines = [f"Compile cost: {cost['total_s']:.3f}s ({stages})", f"  passes: {passes or 'none'}"]
    for build in cost["builds"]:
        cached = "cache hit" if build["cache_hit"] else "cold build (cache miss)"
        saved = f", the cold build took {build['cold_s']:.3f}s: saved {build['saved_s']:.3f}s" \
            if build["cache_hit"] and build.get("cold_s") is not None else ""
        lines.append(f"  graph {build['graph']}: {build['kernels']} {build['language']} kernel(s) built in "
                     f"{build['seconds'] * 1e3:.1f}ms, {cached}{saved}")
    for item in sorted(cost.get("kernels") or [], key=lambda k: -k["seconds"])[:10]:
        lines.append(f"  {item['kernel']}: {item['what']} {item['seconds'] * 1e3:.1f}ms")
    if cost["builds"]:
        hits = cost["cache_hits"]
        lines.append(f"  cache: {hits} of {len(cost['builds'])} graph build(s) warm"
                     + (f", saving {cost['saved_s']:.3f}s against their cold builds" if cost["saved_s"] else ""))
    return lines


def cost_rows(cost: dict) -> list[dict]:
    """compile_cost as table rows: each stage's own seconds, then each pass and kernel step, longest first."""
    rows = [{"what": name, "kind": "stage", "seconds": seconds} for name, seconds in cost["stages"].items()
            if name != "profile"]
    rows += [{"what": name, "kind": "pass", "seconds": seconds}
             for name, seconds in sorted(cost["passes"].items(), key=lambda item: -item[1])]
    rows += [{"what": f"{item['kernel']}: {item['what']}", "kind": "kernel", "seconds": item["seconds"]}
             for item in sorted(cost.get("kernels") or [], key=lambda k: -k["seconds"])]
    for build in cost["builds"]:
        warm = "cache hit" + (f", saved {build['saved_s']:.3f} s of a {build['cold_s']:.3f} s cold build"
                              if build.get("saved_s") is not None else "") if build["cache_hit"] else "cold build"
        rows.append({"what": f"graph {build['graph']} build: {build['kernels']} {build['language']} kernel(s), {warm}",
                     "kind": "cache", "seconds": build["seconds"]})
    return rows
