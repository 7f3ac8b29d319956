"""The compile's cost in numbers and words (Note [Compile trace] in engine/runtime/spans.py): the record's spans
summed per stage, per pass and per kernel, with the compile cache's part (hits, and what they saved). Reads the
typed record only; the CLI prints cost_lines, the app and the offline report draw cost_rows."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.record import Exploration


@dataclass
class BuildCost:
    """One graph's build of its kernels (the span "compile and load kernels"): whether the compile cache had
    them and, when it did, the cold build it remembers and what that saved."""
    graph: int | None
    seconds: float
    cache_hit: bool | None
    cold_s: float | None
    saved_s: float | None
    language: str | None
    kernels: int | None


@dataclass
class KernelStep:
    """A kernel's own build or autotuning at its first launch."""
    kernel: str
    what: str
    seconds: float
    graph: int | None


@dataclass
class CompileCost:
    stages: dict[str, float]  # own seconds per stage (`timings`)
    total_s: float
    passes: dict[str, float] = field(default_factory=dict)  # summed over graphs
    builds: list[BuildCost] = field(default_factory=list)
    kernels: list[KernelStep] = field(default_factory=list)

    @property
    def cache_hits(self) -> int:
        return sum(1 for b in self.builds if b.cache_hit)

    @property
    def saved_s(self) -> float:
        return sum(b.saved_s or 0.0 for b in self.builds)


def compile_cost(record: Exploration) -> CompileCost:
    """Seconds per stage (own time, `timings`), per pass (summed over graphs), per graph's build (whether the
    cache had its kernels, the build's seconds, the remembered cold build and what the cache saved), and per
    kernel its first launch's build and autotuning where the runtime did them."""
    timings = dict(record.timings)
    cost = CompileCost(stages=timings, total_s=sum(v for k, v in timings.items() if k != "profile"))
    for entry in record.trace:
        if entry.cat != "pass":
            continue
        cost.passes[entry.name] = cost.passes.get(entry.name, 0.0) + entry.dur_s
        notes = dict.fromkeys(("kernel", "cache_hit", "cold_s", "saved_s", "language", "kernels")) | entry.args
        if notes["kernel"]:  # a span's args are its own free-form notes (engine/runtime/spans.py)
            cost.kernels.append(KernelStep(notes["kernel"], entry.name, entry.dur_s, entry.graph))
        if entry.name == "compile and load kernels":
            cost.builds.append(BuildCost(entry.graph, entry.dur_s, notes["cache_hit"], notes["cold_s"],
                                         notes["saved_s"], notes["language"], notes["kernels"]))
    return cost


def cost_lines(cost: CompileCost) -> list[str]:
    """compile_cost in words, for the CLI."""
    stages = ", ".join(f"{name} {seconds:.3f}s" for name, seconds in cost.stages.items() if name != "profile")
    passes = ", ".join(f"{name} {seconds * 1e3:.1f}ms" for name, seconds in
                       sorted(cost.passes.items(), key=lambda item: -item[1]))
    lines = [f"Compile cost: {cost.total_s:.3f}s ({stages})", f"  passes: {passes or 'none'}"]
    for build in cost.builds:
        cached = "cache hit" if build.cache_hit else "cold build (cache miss)"
        saved = f", the cold build took {build.cold_s:.3f}s: saved {build.saved_s:.3f}s" \
            if build.cache_hit and build.cold_s is not None else ""
        lines.append(f"  graph {build.graph}: {build.kernels} {build.language} kernel(s) built in "
                     f"{build.seconds * 1e3:.1f}ms, {cached}{saved}")
    for item in sorted(cost.kernels, key=lambda k: -k.seconds)[:10]:
        lines.append(f"  {item.kernel}: {item.what} {item.seconds * 1e3:.1f}ms")
    if cost.builds:
        lines.append(f"  cache: {cost.cache_hits} of {len(cost.builds)} graph build(s) warm"
                     + (f", saving {cost.saved_s:.3f}s against their cold builds" if cost.saved_s else ""))
    return lines


def build_words(build: BuildCost, digits: int = 3) -> str:
    """A graph's build, warm or cold, in words."""
    if not build.cache_hit:
        return "cold build"
    return "cache hit" + (f", saved {build.saved_s:.{digits}f} s of a {build.cold_s:.{digits}f} s cold build"
                          if build.saved_s is not None else "")


def cost_rows(cost: CompileCost) -> list[dict]:
    """compile_cost as table rows: each stage's own seconds, then each pass and kernel step, longest first."""
    rows = [{"what": name, "kind": "stage", "seconds": seconds} for name, seconds in cost.stages.items()
            if name != "profile"]
    rows += [{"what": name, "kind": "pass", "seconds": seconds}
             for name, seconds in sorted(cost.passes.items(), key=lambda item: -item[1])]
    rows += [{"what": f"{item.kernel}: {item.what}", "kind": "kernel", "seconds": item.seconds}
             for item in sorted(cost.kernels, key=lambda k: -k.seconds)]
    for build in cost.builds:
        rows.append({"what": f"graph {build.graph} build: {build.kernels} {build.language} kernel(s), "
                             f"{build_words(build)}", "kind": "cache", "seconds": build.seconds})
    return rows
