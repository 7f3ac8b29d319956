"""Run user code in a sandboxed worker process, never in the server: namespaces, limits, a clean environment.

Every job the app runs (explore, bench, Inductor, Triton lowerings) goes through engine/tools/sandbox.py, the same
mechanism as `python -m engine explore --sandbox` and the hostile suite (Note [Sandbox], Note [Isolation]): the
worker, app/worker_main.py, runs under bubblewrap (its own PID, mount, IPC, UTS and network namespaces, an
unprivileged uid, a read-only system and compile cache) with a clean environment and a private directory (where
the model file is written), under wall-time, CPU-time, memory (cgroup), output and process limits. A model that hangs is
killed with its whole group at the time limit, one that crashes the interpreter ends the worker only, and an
interrupted Streamlit run (the user clicked something else, or Stop) kills the worker on the way out. A
standby worker with torch already imported takes the next job (Note [Standby worker]).

This module knows nothing about Streamlit: progress goes through an `on_tick(seconds_elapsed)` callback.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from app import settings
from app.worker_main import STACK_SIGNAL
from engine import options as engine_options
from engine.options import Options
from engine.record import ErrorRecord, Exploration, GraphRecord, VerifyRecord
from engine.tools import isolation, sandbox
from engine.tools.judged import (EVIDENCE_NAME, apply_inductor_verdict, apply_verdicts, judge_in_sandbox,
                                 read_evidence, verdict_code)
from engine.tools.judged_commands import apply_bench_verdicts, apply_compare_verdicts, document_code
from engine.tools.sandbox import Limits, SandboxResult

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "app" / "worker_main.py"

EXPLORE_TIMEOUT_S, BENCH_TIMEOUT_S, MEMORY_GB = settings.EXPLORE_TIMEOUT_S, settings.BENCH_TIMEOUT_S, settings.MEMORY_GB
MAX_TIMEOUT_S = 3600.0  # the most the sidebar's time limit may be set to
OUTPUT_MB, PROCESSES = 256, 64  # a large model's record is tens of MB of JSON; g++ and OpenMP are a few processes

EXIT_OK, EXIT_FAILED, EXIT_USER_ERROR = 0, 1, 2  # the CLI's exit codes (engine/__main__.py)


@dataclass
class Problem:
    """What went wrong, written for the person who pressed the button."""
    title: str
    message: str  # the paragraph to show (from the engine's ModelFileError/Failure, or ours)
    lineno: int | None = None  # the user's line, when known
    hints: list[str] = field(default_factory=list)
    log: str = ""  # the worker's stderr tail, for "details"


@dataclass
class Outcome:
    record: Exploration | None = None  # the typed record (may be present even with a problem: verify failed)
    problem: Problem | None = None
    inputs: list[dict] | None = None  # the example inputs as [{"dtype", "shape"}], when the launcher found them
    seconds: float = 0.0
    document: dict | None = None  # other workers' JSON (bench, Inductor)


@dataclass
class Finished:
    """One job's end: the sandbox's result, the files it was asked to bring back, and whether the job returned
    (False: the process ended before the job did, by a signal, a limit, or the model calling os._exit)."""
    result: SandboxResult
    files: dict[str, str | None]
    completed: bool
    workdir: str

    @property
    def returncode(self) -> int | None:
        return self.result.returncode

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        """The worker's stderr with its private directory taken out of paths (users see `pasted.py:3`)."""
        return self.result.stderr.replace(self.workdir + os.sep, "")

    @property
    def seconds(self) -> float:
        return self.result.wall_s


def limits(timeout_s: float = EXPLORE_TIMEOUT_S, memory_gb: float = MEMORY_GB) -> Limits:
    """The sandbox limits of one job. CPU time: all cores busy for the whole wall time, a backstop that still
    holds should the server die while the worker runs (nobody would watch the wall time then)."""
    memory_mb = int(memory_gb * 1024) if memory_gb > 0 else 1 << 40
    return Limits(timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=int(timeout_s * (os.cpu_count() or 1)) + 30,
                  output_bytes=OUTPUT_MB << 20, processes=PROCESSES)


def protection_missing() -> str:
    """What the sandbox cannot enforce on this machine, in words ("" when everything is in force)."""
    return isolation.missing_protection_words()


# Note [Standby worker]; its CPU limit is lowered to each job's when the job is handed over
STANDBY = sandbox.Standby([sys.executable, str(LAUNCHER), "--standby"], limits(MAX_TIMEOUT_S),
                          env={"PYTHONUNBUFFERED": "1"},  # what a crashing model printed last still shows
                          enabled=settings.STANDBY,
                          stack_signal=STACK_SIGNAL)  # app/worker_main.py prints its stack on it


def run_job(arguments: Callable[[Path], list[str]], job_limits: Limits, inputs: dict[str, str] | None = None,
            outputs: tuple[str, ...] = (), on_tick: Callable[[float], None] | None = None) -> Finished:
    """One job in a sandboxed worker: the standby if one is ready, else one started now. `inputs` (file name ->
    text) are written into the worker's private directory, `arguments(directory)` are the launcher's arguments,
    and the `outputs` files are read back before the directory is removed. An exception out of on_tick (the
    Streamlit run was interrupted) kills the worker's group and goes on."""
    process, refill_delay_s = STANDBY.take(), 0.5
    try:
        if process is not None and not _hand_over(process, arguments, job_limits, inputs):
            process.close()  # it died while waiting (say, the system's OOM killer): start one now
            process = None
        if process is None:
            process = STANDBY.start()
            _hand_over(process, arguments, job_limits, inputs)  # if it ended at once, wait() says how
        workdir = process.workdir
        result = process.wait(on_tick, started=(workdir / "started").exists)  # the job's clock: Note [Standby worker]
        files = {name: read_evidence(workdir / name) if name == EVIDENCE_NAME else _read(workdir / name)
                 for name in outputs}
        completed = _read(workdir / "finished") is not None
        # after a good result the browser is busy drawing it for a few seconds, and importing torch at the same
        # time would slow that down on a small machine; after a failure there is little to draw, and the user
        # is about to try again
        refill_delay_s = 6.0 if result.ok and completed else 0.5
        return Finished(result, files, completed, str(workdir))
    finally:
        if process is not None:
            process.close()
        STANDBY.refill_later(refill_delay_s)


def _hand_over(process: sandbox.SandboxedProcess, arguments: Callable[[Path], list[str]], job_limits: Limits,
               inputs: dict[str, str] | None) -> bool:
    for name, text in (inputs or {}).items():
        (process.workdir / name).write_text(text, encoding="utf-8")
    job = {"argv": arguments(process.workdir), "started": str(process.workdir / "started"),
           "finished": str(process.workdir / "finished")}
    return process.send(json.dumps(job), job_limits)


# Note [Reading what a worker wrote]
# The worker's directory is the one place the sandboxed model can write that this server reads back, and the server
# reads it with its own rights, outside every namespace. So a name there is read only as what it claims to be: a
# regular file of the directory itself, opened without following a symbolic link (a model that leaves record.json
# pointing at a server file or at /dev/zero gets nothing read), without blocking (a FIFO), and no larger than a
# worker may print (a sparse file of 100 GB takes no disk but would take the server's memory). Anything else
# reads as missing, and the outcome says the worker left no result.
def _read(path: Path, limit_bytes: int = OUTPUT_MB << 20) -> str | None:
    data = read_evidence(path, limit_bytes)
    return None if data is None else data.decode("utf-8", errors="replace")


# --- explore ---------------------------------------------------------------------------------------------------


def model_file_name(label: str) -> str:
    """A safe file name for the user's code: it shows in messages and graph-break locations."""
    stem = re.sub(r"\W+", "_", label).strip("_") or "model"
    return f"{stem}.py"


def explore(source: str, label: str, options: Options, timeout: float = EXPLORE_TIMEOUT_S,
            on_tick: Callable[[float], None] | None = None, memory_gb: float = MEMORY_GB) -> Outcome:
    """Explore model code (`source`, shown to the user as `label`.py) in a worker: the record, or a Problem."""
    name = model_file_name(label)
    # the model file runs once, in the CLI; its record (written even when exploring fails) carries the input
    # shapes and, as data, what went wrong; the call is timed against eager (a graph-break fix's before and after)
    finished = run_job(lambda workdir: ["--", "explore", str(workdir / name), "--record-out",
                                        str(workdir / "record.json"), "--evidence-out", str(workdir / EVIDENCE_NAME),
                                        "--time-call", *engine_options.cli_args(options)],
                       limits(timeout, memory_gb), inputs={name: source}, outputs=("record.json", EVIDENCE_NAME),
                       on_tick=on_tick)
    return explore_outcome(finished, name)


# The errors that end a job, as data (explore and bench --record-out in engine/__main__.py, app/inductor_worker.py):
# ErrorRecord.kind -> (title, what to try)
FAILED: dict[str, tuple[str, list[str]]] = {
    "model": ("There is a problem in the model code",
              ["Fix the line shown and explore again.",
               "A model file defines `model` (an nn.Module instance or a function) and `example_inputs` (a tuple "
               "of tensors)."]),
    "compile": ("Glassbox could not compile this model",
                ["This is most likely a gap in the compiler, not a mistake in your code.",
                 "Try the other backend, or simplify the model around the line named above."]),
    "fallback": ("Glassbox failed on a graph, which ran eagerly instead",
                 ["This is a compiler bug, not yours: the outputs are eager's for that graph, and the run stage "
                  "lists the error.", "Try the other backend."]),
    "inductor": ("Inductor could not compile this model",
                 ["This is Inductor's (torch.compile's) error, shown as it reported it."]),
}


def explore_outcome(finished: Finished, name: str = "") -> Outcome:
    """The job's record, read once into the typed Exploration (Note [Strict record]: a document that is not a
    record of this schema is refused whole, never half read), its verdict judged outside the job (Note [Judged
    outside the job] in engine/tools/judged.py), and what went wrong, from the record's errors."""
    text = finished.files.get("record.json")
    document = parse_json(text) if text is not None else parse_json(finished.stdout)
    record, unreadable = None, ""
    returncode = finished.returncode
    failed = isinstance(document, dict) and any(isinstance(e, dict) and e.get("kind") in ("model", "compile", "usage")
                                                for e in document.get("errors") or [])
    if isinstance(document, dict) and finished.completed and not finished.result.limit_hit and not failed:
        apply_verdicts(document, *judged_evidence(finished))
        returncode = verdict_code(document, name)[0]  # the job's own exit code is the model's to forge
    if document is not None:
        _strip_workdir(document, Path(finished.workdir))
        try:
            record = Exploration.from_json(document)
        except (TypeError, ValueError) as error:
            unreadable = f"{type(error).__name__}: {error}"
    if unreadable:
        problem = Problem("Glassbox could not read the worker's record",
                          f"The worker returned a record this app cannot read ({unreadable}).",
                          hints=["The worker and the app come from different versions of Glassbox, or the model "
                                 "wrote to the worker's output: restart the app."],
                          log=finished.stderr.strip()[-4000:])
        return Outcome(problem=problem, seconds=finished.seconds)
    inputs = [spec.to_json() for spec in record.input_specs] if record is not None else []
    inputs = inputs or None
    if returncode == EXIT_OK and record is not None and finished.completed:
        return Outcome(record=record, inputs=inputs, seconds=finished.seconds)
    if record is not None and finished.completed and record.verify.verdict == "random":
        return Outcome(record=record, inputs=inputs, seconds=finished.seconds, problem=Problem(
            "The model is random: nothing could be checked", record.verify.problem or "",
            hints=["Call model.eval() (dropout), or make the randomness an input."],
            log=finished.stderr.strip()[-4000:]))
    failure = failed_with(record.errors if record else [], finished)
    if failure is not None:
        shown = record if failure.kind == "fallback" else None  # a fallback's record is whole: show it
        return Outcome(record=shown, inputs=inputs, problem=structured_problem(failure, finished),
                       seconds=finished.seconds)
    if record is not None and returncode == EXIT_FAILED and finished.completed:
        # explore's other failure (engine/__main__.py): the outputs differ from eager, which verify says
        return Outcome(record=record, inputs=inputs, problem=mismatch_problem(record.verify, finished),
                       seconds=finished.seconds)
    return Outcome(record=record, inputs=inputs, problem=diagnose(finished, record, model_name=name),
                   seconds=finished.seconds)


def mismatch_problem(verify: VerifyRecord, finished: Finished) -> Problem:
    return Problem("Glassbox's output differs from eager PyTorch",
                   verify.problem or "Verification failed: see the run stage for the errors per output.",
                   hints=["This is a compiler bug, not yours: the run stage shows which output differs."],
                   log=finished.stderr.strip()[-4000:])


def failed_with(errors: list[ErrorRecord], finished: Finished) -> ErrorRecord | None:
    """The error that ended a job that returned (a job stopped at a limit or by a signal did not return: its
    errors, if any, are not why it ended)."""
    if not finished.completed or finished.result.limit_hit:
        return None
    return next((error for error in errors if error.kind in FAILED), None)


def structured_problem(error: ErrorRecord, finished: Finished) -> Problem:
    title, hints = FAILED[error.kind]
    return Problem(title, error.message, error.lineno, hints=hints, log=finished.stderr.strip()[-4000:])


def document_errors(document: dict | None, workdir: str) -> list[ErrorRecord]:
    """A job document's errors[] (bench, Inductor) as the record's ErrorRecord, the worker's directory taken
    out of paths; entries that are not ErrorRecords are refused whole (Note [Strict record])."""
    if not document:
        return []
    _strip_workdir(document, Path(workdir))
    try:
        return [ErrorRecord.from_json(error) for error in document.get("errors") or []]
    except (TypeError, ValueError):
        return []


def _strip_workdir(record: dict, workdir: Path) -> None:
    """The temp directory is an implementation detail: show `softmax_edited.py:14`, not /tmp/.../softmax_edited.py."""
    prefix = str(workdir) + os.sep

    def strip(value):
        if isinstance(value, dict):
            for key, item in value.items():
                value[key] = strip(item)
            return value
        if isinstance(value, list):
            return [strip(item) for item in value]
        if isinstance(value, str) and prefix in value:
            return value.replace(prefix, "")
        return value

    for key in ("source", "graph_breaks", "errors", "recompiles"):
        if key in record:
            record[key] = strip(record[key])
    for graph in record.get("graphs") or []:
        for node in (graph.get("fx") or []) + (graph.get("aten") or []):
            if isinstance(node.get("source"), dict):
                strip(node["source"])


def parse_json(text: str) -> dict | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = json.loads(text.splitlines()[-1]) if not text.startswith("{") else json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --- errors that read as help ----------------------------------------------------------------------------------

LINE_IN_MESSAGE = re.compile(r"\b[\w.<>-]+\.py:(\d+)|<pasted>:(\d+)")


MESSAGE_START = re.compile(r"^(\w+(Error|Exception|Interrupt|Exit)\b|Glassbox |`\w+`|No model |There is no |"
                           r"--\w+|[\w./<>-]+\.py\b)")


def last_paragraph(text: str) -> str:
    """The CLI prints its one-paragraph message last on stderr, after whatever torch or the model printed.

    A message may carry an indented source excerpt and a "Check ..."/"Fix ..." trailer as paragraphs of their own
    (engine/tools/model_file.py); they are kept with the paragraph they belong to.
    """
    paragraphs = [p.strip("\n").rstrip() for p in re.split(r"\n[ \t]*\n", text.strip("\n")) if p.strip()]
    if not paragraphs:
        return ""
    tail = [paragraphs[-1]]
    index = len(paragraphs) - 2
    while index >= 0 and _continues(tail[0]):
        tail.insert(0, paragraphs[index])
        index -= 1
    lines = tail[0].splitlines()
    starts = [i for i, line in enumerate(lines) if MESSAGE_START.match(line)]
    if starts:  # drop what the model printed just before the message, in the same paragraph
        tail[0] = "\n".join(lines[starts[-1]:])
    return "\n\n".join(tail)


def _continues(paragraph: str) -> bool:
    """True for a paragraph that only makes sense after the one before it (an excerpt or a trailer)."""
    return paragraph.startswith((" ", "\t", "^")) or paragraph.startswith(("Check ", "Fix "))


def user_line(message: str) -> int | None:
    match = LINE_IN_MESSAGE.search(message)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def diagnose(finished: Finished, record: Exploration | dict | None = None, model_name: str = "") -> Problem:
    """The Problem for a job that did not end well and left no error as data: the sandbox's words for limits
    and signals (one wording for the app, the CLI and the hostile suite), the CLI's own paragraph for everything
    else. `model_name` is the model's file name, to find the user's line in the stack a stopped or crashed
    worker printed."""
    result = finished.result
    stderr = finished.stderr
    tail = stderr.strip()[-4000:]
    if result.limit_hit or result.signal is not None:
        title, hints = STOPPED.get(result.limit_hit or "", STOPPED["signal"])
        message, lineno = result.summary(), None
        where = stopped_at(stderr, model_name)
        if where is not None:
            lineno, function = where
            scope = f" (in {function})" if function != "<module>" else ""  # the message is plain text
            message += f" It was running line {lineno} of {model_name}{scope} at that moment."
        if result.signal == signal.SIGINT:
            title = "The model's process was interrupted"
            hints = ["Look for `raise KeyboardInterrupt` (or code that sends SIGINT) in the model."]
        elif result.signal == signal.SIGKILL:
            title = "The model's process was killed"
            hints = [f"The model may have used all the machine's memory before reaching its limit "
                     f"({result.limits.memory_mb} MB): try smaller inputs.",
                     "Explore again: if nothing in the model kills its own process, this was a one-off."]
        return Problem(title, message, lineno, hints=hints, log=tail)
    if not finished.completed:
        raised = uncaught_exception(stderr, tail, model_name)
        if raised is not None:
            return raised
        return Problem(
            "The model's process ended early",
            f"The model's process exited (exit code {result.returncode}) before Glassbox could finish or "
            "report anything. Something in the model ended the Python process directly, most likely "
            "os._exit(), or a library that exits the process on an error.",
            hints=["Remove the call that ends the process (os._exit, or exit() in a C extension).",
                   "The model must return from `model(*example_inputs)` for Glassbox to compile and compare it."],
            log=tail)
    message = last_paragraph(stderr)
    lineno = user_line(message)
    if result.returncode == EXIT_USER_ERROR:
        return Problem("There is a problem in the model code", message or tail, lineno,
                       hints=["Fix the line shown and explore again.",
                              "A model file defines `model` (an nn.Module instance or a function) and "
                              "`example_inputs` (a tuple of tensors)."],
                       log=tail)
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return Problem("The model ran out of memory",
                       message or "The worker could not allocate memory.", lineno,
                       hints=["Try smaller inputs, or raise the memory limit in the sidebar (Limits), then press "
                              "Re-explore."],
                       log=tail)
    if record is not None:
        return Problem("Glassbox's output differs from eager PyTorch",
                       message or "Verification failed: see the run stage for the errors per output.", lineno,
                       hints=["This is a compiler bug, not yours: the run stage shows which output differs."],
                       log=tail)
    return Problem("Glassbox could not compile this model",
                   message or f"The worker exited with code {result.returncode}.", lineno,
                   hints=["This is most likely a gap in the compiler, not a mistake in your code.",
                          "Try the other backend, or simplify the model around the line named above."],
                   log=tail)


# a frame of the stack faulthandler prints ("line N in f", most recent call first), and of a Python traceback
# ("line N, in f", most recent call last)
STACK_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)', re.MULTILINE)
TRACEBACK_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.MULTILINE)


EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(: |$)")  # what an uncaught exception prints last: "KeyError: 'x'"


def uncaught_exception(stderr: str, log: str, model_name: str) -> Problem | None:
    """The Problem for a worker that an uncaught Python exception ended (its traceback is the last thing it
    printed): the model's own error where the innermost frame is in the model's file, else a crash of Glassbox's
    own code, said as ours rather than blamed on the model; None when no traceback ends the output."""
    start = stderr.rfind("Traceback (most recent call last)")
    frames = TRACEBACK_FRAME.findall(stderr[start:]) if start >= 0 else []
    lines = [line for line in stderr[start:].splitlines() if line.strip()] if start >= 0 else []
    if not frames or not lines or not EXCEPTION_LINE.match(lines[-1]):
        return None  # the output goes on after the traceback: something else ended the process
    error = lines[-1].strip()
    filename, lineno, function = frames[-1]
    if model_name and Path(filename).name == model_name:
        return Problem("There is a problem in the model code", f"{error} (line {lineno} of {model_name}, in "
                       f"{function})", int(lineno), hints=["Fix the line shown and explore again."], log=log)
    return Problem("Glassbox's worker crashed",
                   f"Glassbox's own code raised `{error}` (in {Path(filename).name}, line {lineno}, {function}) "
                   "and ended the worker before it could report. This is a bug in Glassbox, not in your model.",
                   None, hints=["Explore again; if it happens again, try the other backend.",
                                "The log below has the whole traceback: please report it with the model."], log=log)


def stopped_at(stderr: str, model_name: str) -> tuple[int, str] | None:
    """(line, function) of the innermost frame in the user's file, in the last stack the worker printed as it
    crashed or was stopped (app/worker_main.py) or the last traceback (KeyboardInterrupt), or None."""
    first, last = stderr.rfind("(most recent call first)"), stderr.rfind("(most recent call last)")
    if not model_name or max(first, last) < 0:
        return None
    if first > last:
        frames = STACK_FRAME.findall(stderr[first:])
    else:
        frames = TRACEBACK_FRAME.findall(stderr[last:])[::-1]
    for filename, line, function in frames:
        if Path(filename).name == model_name:
            return int(line), function
    return None


# What a stopped worker's Problem says beyond the sandbox's explanation: (title, what to try)
STOPPED: dict[str, tuple[str, list[str]]] = {
    "time": ("The model ran too long and was stopped",
             ["Look for a loop that never ends in the model or in `example_inputs`.",
              "Try smaller inputs: fewer rows, a smaller batch, fewer layers.",
              "If the model is just slow, raise the time limit in the sidebar (Limits), then press Re-explore."]),
    "cpu": ("The model used too much processor time and was stopped",
            ["Look for a loop that never ends, or raise the time limit in the sidebar (Limits), then press "
             "Re-explore."]),
    "memory": ("The model used too much memory and was stopped",
               ["Try smaller inputs: fewer rows, a smaller batch, fewer layers.",
                "Look for a list or cache that keeps growing.",
                "If the model really needs it, raise the memory limit in the sidebar (Limits), then press "
                "Re-explore."]),
    "output": ("The model printed too much and was stopped",
               ["Remove the large prints; the worker's output is kept to a few hundred MB."]),
    "processes": ("The model started too many processes and was stopped",
                  ["Models must not fork or start processes in a loop."]),
    "signal": ("The model's process crashed",
               ["A crash in native code (a C/C++ extension, ctypes, a generated kernel) ends the process this "
                "way; the app itself is fine.",
                "Try smaller inputs, or the other backend, to see whether the crash depends on them."]),
}


# --- bench and Inductor (on demand; slow) -------------------------------------------------------------------


def bench(source: str, label: str, options: Options, timeout: float = BENCH_TIMEOUT_S,
          on_tick: Callable[[float], None] | None = None, min_time: float = 0.2,
          memory_gb: float = MEMORY_GB, with_inductor: bool = True) -> Outcome:
    """`python -m engine bench FILE --json --quick`: eager vs Glassbox (vs Inductor, whose cold compile takes
    tens of seconds, when `with_inductor`), in one worker: the CLI's own bench and timing (Note [Fair timing])."""
    name = model_file_name(label)
    # like explore's record, the bench document is written even when benching fails, its errors[] saying why
    finished = run_job(lambda workdir: ["--", "bench", str(workdir / name), "--json", "--record-out",
                                        str(workdir / "bench.json"), "--min-time", str(min_time), "--quick",
                                        *engine_options.cli_args(options, ("backend", "device", "mode", "train"))]
                                       + ([] if with_inductor else ["--no-inductor"])
                                       + ["--evidence-out", str(workdir / EVIDENCE_NAME)],
                       limits(timeout, memory_gb), inputs={name: source}, outputs=("bench.json", EVIDENCE_NAME),
                       on_tick=on_tick)
    text = finished.files.get("bench.json")
    document = parse_json(text) if text is not None else None
    returncode = finished.returncode
    if isinstance(document, dict) and finished.completed and not finished.result.limit_hit:
        # Note [Bench and compare judged outside the job]: the rows' checks too are judged where the model never
        # ran, and the job's own exit code is the model's to forge
        apply_bench_verdicts(document, *judged_evidence(finished))
        returncode = document_code(document)
    if returncode == EXIT_OK and document is not None and finished.completed:
        return Outcome(document=document, seconds=finished.seconds)
    failure = failed_with(document_errors(document, finished.workdir), finished)
    if failure is not None:
        return Outcome(document=document, problem=structured_problem(failure, finished), seconds=finished.seconds)
    return Outcome(document=document, problem=diagnose(finished, document, model_name=name),
                   seconds=finished.seconds)


def judged_evidence(finished: Finished) -> tuple[list[dict] | None, str]:
    """The verdicts of a job's evidence, judged by a fresh sandboxed process (Note [Judged outside the job])."""
    evidence = finished.files.get(EVIDENCE_NAME)
    if evidence is None:
        return None, "the job wrote no evidence (its outputs as data)"
    return judge_in_sandbox(evidence)


def inductor(source: str, label: str, options: Options, timeout: float = BENCH_TIMEOUT_S,
             on_tick: Callable[[float], None] | None = None, memory_gb: float = MEMORY_GB) -> Outcome:
    """Real Inductor's output code for the same model (app/inductor_worker.py in a worker)."""
    name, dynamic = model_file_name(label), ["--dynamic"] if options.dynamic else []
    finished = run_job(lambda workdir: ["--inductor", "--", str(workdir / name), "--out",
                                        str(workdir / "inductor.json"), "--device", options.device, *dynamic],
                       limits(timeout, memory_gb), inputs={name: source}, outputs=("inductor.json", EVIDENCE_NAME),
                       on_tick=on_tick)
    try:
        document = json.loads(finished.files["inductor.json"] or "")
    except ValueError:
        document = None
    if finished.returncode == EXIT_OK and isinstance(document, dict) and document.get("ok") and finished.completed:
        # Note [Judged outside the job]: Inductor's check too is judged where the model never ran
        apply_inductor_verdict(document, *judged_evidence(finished))
        return Outcome(document=document, seconds=finished.seconds)
    failure = failed_with(document_errors(document, finished.workdir), finished)
    problem = structured_problem(failure, finished) if failure else diagnose(finished, model_name=name)
    return Outcome(document=document, problem=problem, seconds=finished.seconds)


def assembly(graph: GraphRecord, kernel_names: list[str], timeout: float = BENCH_TIMEOUT_S,
             on_tick: Callable[[float], None] | None = None) -> Outcome:
    """Triton's lowerings (TTIR, TTGIR, LLIR, PTX, SASS) of some kernels of one graph of a record, compiled by
    the engine for display in a worker: document {"kernels": {name: {"ttir", ..., "error"?}}} or {"error"}."""
    graph_json = json.dumps({"graphs": [{"code": graph.code.to_json() if graph.code else {},
                                         "kernels": [kernel.to_json() for kernel in graph.kernels]}]})
    finished = run_job(lambda workdir: ["--asm", "--", str(workdir / "graph.json"), str(workdir / "asm.json"),
                                        *kernel_names],
                       limits(timeout), inputs={"graph.json": graph_json}, outputs=("asm.json",), on_tick=on_tick)
    try:
        document = json.loads(finished.files["asm.json"] or "")
    except ValueError:
        document = None
    if document is not None and "kernels" in document:
        return Outcome(document=document, seconds=finished.seconds)
    problem = diagnose(finished)
    if document and document.get("error"):
        problem = Problem("Triton could not lower this kernel for display", document["error"],
                          hints=["The kernel still runs (under the interpreter on a CPU); only its GPU "
                                 "assembly could not be produced."], log=finished.stderr[-4000:])
    return Outcome(document=document, problem=problem, seconds=finished.seconds)


def compare(source: str, label: str, side_a: list[str], side_b: list[str], edited: str | None = None,
            timeout: float = BENCH_TIMEOUT_S, on_tick: Callable[[float], None] | None = None,
            memory_gb: float = MEMORY_GB) -> Outcome:
    """`python -m engine compare FILE --a ... --b ... --json` (engine/tools/compare.py) in one worker. With
    `edited`, side B explores that code instead (before vs after an edit)."""
    name = model_file_name(label)
    inputs = {name: source, **({"edited.py": edited} if edited is not None else {})}

    def arguments(workdir: Path) -> list[str]:
        b = side_b + ([f"file={workdir / 'edited.py'}"] if edited is not None else [])
        return ["--", "compare", str(workdir / name), "--a", *side_a, "--b", *b, "--json", "--evidence-out",
                str(workdir / EVIDENCE_NAME)]

    finished = run_job(arguments, limits(timeout, memory_gb), inputs=inputs, outputs=(EVIDENCE_NAME,),
                       on_tick=on_tick)
    document = parse_json(finished.stdout)
    if finished.returncode in (EXIT_OK, EXIT_FAILED, EXIT_USER_ERROR) and isinstance(document, dict) \
            and finished.completed and not finished.result.limit_hit:
        # Note [Bench and compare judged outside the job]: each side's check judged where the model never ran
        apply_compare_verdicts(document, *judged_evidence(finished))
        return Outcome(document=document, seconds=finished.seconds)
    return Outcome(document=document, problem=diagnose(finished, document, model_name=name),
                   seconds=finished.seconds)


def profile(source: str, label: str, options: Options, timeout: float = BENCH_TIMEOUT_S,
            on_tick: Callable[[float], None] | None = None, memory_gb: float = MEMORY_GB) -> Outcome:
    """`explore FILE --profile --json`: the record with every kernel timed (engine/runtime/profile.py)."""
    name = model_file_name(label)
    finished = run_job(lambda workdir: ["--", "explore", str(workdir / name), "--json", "--profile",
                                        "--evidence-out", str(workdir / EVIDENCE_NAME),
                                        *engine_options.cli_args(options)],
                       limits(timeout, memory_gb), inputs={name: source}, outputs=(EVIDENCE_NAME,), on_tick=on_tick)
    return explore_outcome(finished, name)
