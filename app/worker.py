"""Run user code in a separate worker process: a wall-time limit, a memory limit, killable, never in the server.

Every model the app explores runs as `python app/worker_main.py ... -- explore FILE --json` (the engine's CLI,
DESIGN.md "CLI") in its own process group. The server only waits, polls and reads files: a model that hangs is
killed with its whole group at the time limit, a model that crashes the interpreter ends the worker only, and
an interrupted Streamlit run (the user clicked something else, or Stop) kills the worker on the way out.

This module knows nothing about Streamlit: progress goes through an `on_tick(seconds_elapsed)` callback.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "app" / "worker_main.py"

EXPLORE_TIMEOUT_S = float(os.environ.get("GLASSBOX_APP_TIMEOUT", "180"))
BENCH_TIMEOUT_S = float(os.environ.get("GLASSBOX_APP_BENCH_TIMEOUT", "420"))
MEMORY_GB = float(os.environ.get("GLASSBOX_APP_MEMORY_GB", "8"))

EXIT_OK, EXIT_FAILED, EXIT_USER_ERROR = 0, 1, 2  # the CLI's exit codes (engine/__main__.py)


@dataclass
class Options:
    backend: str = "cpp"
    device: str = "cpu"
    dynamic: bool = False

    def cli_args(self) -> list[str]:
        return ["--backend", self.backend, "--device", self.device] + (["--dynamic"] if self.dynamic else [])


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
    record: dict | None = None  # the Exploration record (may be present even with a problem: verify failed)
    problem: Problem | None = None
    inputs: list[dict] | None = None  # the example inputs as [{"dtype", "shape"}], when the launcher found them
    seconds: float = 0.0
    document: dict | None = None  # other workers' JSON (bench, Inductor)


@dataclass
class Finished:
    returncode: int | None  # None: killed at the time limit
    stdout: str
    stderr: str
    seconds: float


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class StandbyPool:
    """One worker process started ahead of time, with torch and the engine already imported, so the next
    exploration skips most of its start-up. Each standby runs exactly one job; a fresh one is started after each
    job (not during it, nor right after it: on a small machine the import would slow the job down, or the
    browser drawing the job's result)."""

    MAX_AGE_S = 600  # a standby older than this may hold stale engine code (the engine is edited live)

    def __init__(self):
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._born = 0.0

    def refill(self) -> None:
        if os.environ.get("GLASSBOX_APP_STANDBY", "1") == "0":
            return
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                if time.monotonic() - self._born < self.MAX_AGE_S:
                    return
                kill_group(self._process)
            self._process = subprocess.Popen(
                [sys.executable, str(LAUNCHER), "--standby"], cwd=ROOT, env=worker_env(), stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            self._born = time.monotonic()

    def refill_later(self, delay_s: float = 6.0) -> None:
        """Refill after a pause: right after a job the browser is busy drawing its result, and on a two-core
        machine importing torch at the same time would make that slower."""
        timer = threading.Timer(delay_s, self.refill)
        timer.daemon = True
        timer.start()

    def take(self) -> subprocess.Popen | None:
        with self._lock:
            process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return None
        if time.monotonic() - self._born > self.MAX_AGE_S:
            kill_group(process)
            return None
        return process

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            kill_group(process)


STANDBY = StandbyPool()


def _start(arguments: list[str], out_path: Path, err_path: Path) -> subprocess.Popen:
    """The standby worker given this job, or a fresh worker when none is ready."""
    process = STANDBY.take()
    if process is not None:
        job = json.dumps({"argv": arguments, "stdout": str(out_path), "stderr": str(err_path)})
        try:
            process.stdin.write((job + "\n").encode("utf-8"))
            process.stdin.close()
            return process
        except OSError:  # it died just now: start fresh
            kill_group(process)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        return subprocess.Popen([sys.executable, str(LAUNCHER), *arguments], cwd=ROOT, env=worker_env(),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)


def run_process(arguments: list[str], timeout: float, workdir: Path,
                on_tick: Callable[[float], None] | None = None, tick_s: float = 0.25) -> Finished:
    """Run app/worker_main.py with `arguments` in its own session, output to files (no pipe can fill up); kill
    its group on timeout or when the caller is interrupted (an exception out of on_tick, e.g. Streamlit stopping
    the script)."""
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    start = time.monotonic()
    process = _start(arguments, out_path, err_path)
    returncode: int | None = None
    try:
        while True:
            try:
                returncode = process.wait(timeout=tick_s)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.monotonic() - start
                if elapsed > timeout:
                    break
                if on_tick is not None:
                    on_tick(elapsed)
    finally:
        if process.poll() is None:
            kill_group(process)
        STANDBY.refill_later()
    return Finished(returncode, _read(out_path), _read(err_path), time.monotonic() - start)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (it started a session, so its pgid is its pid)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# --- explore ---------------------------------------------------------------------------------------------------


def model_file_name(label: str) -> str:
    """A safe file name for the user's code: it shows in messages and graph-break locations."""
    stem = re.sub(r"\W+", "_", label).strip("_") or "model"
    return f"{stem}.py"


def explore(source: str, label: str, options: Options, timeout: float = EXPLORE_TIMEOUT_S,
            on_tick: Callable[[float], None] | None = None) -> Outcome:
    """Explore model code (`source`, shown to the user as `label`.py) in a worker: the record, or a Problem."""
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-run-"))
    try:
        model_path = workdir / model_file_name(label)
        model_path.write_text(source, encoding="utf-8")
        inputs_path = workdir / "inputs.json"
        command = ["--memory-gb", str(memory_gb(options)), "--inputs-out", str(inputs_path), "--",
                   "explore", str(model_path), "--json", *options.cli_args()]
        finished = run_process(command, timeout, workdir, on_tick)
        outcome = explore_outcome(finished, timeout, workdir)
        try:
            outcome.inputs = json.loads(inputs_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            outcome.inputs = None
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def memory_gb(options: Options) -> float:
    # CUDA reserves a large virtual address space up front: an address-space cap would break it
    return 0.0 if options.device == "cuda" else MEMORY_GB


def explore_outcome(finished: Finished, timeout: float, workdir: Path) -> Outcome:
    record = parse_json(finished.stdout)
    stderr = finished.stderr.replace(str(workdir) + os.sep, "")
    if record is not None:
        _strip_workdir(record, workdir)
    if finished.returncode == EXIT_OK and record is not None:
        return Outcome(record=record, seconds=finished.seconds)
    problem = diagnose(finished.returncode, stderr, timeout, record)
    return Outcome(record=record, problem=problem, seconds=finished.seconds)


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
    (engine/model_file.py); they are kept with the paragraph they belong to.
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


def diagnose(returncode: int | None, stderr: str, timeout: float, record: dict | None = None) -> Problem:
    tail = stderr.strip()[-4000:]
    if returncode is None:
        return Problem(
            "The model ran too long and was stopped",
            f"The worker ran for more than {timeout:.0f} s, so it was killed (with everything it started).",
            hints=["Look for a loop that never ends in the model or in `example_inputs`.",
                   "Try smaller inputs: fewer rows, a smaller batch, fewer layers.",
                   "The time limit is GLASSBOX_APP_TIMEOUT seconds (set it before starting the app)."],
            log=tail)
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Problem(
            "The worker process crashed",
            f"The process running the model ended with {name}. The app is fine; only the worker died.",
            hints=["A crash in native code (a C++ kernel, a library call) or running out of memory ends the worker "
                   "this way.",
                   "Try smaller inputs, or the other backend, to see whether the crash depends on them."],
            log=tail)
    message = last_paragraph(stderr)
    lineno = user_line(message)
    if returncode == EXIT_USER_ERROR:
        return Problem("There is a problem in the model code", message or tail, lineno,
                       hints=["Fix the line shown and explore again.",
                              "A model file defines `model` (an nn.Module instance or a function) and "
                              "`example_inputs` (a tuple of tensors)."],
                       log=tail)
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return Problem("The model ran out of memory",
                       message or "The worker hit its memory limit.", lineno,
                       hints=[f"The worker may use {MEMORY_GB:g} GiB (GLASSBOX_APP_MEMORY_GB); try smaller inputs."],
                       log=tail)
    if record is not None:
        return Problem("Glassbox's output differs from eager PyTorch",
                       message or "Verification failed: see the run stage for the errors per output.", lineno,
                       hints=["This is a compiler bug, not yours: the run stage shows which output differs."],
                       log=tail)
    return Problem("Glassbox could not compile this model",
                   message or f"The worker exited with code {returncode}.", lineno,
                   hints=["This is most likely a gap in the compiler, not a mistake in your code.",
                          "Try the other backend, or simplify the model around the line named above."],
                   log=tail)


# --- bench and Inductor (on demand; slow) -------------------------------------------------------------------


def bench(source: str, label: str, options: Options, timeout: float = BENCH_TIMEOUT_S,
          on_tick: Callable[[float], None] | None = None, min_time: float = 0.2) -> Outcome:
    """`python -m engine bench FILE --json`: eager vs Glassbox vs Inductor, in one worker."""
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-bench-"))
    try:
        model_path = workdir / model_file_name(label)
        model_path.write_text(source, encoding="utf-8")
        command = ["--memory-gb", str(memory_gb(options)), "--",
                   "bench", str(model_path), "--json", "--backend", options.backend, "--device", options.device,
                   "--min-time", str(min_time)]
        finished = run_process(command, timeout, workdir, on_tick)
        document = parse_json(finished.stdout)
        stderr = finished.stderr.replace(str(workdir) + os.sep, "")
        if finished.returncode == EXIT_OK and document is not None:
            return Outcome(document=document, seconds=finished.seconds)
        return Outcome(document=document, problem=diagnose(finished.returncode, stderr, timeout, document),
                       seconds=finished.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def inductor(source: str, label: str, options: Options, timeout: float = BENCH_TIMEOUT_S,
             on_tick: Callable[[float], None] | None = None) -> Outcome:
    """Real Inductor's output code for the same model (app/inductor_worker.py in a worker)."""
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-inductor-"))
    try:
        model_path = workdir / model_file_name(label)
        model_path.write_text(source, encoding="utf-8")
        out_path = workdir / "inductor.json"
        command = ["--memory-gb", str(memory_gb(options)), "--inductor", "--",
                   str(model_path), "--out", str(out_path), "--device", options.device] + \
            (["--dynamic"] if options.dynamic else [])
        finished = run_process(command, timeout, workdir, on_tick)
        try:
            document = json.loads(out_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            document = None
        stderr = finished.stderr.replace(str(workdir) + os.sep, "")
        if finished.returncode == EXIT_OK and document and document.get("ok"):
            return Outcome(document=document, seconds=finished.seconds)
        if document and document.get("error"):
            code = finished.returncode
            stderr = stderr + "\n\n" + str(document["error"]).replace(str(workdir) + os.sep, "")
            problem = diagnose(code, stderr, timeout)
            if code not in (EXIT_USER_ERROR, None):
                problem.title = "Inductor could not compile this model"
                problem.hints = ["This is Inductor's (torch.compile's) error, shown as it reported it."]
        else:
            problem = diagnose(finished.returncode, stderr, timeout)
        return Outcome(document=document, problem=problem, seconds=finished.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def assembly(graph: dict, kernel_names: list[str], timeout: float = BENCH_TIMEOUT_S,
             on_tick: Callable[[float], None] | None = None) -> Outcome:
    """Triton's lowerings (TTIR, TTGIR, LLIR, PTX, SASS) of some kernels of one graph of a record, compiled by
    the engine for display in a worker: document {"kernels": {name: {"ttir", ..., "error"?}}} or {"error"}."""
    workdir = Path(tempfile.mkdtemp(prefix="glassbox-asm-"))
    try:
        in_path, out_path = workdir / "graph.json", workdir / "asm.json"
        in_path.write_text(json.dumps({"graphs": [{"code": graph.get("code") or {},
                                                   "kernels": graph.get("kernels") or []}]}), encoding="utf-8")
        finished = run_process(["--asm", "--", str(in_path), str(out_path), *kernel_names], timeout, workdir,
                               on_tick)
        try:
            document = json.loads(out_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            document = None
        if document is not None and "kernels" in document:
            return Outcome(document=document, seconds=finished.seconds)
        problem = diagnose(finished.returncode, finished.stderr, timeout)
        if document and document.get("error"):
            problem = Problem("Triton could not lower this kernel for display", document["error"],
                              hints=["The kernel still runs (under the interpreter on a CPU); only its GPU "
                                     "assembly could not be produced."], log=finished.stderr[-4000:])
        return Outcome(document=document, problem=problem, seconds=finished.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
