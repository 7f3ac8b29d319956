"""What-if: two explorations of one model under two settings, and their differences.

    python -m engine compare FILE_OR_SAMPLE --a KEY=VALUE... --b KEY=VALUE... [--json]

A side is a list of KEY=VALUE settings over the defaults (C++ on the CPU, static shapes, fusion on):
backend=cpp|triton, device=cpu|cuda, dynamic=true|false, mode=default|reduce-overhead|max-autotune,
fusion=on|off, max_nodes=N (at most N IR nodes in one kernel), compiler=glassbox|inductor (the side is real
Inductor), file=PATH (another model file: before vs after an edit). Both sides are explored with the
per-kernel profile on, so the comparison carries their times.

Note [Matching kernels across two compiles]
Kernel names (kernel_0, ...) are positions, not identities: switching fusion off renumbers everything. A kernel
is identified by the ATen nodes it computes (its aten_origins; FX nodes where it has none): the ATen graph is
the same for both sides when the model is (one FX node, softmax, decomposes into several ATen nodes, so FX
nodes alone cannot tell its kernels apart). Two kernels that compute the same nodes are "the same" when they
are of one kind and their code is the same but for numbered names (buf3, kernel_2); otherwise they are
"changed", and say how (a GEMM template in A, a library call in B; its code differs, as after an edit). A
kernel of B that computes what several kernels of A computed is a merge of those, the reverse a split; of the
rest, a kernel of A and one of B that share nodes are "changed" too (the same addmm alone in A and with its
epilogue in B), paired by the most nodes shared; what is left was added or removed. The code diff folds each
side's shared helpers (the module's prelude) into one line, so it opens on the kernels.
Inductor's kernels carry no FX origins, so against an Inductor side only the counts and names are compared.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import options
from engine.options import BOOLEANS
from engine.runtime.timing import Timing, ratio

COMPILERS = ("glassbox", "inductor")
# KEY -> the option it sets (engine/options.py, Note [One option set]); compiler and file are compare's own
OPTION_KEYS = options.by_compare_key()
KEYS = {**{key: options.compare_description(name) for key, name in OPTION_KEYS.items()},
        "compiler": ", ".join(COMPILERS), "file": "a model file or sample name"}


class SettingError(ValueError):
    """A KEY=VALUE the compare cannot use; the message names the valid keys or values."""


@dataclass(frozen=True)
class Side:
    backend: str = "cpp"
    device: str = "cpu"
    dynamic: bool = False
    mode: str = "default"
    fusion: bool = True
    max_nodes: int | None = None
    compiler: str = "glassbox"
    file: str | None = None
    templates: str = "auto"  # GEMM templates (Note [GEMM templates])
    rewrites: str = "default"  # graph rewrites (Note [Rewrite stage]): engine.rewrite.resolve's setting
    freezing: bool = False  # parameters and buffers as constants (Note [Freezing])
    partition: str | None = None  # the training partition (engine/options.py); unset: the default

    def label(self) -> str:
        defaults = Side()
        changed = [f"{f.name}={_text(f.name, getattr(self, f.name))}" for f in dataclasses.fields(self)
                   if getattr(self, f.name) != getattr(defaults, f.name)]
        return ", ".join(changed) or "defaults"


def _text(key: str, value) -> str:
    if key == "file":  # its name: the path is where a worker put it, not what the user wrote
        return Path(value).name
    if isinstance(value, bool):
        on_off = key in OPTION_KEYS and options.infos()[OPTION_KEYS[key]].on_off
        return ("on" if value else "off") if on_off else ("true" if value else "false")
    return str(value)


def _choice(key: str, value: str, choices) -> str:
    if value not in choices:
        raise SettingError(f"{key}={value!r} is not valid: {key} is one of {', '.join(choices)}")
    return value


def parse_side(settings: list[str]) -> Side:
    """["backend=triton", "fusion=off"] -> Side; a SettingError names the valid keys or values."""
    values: dict[str, Any] = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip()
        if not equals or not key:
            raise SettingError(f"{setting!r} is not KEY=VALUE; keys: {', '.join(KEYS)}")
        if key not in KEYS:
            raise SettingError(f"unknown key {key!r}; valid keys: " +
                               "; ".join(f"{k} ({v})" for k, v in KEYS.items()))
        name = OPTION_KEYS.get(key)
        info = options.infos().get(name)
        if key == "compiler":
            values[key] = _choice(key, value.lower(), COMPILERS)
        elif key == "file":  # another model file: compare's own key, no option of the compiler
            values[key] = value
        elif info is not None and info.choices is not None:
            values[key] = _choice(key, value.lower(), info.choices)
        elif name == "dynamic" or isinstance(options.default(name), bool):
            if value.lower() not in BOOLEANS:
                raise SettingError(f"{key}={value!r} is not valid: {key} is one of {KEYS[key]}")
            values[key] = BOOLEANS[value.lower()]
        elif name == "rewrites":
            from engine.rewrite import resolve
            try:
                resolve(value)
            except ValueError as error:
                raise SettingError(f"rewrites={value!r} is not valid: {error}") from error
            values[key] = value
        elif name == "max_fused_nodes":
            if not value.isdigit() or int(value) < 1:
                raise SettingError(f"max_nodes={value!r} is not valid: max_nodes is {KEYS[key]}")
            values[key] = int(value)
        else:
            values[key] = value
    return Side(**values)


# --- running one side ----------------------------------------------------------------------------------------


def explore_side(spec, side: Side, profile: bool = True) -> dict:
    """The record of one side: a Glassbox exploration, or for compiler=inductor the Inductor reference shaped
    like one (kernels with names, code per graph). A failing side is a record with `errors`."""
    import torch

    import engine

    model, inputs = spec.model, tuple(spec.example_inputs)
    if side.device != "cpu":
        model = model.to(side.device) if isinstance(model, torch.nn.Module) else model
        inputs = tuple(x.to(side.device) if isinstance(x, torch.Tensor) else x for x in inputs)
    if side.compiler == "inductor":
        return _inductor_side(spec, model, inputs, profile)
    try:
        settings = {name: getattr(side, key) for key, name in OPTION_KEYS.items()}
        settings["dynamic"] = True if side.dynamic else None  # off: as Dynamo decides, as explore's default
        exploration = engine.explore(
            model, inputs, name=spec.name, source={"filename": spec.filename, "text": spec.source},
            description=spec.description, tolerance=spec.tolerance, profile=profile, **settings)
    except Exception as error:  # noqa: BLE001 - a failing side is part of the comparison, not its end
        return {"model": spec.name, "graphs": [], "errors": [{"stage": "compile",
                                                              "message": f"{type(error).__name__}: {error}"}]}
    return exploration.to_json()


def _inductor_side(spec, model, inputs, profile: bool) -> dict:
    from engine.record import to_plain
    from engine.reference import inductor_reference

    try:
        reference = to_plain(inductor_reference(model, inputs, profile=profile))
    except Exception as error:  # noqa: BLE001
        return {"model": spec.name, "graphs": [], "errors": [{"stage": "inductor",
                                                              "message": f"{type(error).__name__}: {error}"}]}
    times = {t["name"]: t["time_ms"] for t in reference.get("kernel_times") or []}
    kernels = [{"name": k["name"], "kind": "inductor", "fx_origins": [], "time_ms": times.get(k["name"])}
               for k in reference.get("kernels") or []]
    graphs = [{"index": i, "kernels": kernels if i == 0 else [], "code": {"language": "inductor", "source": code}}
              for i, code in enumerate(reference.get("code") or [])]
    # its profile times its own kernels only (Note [Inductor's kernel times]): with library calls, their sum is
    # no time per call, and compare says so instead of a speedup
    return {"model": spec.name, "backend": "inductor", "graphs": graphs, "verify": reference.get("verify") or {},
            "errors": [], "inductor": True, "untimed_calls": list(reference.get("extern_calls") or [])}


# --- the differences -----------------------------------------------------------------------------------------


def _kernels(record: dict) -> list[dict]:
    return [k for g in record.get("graphs") or [] for k in g.get("kernels") or []]


def kernel_diff(a: dict, b: dict) -> dict:
    """Note [Matching kernels across two compiles]: same, merged, split, added and removed kernels."""
    ka, kb = _kernels(a), _kernels(b)
    result: dict[str, Any] = {"count": [len(ka), len(kb)], "same": [], "merged": [], "split": [], "added": [],
                              "removed": []}
    if a.get("inductor") or b.get("inductor"):
        names_a, names_b = {k["name"] for k in ka}, {k["name"] for k in kb}
        result["added"] = [{"b": n} for n in sorted(names_b - names_a)]
        result["removed"] = [{"a": n} for n in sorted(names_a - names_b)]
        result["same"] = [{"a": n, "b": n} for n in sorted(names_a & names_b)]
        return result
    origins = lambda k: frozenset(k.get("aten_origins") or k.get("fx_origins") or [k["name"]])  # noqa: E731
    used_a, used_b = set(), set()
    result["changed"] = []
    for x in ka:
        for y in kb:
            if origins(x) == origins(y) and y["name"] not in used_b:
                how = _how_it_differs(x, y)  # the same nodes, computed another way: changed, not the same
                pair = {"a": x["name"], "b": y["name"], "ops": sorted(origins(x))}
                result["changed" if how else "same"].append({**pair, "only_a": [], "only_b": [], "how": how}
                                                            if how else pair)
                used_a.add(x["name"])
                used_b.add(y["name"])
                break
    for many, one, many_side, one_side, key in ((ka, kb, "a", "b", "merged"), (kb, ka, "b", "a", "split")):
        used_many, used_one = (used_a, used_b) if many_side == "a" else (used_b, used_a)
        for big in one:
            if big["name"] in used_one:
                continue
            parts = [k for k in many if k["name"] not in used_many and origins(k) and origins(k) <= origins(big)]
            covered = frozenset().union(*(origins(k) for k in parts)) if parts else frozenset()
            if len(parts) >= 2 and covered == origins(big):
                result[key].append({many_side: [k["name"] for k in parts], one_side: big["name"],
                                    "ops": sorted(covered)})
                used_one.add(big["name"])
                used_many.update(k["name"] for k in parts)
    # what is left and overlaps pairs up as "changed": the same addmm alone in A, with its epilogue in B
    for x in ka:
        if x["name"] in used_a:
            continue
        overlaps = [(len(origins(x) & origins(y)), y) for y in kb if y["name"] not in used_b and origins(x) & origins(y)]
        if overlaps:
            _, y = max(overlaps, key=lambda pair: pair[0])
            only_a, only_b = sorted(origins(x) - origins(y)), sorted(origins(y) - origins(x))
            result["changed"].append({"a": x["name"], "b": y["name"], "ops": sorted(origins(x) & origins(y)),
                                      "only_a": only_a, "only_b": only_b, "how": _more_nodes(only_a, only_b)})
            used_a.add(x["name"])
            used_b.add(y["name"])
    result["removed"] = [{"a": k["name"], "ops": sorted(origins(k))} for k in ka if k["name"] not in used_a]
    result["added"] = [{"b": k["name"], "ops": sorted(origins(k))} for k in kb if k["name"] not in used_b]
    return result


KIND_WORDS = {"extern": "a library call", "template": "a GEMM template", "fallback": "an eager fallback",
              "pointwise": "a pointwise kernel", "reduction": "a reduction kernel"}
# the names a kernel's source holds that number things, not say what it computes (renumbered by any change)
NUMBERED = re.compile(r"\b(buf|kernel_|template_|extern_|fallback_)\d+\b")


def _how_it_differs(x: dict, y: dict) -> str:
    """Why two kernels that compute the same nodes are not the same: their kind, or their code (its numbered
    names aside); "" when neither differs."""
    if x.get("kind") != y.get("kind"):
        return (f"{KIND_WORDS.get(x.get('kind'), x.get('kind'))} in A, "
                f"{KIND_WORDS.get(y.get('kind'), y.get('kind'))} in B")
    if NUMBERED.sub(r"\1#", x.get("source") or "") != NUMBERED.sub(r"\1#", y.get("source") or ""):
        return "its code differs"
    return ""


def _more_nodes(only_a: list[str], only_b: list[str]) -> str:
    more = lambda nodes: f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""  # noqa: E731
    parts = [f"{side} also computes {', '.join(nodes[:3])}{more(nodes)}"
             for side, nodes in (("A", only_a), ("B", only_b)) if nodes]
    return "; ".join(parts)


def code_diff(a: dict, b: dict, label_a: str = "a", label_b: str = "b") -> str:
    """A unified diff of the generated code, graph by graph (kernels, then the wrapper)."""
    def text(record: dict) -> list[str]:
        lines = []
        for graph in record.get("graphs") or []:
            code = graph.get("code") or {}
            source = (code.get("source") or "").splitlines()
            helpers = code.get("prelude_lines") or 0  # the shared helpers: one line, changed or not
            lines.append(f"# ---- graph {graph.get('index', '?')} ({code.get('language', '?')})")
            if helpers:
                digest = hashlib.sha256("\n".join(source[:helpers]).encode()).hexdigest()[:12]
                lines.append(f"# ({helpers} lines of shared helpers folded, content {digest})")
            lines += source[helpers:]
            if code.get("wrapper"):
                lines.append(f"# ---- graph {graph.get('index', '?')} wrapper")
                lines += code["wrapper"].splitlines()
        return lines
    return "\n".join(difflib.unified_diff(text(a), text(b), fromfile=label_a, tofile=label_b, lineterm=""))


def total_ms(record: dict) -> float | None:
    """The model's time per call: the graphs' profiled call times, or the sum of kernel times (Inductor)."""
    calls = [(g.get("profile") or {}).get("call_ms") for g in record.get("graphs") or []]
    if calls and all(isinstance(c, (int, float)) for c in calls):
        return sum(calls)
    if record.get("untimed_calls"):  # Inductor's library calls are not in its kernel times
        return None
    times = [k.get("time_ms") for k in _kernels(record)]
    return sum(times) if times and all(isinstance(t, (int, float)) for t in times) else None


def total_spread_ms(record: dict) -> float | None:
    """The spread of total_ms: the graphs' calls' interquartile ranges, summed (None without a profile)."""
    spreads = [(g.get("profile") or {}).get("call_iqr_ms") for g in record.get("graphs") or []]
    return sum(spreads) if spreads and all(isinstance(v, (int, float)) for v in spreads) else None


@dataclass
class Comparison:
    a: Side
    b: Side
    record_a: dict
    record_b: dict
    kernels: dict = field(default_factory=dict)
    code_diff: str = ""
    timing: dict = field(default_factory=dict)

    def to_json(self, records: bool = True) -> dict:
        document = {
            "a": {"settings": dataclasses.asdict(self.a), "label": self.a.label()},
            "b": {"settings": dataclasses.asdict(self.b), "label": self.b.label()},
            "kernels": self.kernels, "code_diff": self.code_diff, "timing": self.timing,
            "errors": {"a": self.record_a.get("errors") or [], "b": self.record_b.get("errors") or []},
            "verify": {"a": (self.record_a.get("verify") or {}).get("ok"),
                       "b": (self.record_b.get("verify") or {}).get("ok")},
        }
        if records:
            document["a"]["record"], document["b"]["record"] = self.record_a, self.record_b
        return document


def compare_records(a: Side, b: Side, record_a: dict, record_b: dict) -> Comparison:
    ms_a, ms_b = total_ms(record_a), total_ms(record_b)
    spread_a, spread_b = total_spread_ms(record_a), total_spread_ms(record_b)
    timing = {"a_ms": ms_a, "b_ms": ms_b, "a_iqr_ms": spread_a, "b_iqr_ms": spread_b,
              "speedup_b_over_a": ms_a / ms_b if ms_a and ms_b else None,
              "convention": "speedup = time of A / time of B: above 1, B is faster",
              "untimed": _untimed(record_a, "A") or _untimed(record_b, "B")}
    if ms_a and ms_b and spread_a is not None and spread_b is not None:  # Note [Fair timing]: judged or not
        figures = [Timing(ms, max(ms - spread / 2, ms * 1e-3), ms + spread / 2, [])  # a spread wider than the
                   for ms, spread in ((ms_a, spread_a), (ms_b, spread_b))]            # median: noisy, not judged
        timing["verdict"] = ratio(*figures)
    return Comparison(a, b, record_a, record_b, kernel_diff(record_a, record_b),
                      code_diff(record_a, record_b, f"A ({a.label()})", f"B ({b.label()})"), timing)


def _untimed(record: dict, side: str) -> str | None:
    """Why a side has no time per call, in words, when its profile leaves calls out (an Inductor side)."""
    calls = record.get("untimed_calls")
    if not calls:
        return None
    names = ", ".join(dict.fromkeys(call.split(".")[1] for call in calls))  # extern_kernels.mm, aten.x.default
    return (f"{side}'s kernel times leave out its library calls ({names}), so their sum is not its time per call; "
            "the explorer's bench stage times both whole calls")


def compare(target: str, a: Side, b: Side, profile: bool = True) -> Comparison:
    """Explore `target` (a model file or sample; a side's file= overrides it) under both settings."""
    from engine.tools.model_file import load_model_file

    from engine.run import collect_evidence

    records = []
    for name, side in (("a", a), ("b", b)):
        # each side's checks marked as its own (Note [Bench and compare judged outside the job])
        with collect_evidence() as found:
            records.append(explore_side(load_model_file(side.file or target), side, profile))
        for evidence in found:
            evidence.role = name
    return compare_records(a, b, *records)


def summary(comparison: Comparison) -> str:
    """The comparison as text for the terminal."""
    k, t = comparison.kernels, comparison.timing
    lines = [f"A: {comparison.a.label()}", f"B: {comparison.b.label()}",
             f"Kernels: {k['count'][0]} -> {k['count'][1]}"]
    for key, verb in (("same", "same"), ("merged", "merged"), ("split", "split"), ("changed", "changed"),
                      ("added", "added"), ("removed", "removed")):
        for item in k.get(key) or []:
            ops = f"  [{', '.join(item.get('ops') or [])}]" if item.get("ops") else ""
            a_side = item.get("a", "-")
            a_side = " + ".join(a_side) if isinstance(a_side, list) else a_side
            b_side = item.get("b", "-")
            b_side = " + ".join(b_side) if isinstance(b_side, list) else b_side
            how = f" ({item['how']})" if item.get("how") else ""
            lines.append(f"  {verb:<8} A {a_side} -> B {b_side}{ops}{how}")
    ms = lambda v: f"{v:.4f} ms" if isinstance(v, (int, float)) else "-"  # noqa: E731
    speedup = t.get("speedup_b_over_a")
    verdict = t.get("verdict") or {}
    judged = f"; B is {speedup:.2f}x the speed of A (time A / time B)" if speedup else ""
    if verdict and not verdict.get("judged"):
        judged = f"; B vs A: {verdict['text']}"
    elif verdict and verdict["low"] <= 1 <= verdict["high"]:
        judged = f"; no difference beyond the spread (B/A {verdict['low']:.2f}x-{verdict['high']:.2f}x)"
    lines.append(f"Time per call: A {ms(t.get('a_ms'))}, B {ms(t.get('b_ms'))}{judged}"
                 + (f" ({t['untimed']})" if t.get("untimed") else ""))
    lines.append("Matches eager: " + ", ".join(f"{side} {_matches(record)}" for side, record in
                                                (("A", comparison.record_a), ("B", comparison.record_b))))
    for side, record in (("A", comparison.record_a), ("B", comparison.record_b)):
        for error in record.get("errors") or []:
            lines.append(f"{side} error ({error.get('stage', '?')}): {error.get('message', '')}")
    changed = sum(1 for line in comparison.code_diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    lines.append(f"Code: {changed} lines differ" + ("" if changed else " (identical)"))
    return "\n".join(lines)


def _matches(record: dict) -> str:
    """A side's check in words, with where it was judged (Note [Judged outside the job])."""
    verify = record.get("verify") or {}
    if not verify:
        return "not checked"
    words = {"random": "random (nothing could be checked)"}.get(verify.get("verdict"),
                                                               "yes" if verify.get("ok") is True else "NO")
    return words + (" (judged outside the job)" if verify.get("judged_in") else "")
