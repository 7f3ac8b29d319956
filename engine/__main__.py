"""The command line (docs/design.md, "The CLI"; a stable contract that scripts rely on):

    python -m engine explore FILE_OR_SAMPLE [--backend cpp|triton] [--device cpu|cuda] [--mode MODE] [--dynamic]
                                            [--templates auto|on|off] [--rewrites PASSES] [--freeze] [--json] [--out DIR]
                                            [--verbose] [--profile]
    python -m engine asm     FILE_OR_SAMPLE --kernel NAME [--level ttir|ttgir|llir|ptx|sass] [--json]
    python -m engine provenance FILE_OR_SAMPLE (--line N | --node NAME) [--json]
    python -m engine bench   FILE_OR_SAMPLE|suite|zoo [--backend ...] [--device ...] [--mode MODE,MODE...] [--json]
                                            [--threads N] [--no-inductor] [--profile] [--sandbox]
    python -m engine compare FILE_OR_SAMPLE --a KEY=VALUE... --b KEY=VALUE... [--json] [--sandbox]
                                            (engine/tools/compare.py)
    python -m engine report  FILE_OR_SAMPLE|RECORD.json [--out report.html] [--profile] [--sandbox] ...
                                            (visualizers/html_report.py)
    python -m engine repro   FILE_OR_SAMPLE|RECORD.json [--kernel NAME] [--graph N] [--out FILE]
                                            (a standalone reproducer: engine/tools/repro_file.py)
    python -m engine sweep   opinfo|models|explore|hostile [FLAGS]  the acceptance sweeps (engine/tools/sweep_*.py)
    python -m engine bench   gemm|train|gpu [FLAGS]           the acceptance benches (engine/tools/bench_*.py)
                                            (each tool's own flags: Note [Tool verbs] in engine/tools/verbs.py)

Exit codes: 0 when all went well; 1 when Glassbox failed (a compile error, a graph that fell back to eager because
our compile of it raised, or outputs that differ from eager);
2 when the model file is at fault (it does not parse, defines no model, or the model raises) or the command
line is wrong. With --json, stdout holds the JSON document and nothing else: everything the model, torch or
we print goes to stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch

from engine import options as engine_options
from engine.record import (ErrorRecord, Exploration, InductorRecord, KernelRecord, MachineRecord, SourceFile,
                           Suggestion)
from engine.tools import cli_format
from engine.tools.json_stdout import stdout_to_stderr
from engine.tools.model_file import ModelFileError, ModelSpec, load_model_file, run_eager
from engine.tools.sandbox import positive_limit
from engine.tools.verbs import TOOLS, run_tool, tool_module
from samples import DEFAULT_SAMPLE

EXIT_OK, EXIT_FAILED, EXIT_USER_ERROR = 0, 1, 2


class Failure(Exception):
    """A failure the CLI reports as one paragraph (and, with --verbose, `cause`'s traceback)."""

    def __init__(self, message: str, code: int, cause: BaseException | None = None):
        super().__init__(message)
        self.message, self.code, self.cause = message, code, cause


def compile_modes(text: str) -> tuple[str, ...]:
    """--mode: one or more of torch.compile's modes, comma-separated."""
    MODES = engine_options.infos()["mode"].choices
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"unknown mode {', '.join(unknown) or text!r}; choose from {', '.join(MODES)}")
    return modes


def rewrite_choices(text: str) -> str:
    """--rewrites: checked here, so a wrong pass name is a usage error that lists the passes."""
    from engine.rewrite import resolve
    try:
        resolve(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return text


def template_choices(text: str) -> tuple[str, ...]:
    """bench --templates: one or more of auto, on, off, comma-separated (each a case of its own)."""
    TEMPLATE_MODES = engine_options.infos()["templates"].choices
    choices = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [t for t in choices if t not in TEMPLATE_MODES]
    if unknown or not choices:
        raise argparse.ArgumentTypeError(f"unknown templates {', '.join(unknown) or text!r}; choose from "
                                         f"{', '.join(TEMPLATE_MODES)}")
    return choices


def single_mode(args) -> str:
    if len(args.mode) != 1:
        raise Failure("explore takes one --mode (bench takes several)", EXIT_USER_ERROR)
    return args.mode[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine",
                                     description="Glassbox, a see-through compiler for PyTorch programs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    flag = engine_options.add_flag  # an option's flag as engine/options.py describes it (Note [One option set])

    def common(command: argparse.ArgumentParser) -> None:
        command.add_argument("target", metavar="FILE_OR_SAMPLE",
                             help=f"a .py file defining `model` and `example_inputs`, or a sample name "
                                  f"(e.g. {DEFAULT_SAMPLE})")
        flag(command, "backend")
        flag(command, "device")
        flag(command, "mode", type=compile_modes, default=("default",), metavar="MODE", choices=None,
             help=engine_options.infos()["mode"].help + "; bench takes several, comma-separated, run side by side")
        command.add_argument("--json", action="store_true", help="print JSON on stdout and nothing else")
        command.add_argument("--verbose", action="store_true", help="show tracebacks and every detail")

    def sandbox_flags(command: argparse.ArgumentParser, timeout_s: float) -> None:
        """--sandbox and its limits, and --evidence-out (explore, bench, compare: Note [Judged outside the job])."""
        command.add_argument("--sandbox", action="store_true",
                             help="run the model in a separate, limited worker process (Note [Sandbox]); its "
                                  "outputs are judged in another process the model never ran in (Note [Judged "
                                  "outside the job])")
        command.add_argument("--evidence-out", metavar="FILE",
                             help="write the outputs (eager's, ours, float64's) as data to FILE, for `judge`")
        command.add_argument("--timeout", type=positive_limit("seconds"), default=timeout_s, metavar="S",
                             help=f"sandbox wall-time limit (default {timeout_s:g})")
        command.add_argument("--memory-mb", type=positive_limit("megabytes", whole=True), default=4096, metavar="M",
                             help="sandbox memory limit")

    def exploration_choices(command: argparse.ArgumentParser) -> None:
        """What one exploration is run with: explore and report (which explores first) take the same."""
        flag(command, "dynamic")
        flag(command, "train")
        flag(command, "templates")
        flag(command, "freezing")
        flag(command, "rewrites", type=rewrite_choices, metavar="PASSES", default="default")
        flag(command, "partition")

    explore = commands.add_parser("explore", help="compile a model once and show every stage",
                                  description="Compile a model once, recording every stage, and summarize it.")
    common(explore)
    exploration_choices(explore)
    explore.add_argument("--out", metavar="DIR", help="write record.json and each graph's generated code here")
    explore.add_argument("--record-out", metavar="FILE",
                         help="write the record to FILE, also when exploring fails: then its errors[] says why "
                              "(kind model or compile, with the user's line); for programs driving the CLI")
    explore.add_argument("--inductor", action="store_true",
                         help="also compile with real Inductor and add its code and kernels to the record")
    explore.add_argument("--profile", action="store_true",
                         help="time every kernel: time_ms, GB/s, FLOP/s and share of the call "
                              "(engine/runtime/profile.py)")
    explore.add_argument("--time-call", action="store_true",
                         help="time the whole call, compiled against eager, taking turns: call_time "
                              "(Note [Call time] in engine/call_time.py)")
    explore.add_argument("--trace", metavar="FILE",
                         help="write a Chrome/Perfetto trace (trace-event JSON) of the compile (every stage and "
                              "pass) and of a run (kernels on a timeline; implies --profile), and print the "
                              "compile's cost per stage and pass (engine/tools/trace_file.py)")
    sandbox_flags(explore, timeout_s=120.0)

    bench = commands.add_parser("bench", help="time eager vs Glassbox vs torch.compile (Inductor); bench "
                                              "gemm|train|gpu: the acceptance benches",
                                description="Time a model under eager, Glassbox and Inductor in one process. "
                                            "FILE_OR_SAMPLE may be a comma-separated list, and `suite` "
                                            "is the CPU benchmark suite. `bench gemm|train|gpu [FLAGS]` run "
                                            "the acceptance benches, each with flags of its own "
                                            "(`python -m engine bench gemm --help`).")
    common(bench)
    bench.add_argument("--threads", type=int, metavar="N",
                       help="threads for torch and for our OpenMP kernels; applied before anything compiles. "
                            "Default: the cores the machine has free before each case")
    bench.add_argument("--quick", action="store_true",
                       help="skip the warm compile in a fresh process and Inductor's vector-ISA probe (the app's "
                            "bench: seconds, not tens; Note [Quick bench] in engine/tools/bench.py)")
    bench.add_argument("--templates", type=template_choices, default=("auto",), metavar="auto|on|off",
                       help="GEMM templates, one or more comma-separated (e.g. on,off): each a row of its own, "
                            "side by side in one process; Inductor is timed once per model and mode")
    bench.add_argument("--no-inductor", action="store_true", help="skip torch.compile (Inductor)")
    bench.add_argument("--record-out", metavar="FILE",
                       help="write the bench document to FILE, also when benching fails: then its errors[] says "
                            "why (the record's ErrorRecord: kind model or compile, with the user's line)")
    bench.add_argument("--train", action="store_true",
                       help="time a training step (forward, loss, backward) and the activations each saves "
                            "(Note [Training-step bench] in engine/tools/train_bench.py)")
    bench.add_argument("--profile", action="store_true",
                       help="also time every Glassbox kernel (each case gets `kernels` and `machine`)")
    bench.add_argument("--min-time", type=float, default=0.5, metavar="SECONDS",
                       help="seconds of timing per runner, at least, over at least 7 interleaved rounds "
                            "(default 0.5)")
    sandbox_flags(bench, timeout_s=600.0)
    compare = commands.add_parser("compare", help="what-if: two explorations of one model and their diff",
                                  description="Explore a model under two settings (A and B) and show their "
                                              "differences: kernels, code and time. Keys: backend, device, "
                                              "dynamic, mode, fusion, max_nodes, compiler, file.")
    compare.add_argument("target", metavar="FILE_OR_SAMPLE")
    compare.add_argument("--a", nargs="*", default=[], metavar="KEY=VALUE", help="side A's settings")
    compare.add_argument("--b", nargs="*", default=[], metavar="KEY=VALUE", help="side B's settings")
    compare.add_argument("--json", action="store_true", help="print JSON on stdout and nothing else")
    compare.add_argument("--verbose", action="store_true", help="also print the code diff")
    sandbox_flags(compare, timeout_s=600.0)

    report = commands.add_parser("report", help="a self-contained offline HTML report of one exploration",
                                 description="Explore a model (or read a record.json) and write one HTML file "
                                             "that opens offline: graphs, IR, code, provenance, profile.")
    common(report)
    report.add_argument("--out", default="report.html", metavar="FILE", help="where to write (report.html)")
    exploration_choices(report)
    report.add_argument("--profile", action="store_true", help="time every kernel (a roofline in the report)")
    report.add_argument("--inductor", action="store_true", help="add Inductor's code and kernels")
    sandbox_flags(report, timeout_s=120.0)

    repro = commands.add_parser("repro", help="take a kernel away: one runnable Python file that checks and times it",
                                description="Explore a model (or read a record.json) and write a standalone "
                                            "reproducer of one generated kernel (--kernel), or of every generated "
                                            "kernel of a graph (--graph): its source, inputs in the recorded "
                                            "layouts, the eager reference from the same ATen ops, a check and a "
                                            "timing loop (Note [Kernel reproducers]).")
    common(repro)
    exploration_choices(repro)
    repro.add_argument("--kernel", metavar="NAME", help="the kernel, e.g. kernel_0 (default: every kernel)")
    repro.add_argument("--graph", type=int, metavar="N", help="the graph (default: the first with the kernel)")
    repro.add_argument("--out", metavar="FILE", help="where to write (default: repro_<model>_<kernel>.py)")

    whatif = commands.add_parser("whatif", help="would other input shapes/dtypes recompile? Dynamo's guards answer",
                                 description="Explore a model on its example inputs, ask Dynamo's guards whether "
                                             "other inputs would recompile (and why, by guard kind, and what "
                                             "dynamic=True would change), then run them and compare "
                                             "(Note [Recompile what-if]).")
    common(whatif)
    whatif.add_argument("--inputs", required=True, metavar="SPECS",
                        help="the other inputs, one spec per tensor input: e.g. 'float32[8, 512], int64[8]'")
    whatif.add_argument("--dynamic", action="store_true", help="ask the dynamic-shape compile instead")
    whatif.add_argument("--mark-dynamic", default="", metavar="INPUT:DIM,...",
                        help="mark these dims of the example's tensor inputs dynamic (torch._dynamo.mark_dynamic) "
                             "before compiling, e.g. '0:0' (tensor input 0, dim 0)")

    fix = commands.add_parser("fix", help="apply a graph break's suggested rewrite and explore before and after",
                              description="Apply the concrete suggested rewrites of a model's graph breaks (or of "
                                          "one, --break N) to a copy of its file and explore both: graph breaks, "
                                          "graphs, kernels and numerics before and after (Note [Applying a "
                                          "rewrite]).")
    common(fix)
    exploration_choices(fix)
    fix.add_argument("--break", dest="break_number", type=int, metavar="N", help="only break N (1-based)")
    fix.add_argument("--out", metavar="FILE", help="where to write the fixed file (default: FILE_fixed.py)")

    asm = commands.add_parser("asm", help="one Triton kernel's TTIR, TTGIR, LLIR, PTX or SASS",
                              description="Explore a model with the Triton backend and print one kernel lowered by "
                                          "Triton for sm_90 (no GPU needed).")
    common(asm)
    exploration_choices(asm)
    asm.set_defaults(backend="triton")
    asm.add_argument("--kernel", required=True, metavar="NAME", help="the kernel's name (explore lists them)")
    asm.add_argument("--level", choices=ASM_LEVELS, default="ptx", help="which lowering (default ptx)")

    provenance = commands.add_parser("provenance", help="follow a source line or a node through every stage",
                                     description="Explore a model and show what one line of its source (--line) "
                                                 "or one FX/ATen node (--node) became: FX and ATen nodes, loop IR, "
                                                 "kernels and the generated lines.")
    common(provenance)
    exploration_choices(provenance)
    which = provenance.add_mutually_exclusive_group(required=True)
    which.add_argument("--line", type=int, metavar="N", help="a line of the model file")
    which.add_argument("--node", metavar="NAME", help="an FX or ATen node's name")
    sweep = commands.add_parser("sweep", help="the acceptance sweeps: opinfo, models, explore, hostile",
                                description="Run one acceptance sweep, with flags of its own (`python -m engine "
                                            "sweep opinfo --help`): opinfo (torch's OpInfo database), models "
                                            "(the model catalogue vs eager and Inductor), explore (real models explored on the "
                                            "CPU: inference, training, dynamic shapes), hostile (the hostile "
                                            "input suite through the sandbox). Note [Tool verbs].")
    sweep.add_argument("kind", choices=tuple(TOOLS["sweep"]))
    sweep.add_argument("flags", nargs=argparse.REMAINDER, help="the sweep's own flags")
    judge = commands.add_parser("judge", help="the verdicts of a job's evidence, judged here (JSON)",
                                description="Judge the evidence a sandboxed explore wrote (--evidence-out): the "
                                            "verdicts, computed in this process (Note [Judged outside the job]).")
    judge.add_argument("evidence", metavar="FILE")
    judge.set_defaults(json=True, verbose=False, device="cpu")
    return parser


def judge_command(args) -> tuple[dict, int]:
    """Note [Judged outside the job] (engine/tools/judged.py): runs no model, only engine/verdict.py."""
    from engine.tools.judged import judge_file

    try:
        return {"verifies": judge_file(args.evidence)}, EXIT_OK
    except Exception as error:  # a file written by a model: anything unreadable is said, not trusted
        raise Failure(f"Cannot judge {args.evidence}: {type(error).__name__}: {error}", EXIT_USER_ERROR,
                      error) from error


ASM_LEVELS = ("ttir", "ttgir", "llir", "ptx", "sass")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if tool_module(argv):  # sweep opinfo, bench gemm, ...: a tool with flags of its own (Note [Tool verbs])
        return run_tool(tool_module(argv), argv[2:])
    args = build_parser().parse_args(argv)
    if getattr(args, "threads", None) is not None:
        if args.threads < 1:
            return report_failure(Failure(f"--threads must be at least 1, got {args.threads}.", EXIT_USER_ERROR),
                                  args.verbose)
        from engine.tools.bench import set_threads
        set_threads(args.threads)  # before the first compile: OpenMP reads its thread count once
    document = None
    try:
        with stdout_to_stderr() if args.json else nullcontext():
            check_device(getattr(args, "device", "cpu"))
            command = {"explore": explore_command, "bench": bench_command, "compare": compare_command,
                       "report": report_command, "repro": repro_command, "whatif": whatif_command,
                       "fix": fix_command, "asm": asm_command, "provenance": provenance_command,
                       "judge": judge_command}[args.command]
            document, code = command(args)
    except ModelFileError as error:
        write_failure_record(args, ErrorRecord(kind="model", stage="load", message=error.message,
                                               filename=args.target, lineno=error.lineno))
        return report_failure(Failure(error.message, EXIT_USER_ERROR, error), args.verbose)
    except Failure as failure:
        write_failure_record(args, ErrorRecord(kind="compile" if failure.code == EXIT_FAILED else "usage",
                                               stage="compile", message=failure.message))
        return report_failure(failure, args.verbose)
    if getattr(args, "record_out", None) and document is not None:
        Path(args.record_out).write_text(json.dumps(document), encoding="utf-8")
    if args.json and document is not None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()
    return code


def write_failure_record(args, error: ErrorRecord) -> None:
    """--record-out when the command failed: for explore a record with no graphs, for bench a document with no
    cases, whose one error says why, as data (a program driving the CLI reads it instead of parsing our stderr)."""
    if not getattr(args, "record_out", None):
        return
    if args.command == "bench":
        text = json.dumps({"cases": [], "errors": [error.to_json()]})
    else:
        text = Exploration(model=Path(args.target).stem, backend=args.backend, device=args.device,
                           errors=[error]).dumps()
    Path(args.record_out).write_text(text, encoding="utf-8")


# --- explore -------------------------------------------------------------------------------------------------


def explore_command(args) -> tuple[dict, int]:
    if args.sandbox:
        return sandboxed_explore(args)
    import engine
    from engine.train_verify import TrainingInputError

    if args.freeze and args.train:
        raise Failure("--freeze is for inference: a training step updates the parameters it would bake in",
                      EXIT_USER_ERROR)
    spec = spec_on_device(load_model_file(args.target), args.device)
    if getattr(args, "trace", None):
        args.profile = True  # the run's half of the trace is the profiled call's kernels
    # Run it eagerly first: a model that raises is the user's error, and caught here it is reported at their
    # line, without the compiler's (and torch's logging's) tracebacks about the same failure.
    run_eager(spec)
    from engine import run as run_module
    try:
        with run_module.collect_evidence() as evidence:
            exploration = engine.explore(
                spec.model, spec.example_inputs, backend=args.backend, device=args.device,
                dynamic=True if args.dynamic else None, dynamic_inputs=spec.dynamic_inputs, name=spec.name,
                source={"filename": spec.filename, "text": spec.source}, description=spec.description,
                tolerance=spec.tolerance, profile=args.profile, train=args.train, loss_fn=spec.loss_fn,
                mode=single_mode(args), templates=args.templates, rewrites=args.rewrites, freezing=args.freeze,
                partition=args.partition, time_call=getattr(args, "time_call", False))
    except ModelFileError:
        raise
    except TrainingInputError as error:
        raise Failure(f"Cannot train {spec.name}: {error}", EXIT_USER_ERROR, error) from error
    except Exception as error:
        raise compile_failure(spec, error) from error
    if args.inductor:
        from engine.reference import inductor_reference
        from engine.verdict import verify_record
        try:
            with run_module.collect_evidence() as inductor_evidence:
                report = inductor_reference(spec.model, spec.example_inputs, profile=args.profile)
                exploration.inductor = InductorRecord.from_json({**report,
                                                                 "verify": verify_record(report["verify"]).to_json()})
            evidence += [dataclasses.replace(found, role="inductor") for found in inductor_evidence]
        except Exception as error:  # Inductor failing is worth showing, not fatal for our record
            exploration.inductor = InductorRecord(error=f"{type(error).__name__}: {error}")
    if getattr(args, "evidence_out", None):  # Note [Judged outside the job]: explore's and Inductor's, as data
        from engine.tools.judged import save_evidence
        save_evidence(evidence, args.evidence_out)
    record = exploration.to_json()
    if not args.json:
        print(cli_format.explore_summary(record, verbose=args.verbose))
    if args.out:
        written = write_outputs(record, Path(args.out))
        print(f"Wrote {', '.join(p.name for p in written)} to {args.out}")
    if getattr(args, "trace", None):
        write_trace(record, Path(args.trace), quiet=args.json)
    if not args.json:
        print("\n".join(cli_bisect_lines(record)))
        print("\n".join(hot_lines(record)))
    return record, verdict_exit(record, spec.name, args.verbose)


def verdict_exit(record: dict, name: str, verbose: bool = False) -> int:
    """explore's exit code from its record, said in words on stderr (engine/tools/judged.py, verdict_code)."""
    from engine.tools.judged import verdict_code

    code, words = verdict_code(record, name, verbose)
    for line in words:
        print(line, file=sys.stderr)
    return code


def hot_lines(record: dict, count: int = 8) -> list[str]:
    """With --profile: the lines that cost the most, the user's file's and the library code's the model is built
    from (Note [Time on lines] in visualizers/heat.py)."""
    from visualizers.heat import place_heat, rates_text, short_file

    heat = place_heat(Exploration.from_json(record))
    if not heat:
        return []
    own = record["source"].get("filename")
    ranked = sorted(heat.items(), key=lambda item: -item[1]["ms"])[:count]
    return ["Time on your lines (profiled kernels, each split over its lines):"] + [
        f"  {'line ' if file == own else short_file(file) + ':'}{line}: {entry['ms']:.4f} ms ({entry['share']:.0%})"
        + (f", {rates}" if (rates := rates_text(entry.get("gbps"), entry.get("gflops"), entry.get("pct"))) else "")
        + f"  {(entry.get('text') or '').strip()}" for (file, line), entry in ranked]


def cli_bisect_lines(record: dict) -> list[str]:
    """The numerics bisect in words (Note [Numerics bisect] in engine/divergence.py)."""
    lines = []
    for graph in record.get("graphs") or []:
        bisect = graph.get("bisect") or {}
        if not bisect:
            continue
        if bisect.get("status") == "clean":
            lines.append(f"Numerics bisect, graph {graph['index']}: clean ({bisect['compared']} kernel outputs "
                         "compared: exact or within tolerance)")
        elif bisect.get("culprit"):
            culprit = bisect["culprit"]
            line = culprit.get("user_line") or {}
            lines.append(f"Numerics bisect, graph {graph['index']}: diverges first at {culprit['kernel']} "
                         f"({' + '.join(culprit.get('ops') or [])}), max abs err {culprit['max_abs_err']:.3g} from "
                         f"inputs off by {culprit['input_max_abs_err']:.3g}"
                         + (f"; your line {line['lineno']}: {line.get('line', '')}" if line else ""))
        else:
            lines.append(f"Numerics bisect, graph {graph['index']}: {bisect.get('status')} "
                         f"{bisect.get('reason', '')}".rstrip())
    return lines


def write_trace(record: dict, path: Path, quiet: bool) -> None:
    """explore --trace: the trace-event JSON, and the compile's cost in words (stderr under --json)."""
    from engine.tools.trace_file import trace_events
    from visualizers.compile_cost import compile_cost, cost_lines

    path.write_text(json.dumps(trace_events(record)), encoding="utf-8")
    print("\n".join(cost_lines(compile_cost(Exploration.from_json(record))) + [f"Wrote the trace to {path}: open it in "
                                                        "ui.perfetto.dev or chrome://tracing"]),
          file=sys.stderr if quiet else sys.stdout)


def sandboxed_explore(args) -> tuple[dict, int]:
    """The same exploration in a worker process under limits; its JSON record comes back on stdout."""
    from engine.tools.judged import apply_verdicts
    from engine.tools.sandbox import explore_command as worker_command

    options = ["--backend", args.backend, "--device", args.device, "--mode", single_mode(args),
               "--templates", args.templates, "--rewrites", args.rewrites]
    options += [flag for flag, on in (("--dynamic", args.dynamic), ("--inductor", args.inductor),
                                      ("--profile", args.profile), ("--train", args.train),
                                      ("--freeze", args.freeze), ("--time-call", getattr(args, "time_call", False))) if on]
    options += ["--partition", args.partition] if args.partition else []
    record, verdicts, why_not = sandboxed_job(args, lambda workdir: worker_command(args.target, options))
    apply_verdicts(record, verdicts, why_not)
    if not args.json:
        print(cli_format.explore_summary(record, verbose=args.verbose))
    if args.out:
        written = write_outputs(record, Path(args.out))
        print(f"Wrote {', '.join(p.name for p in written)} to {args.out}")
    return record, verdict_exit(record, Path(args.target).stem, args.verbose)


def sandboxed_job(args, command: Callable[[Path], list[str]], inputs: dict[str, bytes] | None = None) \
        -> tuple[dict, list[dict] | None, str]:
    """One command (`command(work directory)`: explore, bench or compare with --json) in a sandboxed worker under
    --timeout and --memory-mb, `inputs` written into its directory first: (the JSON document it printed, the
    verdicts of its evidence judged by a process the model never ran in, or None and why not) (Note [Judged
    outside the job])."""
    from engine.tools.isolation import WorkDirectory, missing_protection_words
    from engine.tools.judged import EVIDENCE_NAME, judge_in_sandbox, read_evidence
    from engine.tools.sandbox import Limits, run_sandboxed

    if missing_protection_words():  # where bubblewrap or cgroups cannot run, say what is not protected
        print(missing_protection_words(), file=sys.stderr)
    workdir = WorkDirectory()
    try:
        for name, data in (inputs or {}).items():
            (workdir.path / name).write_bytes(data)
        evidence = workdir.path / EVIDENCE_NAME
        result = run_sandboxed(command(workdir.path) + ["--evidence-out", str(evidence)],
                               Limits(timeout_s=args.timeout, memory_mb=args.memory_mb), workdir=workdir.path)
        document = _record_of(result)
        data = read_evidence(evidence)
    finally:
        workdir.remove()
    if data is None:
        return document, None, "the job wrote no evidence (its outputs as data)"
    return document, *judge_in_sandbox(data, args.timeout, args.memory_mb)


def _record_of(result) -> dict:
    """The record a sandboxed explore printed, or the Failure that says why there is none."""
    record = None
    if result.stdout.strip() and result.returncode in (0, EXIT_FAILED, EXIT_USER_ERROR) and not result.limit_hit:
        try:
            record = json.loads(result.stdout)
        except ValueError:
            record = None
    if not isinstance(record, dict):
        code = EXIT_USER_ERROR if result.limit_hit or result.returncode == EXIT_USER_ERROR else EXIT_FAILED
        message = result.explain()
        if result.returncode == 0 and not result.limit_hit:
            # with exit 0 the CLI always prints a record: something else ended the process
            message = (f"The model's process exited (exit code {result.returncode}) without a result: something "
                       "in the model ended the Python process directly, most likely os._exit(), or wrote over "
                       "its output.")
        raise Failure(message or f"The worker exited with code {result.returncode}.", code)
    return record


def write_outputs(record: dict, out: Path) -> list[Path]:
    """record.json, and per graph its kernels (graph0.cpp) and its Python wrapper (graph0_wrapper.py)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "record.json"]
    written[0].write_text(json.dumps(record, indent=2), encoding="utf-8")
    for graph in record.get("graphs") or []:
        code = graph.get("code") or {}
        extension = {"cpp": ".cpp", "triton": ".py"}.get(code.get("language", "cpp"), ".txt")
        for suffix, text in ((extension, code.get("source")), ("_wrapper.py", code.get("wrapper"))):
            if text:
                path = out / f"graph{graph['index']}{suffix}"
                path.write_text(text, encoding="utf-8")
                written.append(path)
    return written


# --- bench ---------------------------------------------------------------------------------------------------


def warn_unsandboxed(command: str, sandbox_flag: bool = False) -> None:
    """The commands that run the model in this process say so on stderr, unless this process is itself a
    sandboxed worker (the app's jobs: GLASSBOX_BUILDER_FD is set only there); bench and compare, which check the
    compiled outputs, also say that the check is judged where the model could forge it, and what does not."""
    if "GLASSBOX_BUILDER_FD" in os.environ:
        return
    if command == "report":
        print("Warning: `report` explores the model in this process, unsandboxed, with your files and environment "
              "(README, Security). For a model you do not trust, use `report --sandbox`.", file=sys.stderr)
        return
    if sandbox_flag:
        print(f"Warning: `{command}` runs the model in this process, unsandboxed, with your files and environment, "
              "and judges whether the compiled outputs match eager here too, where a model could forge that check "
              f"(README, Security). For a model you do not trust, use `{command} --sandbox`: the model runs in "
              "the sandbox and its outputs are judged outside it.", file=sys.stderr)
        return
    print(f"Warning: `{command}` runs the model in this process, unsandboxed, with your files and environment "
          "(README, Security). For a model you do not trust, use `explore --sandbox --record-out R.json` and "
          "`report R.json`, or the app.", file=sys.stderr)


def bench_command(args) -> tuple[dict, int]:
    from engine import run as run_module
    from engine.tools.bench import bench, load_cases, share_inductor
    from engine.tools.judged_commands import bench_roles, document_code
    from engine.tools.train_bench import bench_train

    if args.sandbox:
        return sandboxed_bench(args)
    warn_unsandboxed("bench", sandbox_flag=True)

    cases = [(spec, mode, templates) for spec in load_cases(args.target, args.device) for mode in args.mode
             for templates in args.templates]
    if not cases:
        raise Failure(f"No models to benchmark in {args.target!r}.", EXIT_USER_ERROR)
    reports, errors, evidence = [], [], []
    # One Inductor cache directory for the whole session (see the bench() docstring).
    with tempfile.TemporaryDirectory(prefix="inductor-bench-", ignore_cleanup_errors=True) as inductor_dir:
        inductor_runs: dict = {}  # (model, mode) -> the first case's Inductor figures (the templates rows share them)
        for number, (spec, mode, templates) in enumerate(cases, start=1):
            def progress(step: str, number=number, name=spec.name) -> None:
                print(f"[{number}/{len(cases)}] {name}: {step}", file=sys.stderr, flush=True)
            try:
                first = (spec.name, mode) not in inductor_runs
                measure = bench_train if args.train else bench  # a training step, or inference
                with run_module.collect_evidence() as found:  # Note [Bench and compare judged outside the job]
                    reports.append(measure(spec, backend=args.backend, threads=args.threads, device=args.device,
                                           with_inductor=not args.no_inductor and first,
                                           min_run_time=args.min_time, inductor_cache_dir=inductor_dir,
                                           progress=progress, mode=mode, templates=templates,
                                           **({} if args.train else {"fresh": not args.quick})))
                    if first:
                        inductor_runs[spec.name, mode] = reports[-1]
                    else:
                        share_inductor(reports[-1], inductor_runs[spec.name, mode])
                    if args.profile:
                        progress("per-kernel profile")
                        reports[-1].update(profile_case(spec, args))
                bench_roles(found, number - 1)
                evidence += found
            except ModelFileError:
                raise
            except Exception as error:
                failure = compile_failure(spec, error)
                if isinstance(failure, ModelFileError):
                    raise failure from error
                report_failure(failure, args.verbose)
                reports.append({"name": spec.name, "error": failure.message})
                errors.append(ErrorRecord(kind="compile", stage="bench", message=failure.message,
                                          type=type(root_error(error)).__name__).to_json())
    if args.evidence_out:  # Note [Judged outside the job]: every case's checks, as data
        from engine.tools.judged import save_evidence
        save_evidence(evidence, args.evidence_out)
    document = {"cases": reports, "errors": errors}
    if not args.json:
        print_bench(document)
    return document, document_code(document)


def sandboxed_bench(args) -> tuple[dict, int]:
    """bench in a sandboxed worker, its checks judged outside it (Note [Bench and compare judged outside the
    job] in engine/tools/judged_commands.py)."""
    from engine.tools.judged_commands import apply_bench_verdicts, document_code
    from engine.tools.sandbox import explore_command as worker_command

    options = ["--backend", args.backend, "--device", args.device, "--mode", ",".join(args.mode),
               "--templates", ",".join(args.templates), "--min-time", str(args.min_time)]
    options += ["--threads", str(args.threads)] if args.threads is not None else []
    options += [flag for flag, on in (("--quick", args.quick), ("--no-inductor", args.no_inductor),
                                      ("--train", args.train), ("--profile", args.profile)) if on]
    document, verdicts, why_not = sandboxed_job(args, lambda workdir: worker_command(args.target, options, "bench"))
    apply_bench_verdicts(document, verdicts, why_not)
    if not args.json:
        print_bench(document)
    return document, document_code(document)


def print_bench(document: dict) -> None:
    reports = [case for case in document.get("cases") or [] if isinstance(case, dict)]
    print(cli_format.bench_table(reports))
    for report in reports:
        for entry in report.get("kernels") or []:  # profile_case's: a graph index and the kernel's profile
            kernel = KernelRecord.from_json({key: value for key, value in entry.items() if key != "graph"})
            print(f"  {report['name']} graph {entry['graph']} {kernel.name} {kernel.kind}"
                  f"{cli_format.kernel_profile(kernel)}")
        print("\n".join(cli_format.machine_line(MachineRecord.from_json(report.get("machine") or {}))))
    for warning in {report.get("load_warning") for report in reports if report.get("load_warning")}:
        print(f"Warning: {warning}")


def profile_case(spec: ModelSpec, args) -> dict:
    """Per-kernel times of one bench case (an exploration with profile=True): its kernels and the machine."""
    import engine

    moved = spec_on_device(spec, args.device)
    record = engine.explore(moved.model, moved.example_inputs, backend=args.backend, device=args.device, name=spec.name,
                            profile=True, train=args.train, loss_fn=spec.loss_fn).to_json()
    keys = ("name", "kind", "time_ms", "time_iqr_ms", "share", "bytes", "gbps", "flops", "gflops")
    return {"kernels": [{"graph": g["index"], **{key: k.get(key) for key in keys}}
                        for g in record["graphs"] for k in g["kernels"]],
            "machine": record.get("machine") or {}}


# --- compare -------------------------------------------------------------------------------------------------


def compare_command(args) -> tuple[dict, int]:
    from engine.tools.compare import SettingError, compare, parse_side, summary
    from engine.tools.judged_commands import document_code

    try:
        sides = [parse_side(args.a), parse_side(args.b)]
    except SettingError as error:
        raise Failure(f"compare: {error}", EXIT_USER_ERROR) from error
    for side in sides:
        check_device(side.device)
    if args.sandbox:
        return sandboxed_compare(args, sides)
    warn_unsandboxed("compare", sandbox_flag=True)
    from engine import run as run_module
    with run_module.collect_evidence() as evidence:  # each side's, marked a or b by compare()
        comparison = compare(args.target, *sides)
    if args.evidence_out:
        from engine.tools.judged import save_evidence
        save_evidence([e for e in evidence if e.role in ("a", "b")], args.evidence_out)
    if not args.json:
        print(summary(comparison))
        if args.verbose and comparison.code_diff:
            print(comparison.code_diff)
    document = comparison.to_json()
    return document, document_code(document)


def sandboxed_compare(args, sides: list) -> tuple[dict, int]:
    """compare in a sandboxed worker, each side's check judged outside it (Note [Bench and compare judged
    outside the job]); a side's file= is copied into the worker's directory."""
    from engine.tools.compare import Comparison, Side, summary
    from engine.tools.judged_commands import apply_compare_verdicts, document_code
    from engine.tools.sandbox import explore_command as worker_command

    inputs = {f"side_{name}.py": Path(side.file).read_bytes() for name, side in zip("ab", sides)
              if side.file and Path(side.file).is_file()}

    def command(workdir: Path) -> list[str]:
        settings = []
        for name, given in (("a", args.a), ("b", args.b)):
            copied = f"side_{name}.py" in inputs
            settings += [f"--{name}"] + [f"file={workdir / f'side_{name}.py'}" if copied and s.strip().lower()
                                         .startswith("file=") else s for s in given]
        return worker_command(args.target, settings, "compare")

    document, verdicts, why_not = sandboxed_job(args, command, inputs)
    apply_compare_verdicts(document, verdicts, why_not)
    try:
        comparison = Comparison(Side(**document["a"]["settings"]), Side(**document["b"]["settings"]),
                                document["a"]["record"], document["b"]["record"], document["kernels"],
                                document["code_diff"], document["timing"])
        text = summary(comparison)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise Failure(f"compare: the worker's document is malformed ({type(error).__name__}: {error}).",
                      EXIT_FAILED, error) from error
    if not args.json:
        print(text)
        if args.verbose and comparison.code_diff:
            print(comparison.code_diff)
    return document, document_code(document)


# --- report --------------------------------------------------------------------------------------------------


def report_command(args) -> tuple[dict, int]:
    """Note [Offline report] in visualizers/html_report.py. The CLI's one call into a renderer, imported here
    only: the compiler core and the other commands never load it. A failed exploration still gets a report."""
    from visualizers.html_report import failed_record, report_html

    code = EXIT_OK
    if args.target.endswith(".json") and Path(args.target).is_file():
        record = read_record_file(Path(args.target))
    else:
        if not args.sandbox:
            warn_unsandboxed("report")
        explore_args = argparse.Namespace(**{**vars(args), "json": True, "out": None})
        try:
            with stdout_to_stderr():  # explore's own summary: none (json=True); what the model prints: stderr
                record, code = explore_command(explore_args)
        except (Failure, ModelFileError) as failure:
            spec_source = Path(args.target).read_text(encoding="utf-8") if Path(args.target).is_file() else ""
            record = failed_record(Path(args.target).stem, SourceFile(filename=args.target, text=spec_source),
                                   "explore", getattr(failure, "message", str(failure)))
            code = getattr(failure, "code", EXIT_FAILED)
    out = Path(args.out)
    if out.is_dir():
        out = out / "report.html"
    try:
        if not isinstance(record, Exploration):  # a hand-trimmed record file may leave out where it ran
            record = Exploration.from_json({"model": "model", "backend": "", "device": "", **record})
        page = report_html(record)
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        raise Failure(f"Cannot write a report of {args.target}: the record is malformed ({type(error).__name__}: "
                      f"{error}).", EXIT_USER_ERROR, error) from error
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as error:
        raise Failure(f"Cannot write the report to {out}: {error.strerror or error}.", EXIT_USER_ERROR,
                      error) from error
    print(f"Wrote {out} ({out.stat().st_size / 1e6:.1f} MB): open it in a browser, no network needed.",
          file=sys.stderr)
    return {"report": str(out), "errors": [error.to_json() for error in record.errors]}, code


# --- repro ---------------------------------------------------------------------------------------------------


def repro_command(args) -> tuple[dict, int]:
    """Note [Kernel reproducers] in engine/reproducer.py: explore (or read a record), write one file."""
    from engine.tools.repro_file import ReproError, repro_text

    if args.target.endswith(".json") and Path(args.target).is_file():
        record = json.loads(Path(args.target).read_text(encoding="utf-8"))
    else:
        warn_unsandboxed("repro")
        explore_args = argparse.Namespace(**{**vars(args), "json": True, "out": None, "sandbox": False,
                                             "profile": False, "inductor": False})
        with stdout_to_stderr():
            record, _ = explore_command(explore_args)
    try:
        text = repro_text(record, args.graph, args.kernel)
    except ReproError as error:
        raise Failure(f"repro: {error}", EXIT_USER_ERROR) from error
    out = Path(args.out or f"repro_{record.get('model', 'model')}_{args.kernel or 'graph' + str(args.graph or 0)}.py")
    out.write_text(text, encoding="utf-8")
    if not args.json:
        print(f"Wrote {out}: run it with `python {out}` (it checks the kernel against eager and times it).")
    return {"repro": str(out), "model": record.get("model"), "kernel": args.kernel, "graph": args.graph,
            "errors": record.get("errors") or []}, EXIT_OK

# --- asm and provenance --------------------------------------------------------------------------------------


def quiet_exploration(args) -> dict:
    """explore's record for the commands that ask it one question (asm, provenance); exploring's failures are
    theirs, reported the same way."""
    warn_unsandboxed(args.command)
    explore_args = argparse.Namespace(**{**vars(args), "json": True, "out": None, "sandbox": False,
                                         "inductor": False, "profile": False, "record_out": None})
    with stdout_to_stderr():  # explore's own summary: none (json=True); what the model prints: stderr
        record, _ = explore_command(explore_args)
    return record


def asm_command(args) -> tuple[dict, int]:
    from engine.tools.assembly import add_assembly

    record = Exploration.from_json(quiet_exploration(args))
    kernels = {k.name: (g, k) for g in record.graphs for k in g.kernels}
    lowered = [name for name, (g, k) in kernels.items()
               if g.code is not None and g.code.language == "triton" and (k.triton or k.template)]
    if args.kernel not in lowered:
        known = ", ".join(lowered) or "none (the C++ backend has no Triton kernels: use --backend triton)"
        what = "is a library or eager call, not a generated Triton kernel" if args.kernel in kernels else \
            "is not a kernel of this model"
        raise Failure(f"{args.kernel} {what}. Triton kernels: {known}.", EXIT_USER_ERROR)
    add_assembly(record, [args.kernel])
    asm = kernels[args.kernel][1].asm
    if asm.error:
        raise Failure(f"Triton could not lower {args.kernel}: {asm.error}", EXIT_FAILED)
    text = getattr(asm, args.level) or ""
    if not args.json:
        print(f"# {args.kernel}: {args.level.upper()} for {asm.target}")
        print(text)
    return {"kernel": args.kernel, "level": args.level, "target": asm.target, "text": text}, EXIT_OK


def provenance_command(args) -> tuple[dict, int]:
    from visualizers import provenance

    record = Exploration.from_json(quiet_exploration(args))
    found = []
    for graph in record.graphs:
        if args.line is not None:
            trace = provenance.from_user_line(graph, args.line)
        else:
            aten = [n for n in graph.aten if n.name == args.node]
            fx = {args.node} if any(n.name == args.node for n in graph.fx) else \
                {o for n in aten for o in n.fx_origins}
            trace = provenance.from_fx(graph, fx)
            if aten and not fx:
                trace.aten |= {args.node}
        if not (trace.fx or trace.aten):
            continue
        source = graph.code.source.splitlines() if graph.code else []
        lines = sorted(trace.generated_lines)
        found.append({"graph": graph.index, "user_lines": sorted(trace.user_lines), "fx": sorted(trace.fx),
                      "aten": sorted(trace.aten), "ir": sorted(trace.ir), "kernels": sorted(trace.kernels),
                      "generated_lines": [{"line": n, "text": source[n - 1] if 0 < n <= len(source) else ""}
                                          for n in lines]})
    what = f"line {args.line}" if args.line is not None else f"node {args.node}"
    if not found:
        raise Failure(f"Nothing in {record.model} comes from {what}: no FX or ATen node names it.", EXIT_USER_ERROR)
    if not args.json:
        for entry in found:
            print(f"{what} in graph {entry['graph']}:")
            for key, label in (("user_lines", "source lines"), ("fx", "FX nodes"), ("aten", "ATen nodes"),
                               ("ir", "loop IR nodes"), ("kernels", "kernels")):
                print(f"  {label}: {', '.join(map(str, entry[key])) or '-'}")
            print(f"  generated lines ({len(entry['generated_lines'])}):")
            for line in entry["generated_lines"]:
                print(f"    {line['line']:>5}  {line['text'].strip()}")
    return {"model": record.model, "query": {"line": args.line, "node": args.node}, "graphs": found}, EXIT_OK


# --- whatif --------------------------------------------------------------------------------------------------


def whatif_command(args) -> tuple[dict, int]:
    from engine.tools.whatif import WhatIfError, mark_dims, parse_dims, parse_inputs, what_if, what_if_lines

    warn_unsandboxed("whatif")
    spec = spec_on_device(load_model_file(args.target), args.device)
    try:
        inputs = parse_inputs(args.inputs, tuple(spec.example_inputs))
        dims = parse_dims(args.mark_dynamic)
        mark_dims(tuple(spec.example_inputs), dims)  # a wrong input or dim is the user's error, said before compiling
    except WhatIfError as error:
        raise Failure(f"whatif: {error}", EXIT_USER_ERROR) from error
    run_eager(spec)
    try:
        result = what_if(spec, inputs, backend=args.backend, device=args.device,
                         dynamic=True if args.dynamic else None, dynamic_dims=dims)
    except Exception as error:
        raise compile_failure(spec, error) from error
    if not args.json:
        print("\n".join(what_if_lines(result)))
    return result, EXIT_OK


# --- fix -----------------------------------------------------------------------------------------------------


def fix_command(args) -> tuple[dict, int]:
    """Note [Applying a rewrite] in engine/tools/apply_fix.py."""
    from engine.tools.apply_fix import FixError, apply_fix, concrete, run_time_text, summary

    warn_unsandboxed("fix")
    spec = load_model_file(args.target)
    explore_args = argparse.Namespace(**{**vars(args), "json": True, "out": None, "sandbox": False, "profile": False,
                                         "inductor": False, "trace": None, "time_call": True})
    with stdout_to_stderr():
        before, _ = explore_command(explore_args)
    breaks = before.get("graph_breaks") or []
    chosen = [(n, b) for n, b in enumerate(breaks, start=1) if args.break_number in (None, n)]
    source, applied = spec.source, []
    for number, graph_break in sorted(chosen, key=lambda item: -(item[1].get("lineno") or 0)):  # bottom up
        suggestion = Suggestion.from_json(graph_break["suggestion"]) if graph_break.get("suggestion") else None
        if not concrete(suggestion) or graph_break.get("filename") != spec.filename:
            continue
        try:
            source = apply_fix(source, graph_break["lineno"], suggestion)
            applied.append(number)
        except FixError as error:
            print(f"break {number}: {error}", file=sys.stderr)
    if not applied:
        raise Failure("fix: no graph break here has a concrete rewrite to apply", EXIT_USER_ERROR)
    out = Path(args.out or str(Path(spec.filename).with_name(Path(spec.filename).stem + "_fixed.py")))
    out.write_text(source, encoding="utf-8")
    with stdout_to_stderr():
        after, _ = explore_command(argparse.Namespace(**{**vars(explore_args), "target": str(out)}))
    result = {"file": str(out), "applied": sorted(applied), "before": summary(before), "after": summary(after),
              "source": source}
    if not args.json:
        print(f"Applied the rewrite of break(s) {', '.join(map(str, sorted(applied)))}; wrote {out}")
        for key in ("graph_breaks", "graphs", "kernels", "compile_s", "matches_eager"):
            print(f"  {key:14} {result['before'][key]!s:>6} -> {result['after'][key]!s}")
        for side in ("before", "after"):
            print(f"  {side}: a call {run_time_text(result[side])}")
    return result, EXIT_OK


def read_record_file(path: Path) -> dict:
    """A record file for `report`: a JSON object, or a Failure that says what is wrong with it."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise Failure(f"Cannot read the record {path}: {error}.", EXIT_USER_ERROR, error) from error
    if not isinstance(record, dict) or not all(isinstance(record.get(key, []), list)
                                               for key in ("graphs", "errors", "graph_breaks")):
        raise Failure(f"Cannot read the record {path}: it is not a Glassbox record (a JSON object with lists of "
                      "graphs, errors and graph breaks).", EXIT_USER_ERROR)
    if not all(isinstance(item, dict) for key in ("graphs", "errors", "graph_breaks") for item in record.get(key, [])):
        raise Failure(f"Cannot read the record {path}: its graphs, errors and graph breaks must be JSON objects.",
                      EXIT_USER_ERROR)
    return record


# --- shared --------------------------------------------------------------------------------------------------


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise Failure(f"--device cuda: CUDA is not available here (torch {torch.__version__}). "
                      "Use --device cpu.", EXIT_USER_ERROR)


def spec_on_device(spec: ModelSpec, device: str) -> ModelSpec:
    if device == "cpu":
        return spec

    from engine.run import same_layout_copy

    def move(inputs):  # in the layout the user gave (strides, expansion, offset): Note [Tolerance policy]'s run.fresh
        return tuple(same_layout_copy(x, device) if isinstance(x, torch.Tensor) else x for x in inputs)

    model = spec.model.to(device) if isinstance(spec.model, torch.nn.Module) else spec.model
    return dataclasses.replace(spec, model=model, example_inputs=move(spec.example_inputs),
                               dynamic_inputs=[move(inputs) for inputs in spec.dynamic_inputs])


def compile_failure(spec: ModelSpec, error: BaseException) -> Failure | ModelFileError:
    """What to report when compiling `spec` raised `error`: the user's error if the model fails eagerly too
    (Dynamo runs the user's code, so their bugs surface inside the compiler), otherwise ours."""
    try:
        run_eager(spec)
    except ModelFileError as user_error:
        return user_error
    except Exception:  # noqa: BLE001 - the eager check is a diagnosis; the compile error is what we report
        pass
    root = root_error(error)
    detail = one_paragraph(str(root))
    detail = f"{type(root).__name__}: {detail}" if detail else type(root).__name__
    return Failure(f"Glassbox failed while compiling {spec.name}: {detail.rstrip('.')}. "
                   "Run with --verbose for the traceback.", EXIT_FAILED, error)


def root_error(error: BaseException) -> BaseException:
    """Dynamo wraps our backend's exception in BackendCompilerFailed; the root is what the user should see."""
    from torch._dynamo.exc import BackendCompilerFailed

    seen = set()
    while isinstance(error, BackendCompilerFailed) and id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or getattr(error, "inner_exception", None)
        if inner is None:
            break
        error = inner
    return error


def one_paragraph(text: str, limit: int = 600) -> str:
    """The first paragraph of a message, on one line, cut to `limit` characters."""
    first = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    first = " ".join(first.split())
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def report_failure(failure: Failure | ModelFileError, verbose: bool) -> int:
    if isinstance(failure, ModelFileError):
        failure = Failure(failure.message, EXIT_USER_ERROR, failure)
    if verbose and failure.cause is not None:
        traceback.print_exception(failure.cause, file=sys.stderr)
        print(file=sys.stderr)
    print(failure.message, file=sys.stderr, flush=True)
    return failure.code


if __name__ == "__main__":
    sys.exit(main())
