"""The hostile and broken input suite (issue 6): each case is a model file, run through the sandbox.

    python -m engine sweep hostile [--jobs N] [--out reports/hostile_suite.md] [--json]

Each case is (name, model-file source, expected outcome, options). Outcomes:
  ok              the worker exits 0 with a record whose verify is ok
  user-error      exit 2: the model file is at fault, and the message names the problem
  clear-failure   exit 1: Glassbox failed, said so in one paragraph
  limit:WHAT      the sandbox stopped the worker (time, memory, output, processes)
  crashed:SIGNAL  the worker died from a signal; the sandbox says so
  no-record       the worker exited 0 but produced no record (the model called os._exit)
  nothing-compared the record's verify compared no tensor (Note [Verdicts] in engine/run.py): no pass
A case runs `explore` unless it names another command (`verb`: bench or compare, whose checks are judged
outside the job as explore's verdict is). After each case nothing of its process group may be left running;
after each group of cases a good exploration runs, and its time is the group's "time to recover".
An attack that is not one model file explored is a check (CHECKS, run one after another once the cases are
done): a job that fills the shared compile cache, the commands that run a model in the caller's process. The
attacks on the app's own machinery (its result cache's byte bound, a build when the app stops its job) are
app/hostile_checks.py's, run as `python -m app.hostile_checks --json` (the engine's tools never import the
app: tests/test_layering.py); their rows are the suite's too.
tests/test_hostile.py reuses CASES, CHECKS and run_suite.
--json prints the outcomes as one JSON document on stdout (the report is written all the same).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.tools import isolation, procfs
from engine.tools.isolation import WorkDirectory
from engine.tools.judged import EVIDENCE_NAME, apply_verdicts, judge_in_sandbox, read_evidence, verdict_code
from engine.tools.judged_commands import apply_bench_verdicts, apply_compare_verdicts, document_code
from engine.tools.json_stdout import print_json, stdout_to_stderr
from engine.tools.sandbox import Limits, SandboxResult, explore_command, run_sandboxed

ROOT = Path(__file__).resolve().parents[2]

ISOLATED = not isolation.bwrap_problem()  # bubblewrap runs here (Note [Isolation])
CGROUPS = ISOLATED and isolation.Cgroup.available()  # a build then runs in its job's cgroup
# ten macros that expand to 10^8 tokens, which cc1plus holds at once (tests/test_builder_limits.py)
MACRO_BOMB = "".join(f"#define {name} {','.join([inner] * 10)}\n" for name, inner in zip("ABCDEFG", "0ABCDEF")) + \
    'extern "C" { int hoard[] = { G, G, G, G, G, G, G, G, G, G }; }\n'

SECRET_NAME, SECRET_VALUE = "GLASSBOX_HOSTILE_SECRET", "hunter2-" + uuid.uuid4().hex[:8]
OUTSIDE_FILE = Path("/tmp") / f"glassbox-hostile-outside-{uuid.uuid4().hex[:8]}.txt"


@dataclass
class Case:
    name: str
    source: str
    expected: str
    limits: Limits = field(default_factory=lambda: Limits(timeout_s=90, memory_mb=3000))
    env: dict[str, str] | None = None
    message: str | None = None   # a regex the final message must match
    note: str = ""               # shown in the report's outcome column
    needs_isolation: bool = False  # namespaces are what keeps the caller safe: skipped where bwrap cannot run
    without_isolation: str | None = None  # the expected outcome where bwrap cannot run, when it differs
    verb: str = "explore"  # the command the case runs: explore, or bench or compare (their checks judged outside)
    options: tuple[str, ...] = ()  # the command's flags

    @property
    def outcome_expected(self) -> str:
        return self.expected if ISOLATED or self.without_isolation is None else self.without_isolation


GOOD = """
import torch
def model(x):
    return torch.relu(x) * 2 + 1
example_inputs = (torch.randn(4, 8),)
"""

FORGER = """
import atexit, json, os
import torch
import engine.run, engine.verdict

def _ok(*args, **kwargs):
    return {"ok": True, "verdict": "ok", "max_abs_err": 0.0, "max_rel_err": 0.0, "outputs": [],
            "judged_by": "eager", "close_to_eager": True, "shape": [], "dtype": "float32", "atol": 0, "rtol": 0}

PATCH

def model(x):
    if torch.compiler.is_compiling():
        return x * 2 + 1000  # wrong by construction, in the compiled program only
    return x * 2

example_inputs = (torch.randn(4, 4),)
"""


# every forgery at once but for run.verify itself, so that the job still hands back its outputs as data
PATCH_ALL = ("engine.run.compare_tensor = engine.verdict.compare_tensor = _ok\n"
             "engine.verdict.judge = engine.run.judge = _ok\n"
             "torch.allclose = lambda *a, **k: True\n_dumps = json.dumps\njson.dumps = lambda *a, **k: _dumps(*a, **k)"
             ".replace('\"ok\": false', '\"ok\": true')\natexit.register(lambda: os._exit(0))")


def _src(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")


def _model(head: str, forward: str = "return x") -> str:
    """A model file: `head` (its imports and what runs at import), then `model(x)` whose body is `forward`,
    called on three random numbers."""
    return f"{head}\ndef model(x):\n{textwrap.indent(forward, '    ')}\nexample_inputs = (torch.randn(3),)\n"


CASES: list[Case] = [
    Case("baseline", _src(GOOD), "ok"),
    Case("syntax error", _src("""
        import torch
        def model(x)
            return x
        """), "user-error", message=r"\.py:2\b"),
    Case("missing model", _src("""
        import torch
        example_inputs = (torch.randn(3),)
        """), "user-error", message=r"does not define `model`"),
    Case("model raises", _model("import torch", 'raise ValueError("bad input shape")'),
         "user-error", message=r"bad input shape"),
    Case("infinite loop", _model("import torch", "while True:\n    x = x + 1"),
         "limit:time", limits=Limits(timeout_s=12)),
    Case("sleeps forever", _model("import time, torch\ntime.sleep(10_000)"),
         "limit:time", limits=Limits(timeout_s=8)),
    Case("memory bomb", _model("import torch\nhoard = []", "while True:\n    hoard.append(torch.ones(2 ** 25))"),
         "limit:memory", limits=Limits(timeout_s=60, memory_mb=1200)),
    Case("fork bomb (200 sleeping children)", _src("""
        import subprocess
        children = [subprocess.Popen(["sleep", "60"]) for _ in range(200)]
        import torch
        def model(x):
            return x
        example_inputs = (torch.randn(3),)
        """), "limit:processes", limits=Limits(timeout_s=60, processes=32)),
    Case("prints megabytes", _model("import torch", 'print("x" * (8 << 20))\nreturn x + 1'),
         "limit:output", limits=Limits(timeout_s=60, output_bytes=2 << 20)),
    Case("writes outside the work dir", _src(f"""
        import torch
        open({str(OUTSIDE_FILE)!r}, "w").write("written by a model")
        def model(x):
            return x * 3
        example_inputs = (torch.randn(3),)
        """), "file-not-written", without_isolation="ok",
         note="the job's /tmp is its own (without bubblewrap: not confined, see README Security)"),
    Case("reads environment variables", _src(f"""
        import os, torch
        def model(x):
            raise RuntimeError("seen secret: " + repr(os.environ.get({SECRET_NAME!r})))
        example_inputs = (torch.randn(3),)
        """), "user-error", message=r"seen secret: None", note="secret not inherited"),
    Case("os.system in forward", _model("import os, torch",
                                          'os.system("echo model-ran-a-shell-command >&2")\nreturn x - 1'),
         "ok", note="allowed: runs inside the sandbox (graph break)"),
    Case("subprocess at import", _model('import subprocess, torch\nsubprocess.run(["true"], check=True)',
                                          "return x - 1"),
         "ok", note="allowed: runs inside the sandbox"),
    Case("imports a missing module", _model("import torch\nimport glassbox_no_such_module"),
         "user-error", message=r"glassbox_no_such_module"),
    Case("huge shape", _src("""
        import torch
        def model(x):
            return x + 1
        example_inputs = (torch.empty(2 ** 26, 2 ** 26),)
        """), "user-error"),
    Case("NaN and Inf inputs", _src("""
        import torch
        def model(x):
            return torch.relu(x) * 2 + torch.exp(x)
        example_inputs = (torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0]),)
        """), "ok"),
    Case("non-tensor output", _model("import torch", 'return "a string", 3'),
         "nothing-compared", message=r"nothing was verified",
         note="its own verdict, not ok (Note [Verdicts])"),
    Case("integer overflow", _src("""
        import torch
        def model(x):
            return x * 2_000_000_000 + x
        example_inputs = (torch.tensor([1, 2, 3], dtype=torch.int32),)
        """), "ok"),
    Case("mutates its inputs", _src("""
        import torch
        def model(x):
            x.add_(1)
            return x * 2
        example_inputs = (torch.randn(4),)
        """), "ok", note="compiled and eager each run on copies of the original inputs"),
    Case("in-place op on a view", _src("""
        import torch
        def model(x):
            y = x.clone()
            y[0].mul_(5)
            return y + 1
        example_inputs = (torch.randn(3, 4),)
        """), "ok"),
    Case("data-dependent shape (nonzero)", _src("""
        import torch
        def model(x):
            return torch.nonzero(x > 0)
        example_inputs = (torch.randn(16),)
        """), "ok"),
    Case("randomness (dropout in train mode)", _src("""
        import torch
        model = torch.nn.Dropout(0.5).train()
        example_inputs = (torch.randn(64),)
        """), "user-error", message=r"random",
         note="verify says the model is random (eager disagrees with itself): exit 2, not a mismatch"),
    Case("C++ compiler fails", _src(GOOD), "ok", env={"CXX": "/bin/false"}, without_isolation="clear-failure",
         note="the job's CXX is ignored: the trusted builder picks the compiler (without bubblewrap: a clear "
              "failure); a build error through the builder: tests/test_cache_trust.py"),
    Case("empty file", "", "user-error", message=r"does not define `model`"),
    Case("null bytes in the source", "import torch\x00\n", "user-error"),
    Case("model is not callable", _src("""
        import torch
        model = 42
        example_inputs = (torch.randn(3),)
        """), "user-error"),
    Case("example_inputs is not a tuple of tensors", _src("""
        import torch
        def model(x):
            return x
        example_inputs = "not tensors"
        """), "user-error"),
    Case("infinite recursion", _model("import torch", "return model(x)"),
         "user-error", message=r"[Rr]ecursion"),
    Case("sys.exit at import", _src("""
        import sys
        sys.exit(3)
        """), "user-error"),
    Case("os._exit in forward", _model("import os, torch", "os._exit(0)"),
         "no-record"),
    Case("segfault", _model("import ctypes, torch", "ctypes.string_at(0)\nreturn x"),
         "crashed:SIGSEGV"),
    Case("kills its own process group", _src("""
        import os, signal, torch
        os.killpg(0, signal.SIGKILL)
        """), "crashed:SIGKILL"),
    Case("reads stdin", _model('import torch\nanswer = input("password? ")'),
         "user-error", message=r"EOF"),
    Case("raises KeyboardInterrupt", _model("import torch", "raise KeyboardInterrupt"),
         "crashed:SIGINT", note="Python exits by SIGINT; the sandbox names the signal"),
    Case("hostile parameter names", _src("""
        import torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_parameter('w"); system("rm -rf ~', torch.nn.Parameter(torch.randn(3)))
                self.register_buffer("int main(){}", torch.ones(3))
            def forward(self, x):
                return x * getattr(self, 'w"); system("rm -rf ~') + getattr(self, "int main(){}")
        model = M()
        example_inputs = (torch.randn(3),)
        """), "ok"),
    Case("complex dtype", _src("""
        import torch
        def model(x):
            return x * 2
        example_inputs = (torch.randn(3, dtype=torch.complex64),)
        """), "ok"),
    Case("zero-size input", _src("""
        import torch
        def model(x):
            return x.sum(0) + 1
        example_inputs = (torch.randn(0, 5),)
        """), "ok"),
    # --- issue 15: what only the operating system's isolation stops (Note [Isolation]) ---
    Case("child calls setpgid(0, 0) and sleeps", _src("""
        import os, time, torch
        if os.fork() == 0:
            os.setpgid(0, 0)
            time.sleep(600)
            os._exit(0)
        def model(x):
            return x + 1
        example_inputs = (torch.randn(3),)
        """), "ok", needs_isolation=True, note="the child dies with the job's PID namespace"),
    Case("setsid daemon outlives the job", _src("""
        import os, time, torch
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        def model(x):
            return x + 1
        example_inputs = (torch.randn(3),)
        """), "ok", needs_isolation=True, note="the daemon dies with the job's PID namespace"),
    Case("kills its parent and every process it sees", _src("""
        import os, signal, torch
        os.kill(os.getppid(), signal.SIGKILL)
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid not in (os.getpid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        def model(x):
            return x + 1
        example_inputs = (torch.randn(3),)
        """), "ok", needs_isolation=True, note="it sees only its own namespace; its parent there ignores SIGKILL"),
    Case("reads other processes' environments", _src("""
        import os, torch
        mine = open("/proc/self/environ", "rb").read()
        others = set()
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                text = open(f"/proc/{pid}/environ", "rb").read()
            except OSError:
                continue
            others.update(v.split(b"=")[0] for v in text.split(b"\\0") if v and v not in mine.split(b"\\0"))
        def model(x):
            raise RuntimeError(f"foreign variables seen: {sorted(others)}")
        example_inputs = (torch.randn(3),)
        """), "user-error", message=r"foreign variables seen: \[\]", needs_isolation=True,
         note="only its own environment"),
    Case("fills /dev/shm", _src("""
        import torch
        with open("/dev/shm/hoard", "wb") as hoard:
            for _ in range(300):
                hoard.write(b"x" * (10 << 20))
        def model(x):
            return x
        example_inputs = (torch.randn(3),)
        """), "limit:memory", limits=Limits(timeout_s=60, memory_mb=1500), needs_isolation=True,
         note="shared memory counts (cgroup, or the capped private tmpfs)"),
    Case("fills a memfd", _src("""
        import os, torch
        fd = os.memfd_create("hoard")
        for _ in range(300):
            os.write(fd, b"x" * (10 << 20))
        def model(x):
            return x
        example_inputs = (torch.randn(3),)
        """), "limit:memory", limits=Limits(timeout_s=60, memory_mb=1500), needs_isolation=True,
         note="memfds count"),
    Case("writes a forged job into other processes' stdin", _src("""
        import os, torch
        written = 0
        for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]:
            try:  # (pid 1, bwrap's init, shares this job's own stdin)
                with open(f"/proc/{pid}/fd/0", "w") as stdin:
                    stdin.write('{"argv": ["--", "explore", "forged"]}\\n')
                    written += 1
            except OSError:
                pass
        def model(x):
            raise RuntimeError(f"stdin of {written} other processes written")
        example_inputs = (torch.randn(3),)
        """), "user-error", message=r"stdin of 0 other processes", needs_isolation=True,
         note="no other job or standby worker is visible"),
    Case("rewrites the compile cache", _src("""
        import os, pathlib, torch
        refused = []
        shared = pathlib.Path(os.environ["GLASSBOX_SHARED_HINT"])  # where the shared cache is (it is no secret)
        for path in [shared / "poison.json", shared / "toolchain" / "poison.json"]:
            try:
                path.write_text("{}")
            except OSError as error:
                refused.append(error.strerror)
        for root in [shared, pathlib.Path("/tmp")]:
            for path in root.glob("**/toolchain/*.json"):
                try:
                    path.write_text('{"version": "x", "native_flags": ["-fplugin=/tmp/evil.so"]}')
                except OSError as error:
                    refused.append(error.strerror)
            for path in root.glob("**/cpp/*/kernels.so"):
                try:
                    path.write_bytes(b"not a library")
                except OSError as error:
                    refused.append(error.strerror)
        def model(x):
            raise RuntimeError(f"cache writes refused: {sorted(set(refused))} of {len(refused)}")
        example_inputs = (torch.randn(3),)
        """), "user-error", message=r"Read-only file system", needs_isolation=True,
         note="the shared cache is read-only in the sandbox; the next exploration is correct"),
    Case("opens a network connection", _model(
        'import socket, torch\nsocket.create_connection(("1.1.1.1", 53), timeout=5)'),
         "user-error", message=r"[Nn]etwork is unreachable|OSError", needs_isolation=True,
         note="no network namespace access"),
    Case("unshares a user namespace to lift its cgroup limits", _src("""
        import ctypes, torch
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS: then mount a cgroup tree
            raise SystemExit("unshared a user namespace")
        raise RuntimeError("nested user namespace refused")
        """), "user-error", message=r"nested user namespace refused", needs_isolation=True,
         note="bubblewrap --disable-userns (Note [Isolation])"),
    Case("fills /dev and /run", _src("""
        import torch
        refused = []
        for path in ("/dev/fill", "/run/fill"):
            try:
                open(path, "wb").write(bytes(1 << 20))
            except OSError as error:
                refused.append(error.strerror)
        raise RuntimeError(f"writes refused: {refused}")
        """), "user-error", message=r"Read-only file system.*Read-only file system", needs_isolation=True,
         note="/dev and /run are read-only in the sandbox"),
    Case("sends #include \"/dev/zero\" to the builder", _src("""
        import torch
        from engine.runtime import build
        build.build_library('#include "/dev/zero"\\n')
        """), "user-error", message=r"does not compile it", needs_isolation=True,
         note="refused before g++ runs; g++ has the job's memory and time (Note [Builds inside the job's limits])"),
    Case("sends the builder a source that grows past the job's memory", _src(f"""
        import torch
        from engine.runtime import build
        build.build_library({MACRO_BOMB!r})
        """), "limit:memory" if CGROUPS else "user-error", limits=Limits(timeout_s=90, memory_mb=1200),
         needs_isolation=True,
         note="g++ runs in the job's cgroup, its memory the job's" if CGROUPS else
              "no writable cgroups here: g++ meets a cap of its own, not the job's memory"),
    Case("reads a file into a build error through #line", _src("""
        import torch
        from engine.runtime import build
        build.build_library('#line 1 "/etc/passwd"\\nint x = ;\\n')
        """), "user-error", message=r"does not compile it", needs_isolation=True,
         note="a directive generated code never uses: refused before g++ prints the file's line"),
    Case("patches the verifier; compiled +1000", _src(FORGER.replace("PATCH", (
        "engine.run.compare_tensor = engine.verdict.compare_tensor = engine.verdict.judge = _ok"))),
         "clear-failure", message=r"differs from eager",
         note="judged outside the job from its outputs as data (Note [Judged outside the job])"),
    Case("patches torch.allclose and json.dumps, exits 0 at exit", _src(FORGER.replace("PATCH", (
        "engine.run.verify = lambda *a, **k: _ok()\ntorch.allclose = lambda *a, **k: True\n"
        "_dumps = json.dumps\njson.dumps = lambda *a, **k: _dumps(*a, **k).replace('\"ok\": false', '\"ok\": true')\n"
        "atexit.register(lambda: os._exit(0))"))),
         "clear-failure", message=r"differs from eager|could not be judged",
         note="no evidence is no pass"),
    Case("bench: patches the verifier, torch.allclose, json.dumps; exits 0", _src(FORGER.replace("PATCH", PATCH_ALL)),
         "clear-failure", message=r"differs from eager", verb="bench",
         options=("--no-inductor", "--quick", "--min-time", "0.02", "--threads", "1"),
         note="bench's rows judged outside the job (Note [Bench and compare judged outside the job])"),
    Case("compare: patches the verifier, torch.allclose, json.dumps; exits 0", _src(FORGER.replace("PATCH", PATCH_ALL)),
         "clear-failure", message=r"differs from eager", verb="compare",
         options=("--a", "fusion=on", "--b", "fusion=off"),
         note="each side judged outside the job"),
    Case("steers its float64 run (dtype and is_compiling)", _src("""
        import torch
        def model(x):
            if torch.compiler.is_compiling() or x.dtype == torch.float64:
                return x * 2 + 1  # 1.0 off when compiled, and in a float64 run of the model
            return x * 2
        example_inputs = (torch.randn(64, 64),)
        """), "clear-failure", message=r"differs from eager",
         note="the float64 reference is eager's run shadowed op by op (Note [Float64 shadow])"),
    Case("reads the server user's private files", _src("""
        import os, torch
        found = []
        for path in ("/etc/shadow", os.path.expanduser("~root/.bash_history"), "/root/.bashrc"):
            try:
                if open(path).read():
                    found.append(path)
            except OSError:
                pass
        raise RuntimeError(f"private files read: {found}")
        """), "user-error", message=r"private files read: \[\]", needs_isolation=True,
         note="home, /root, /home, .streamlit hidden; /etc/shadow empty (Note [Private files])"),
]



@dataclass
class Outcome:
    case: Case | Check
    outcome: str
    message: str
    seconds: float
    leftovers: list[int]
    result: SandboxResult | None  # None for a check
    recovery_s: float | None = None

    @property
    def passed(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        found = []
        if self.outcome != self.case.outcome_expected:
            found.append(f"expected {self.case.outcome_expected}, got {self.outcome}: {self.message[:300]}")
        if self.leftovers:
            found.append(f"processes left running: {self.leftovers}")
        if self.case.message and not re.search(self.case.message, self.message):
            found.append(f"message does not match {self.case.message!r}: {self.message[:300]}")
        if self.result is None:
            return found
        if self.outcome in ("user-error", "clear-failure") and (
                "Traceback" in self.result.stderr or not self.message):
            found.append(f"no clear message, or a raw traceback: {self.result.stderr[-600:]}")
        if SECRET_VALUE in self.result.stdout + self.result.stderr:
            found.append("the worker saw the parent's secret")
        return found


def final_message(stderr: str) -> str:
    """The message the CLI prints last on failure: its error line, the source excerpt and the advice (at most
    three short paragraphs), on one line."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", stderr.strip()) if p.strip()]
    if not paragraphs:
        return ""
    return " ".join(" ".join(paragraphs[-3:]).split())


def judged_record(result: SandboxResult, evidence: bytes | None, verb: str = "explore") -> dict | None:
    """The job's document with its checks judged outside it, as `explore --sandbox`, `bench --sandbox`, `compare
    --sandbox` and the app judge them (Note [Judged outside the job], Note [Bench and compare judged outside the
    job]); None where the job left nothing to judge (a limit, a crash, a model error)."""
    if result.limit_hit or result.returncode not in (0, 1, 2):
        return None
    try:
        document = json.loads(result.stdout)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    if verb == "explore" and ("verify" not in document or any(
            isinstance(e, dict) and e.get("kind") in ("model", "compile", "usage")
            for e in document.get("errors") or [])):
        return None
    verdicts, why_not = judge_in_sandbox(evidence) if evidence is not None else (
        None, "the job wrote no evidence (its outputs as data)")
    apply = {"explore": apply_verdicts, "bench": apply_bench_verdicts, "compare": apply_compare_verdicts}[verb]
    return apply(document, verdicts, why_not)


def document_words(document: dict) -> list[str]:
    """What failed in a judged bench or compare document, in words."""
    checks = [(f"{case.get('name')}: {who}", check) for case in document.get("cases") or [] if isinstance(case, dict)
              for who, check in (case.get("verify") or {}).items()]
    checks += [(f"side {side}", ((document.get(side) or {}).get("record") or {}).get("verify") or {})
               for side in ("a", "b") if isinstance(document.get(side), dict)]
    return [f"{who} differs from eager: {check.get('problem', '')}" for who, check in checks
            if isinstance(check, dict) and check.get("ok") is not True]


def classify(result: SandboxResult, judged: dict | None = None, verb: str = "explore") -> tuple[str, str]:
    if result.limit_hit:
        return f"limit:{result.limit_hit}", result.explain()
    code = result.returncode
    if code is not None and code < 0:
        import signal
        return f"crashed:{signal.Signals(-code).name}", result.explain()
    if judged is not None and verb != "explore":
        code = document_code(judged)
        return {0: "ok", 2: "user-error"}.get(code, "clear-failure"), " ".join(document_words(judged))[:300]
    if judged is not None:  # the verdict judged outside the job decides, never the job's own exit code
        code, words = verdict_code(judged)
        verify = judged.get("verify") or {}
        if code == 0:
            if verify.get("verdict") == "nothing compared":
                return "nothing-compared", verify.get("problem", "")
            return "ok", json.dumps(verify)[:300]
        return ("user-error" if code == 2 else "clear-failure"), " ".join(words)
    if code == 0:
        try:
            record = json.loads(result.stdout)
        except ValueError:
            return "no-record", ("the model's process exited (exit code 0) without a record: something in the "
                                 "model ended it directly (os._exit)")
        verify = record.get("verify") or {}
        if verify.get("verdict") == "nothing compared":
            return "nothing-compared", verify.get("problem", "")
        return ("ok" if verify.get("ok") else "not-verified"), json.dumps(verify)[:300]
    if code == 2:
        return "user-error", final_message(result.stderr)
    if code == 1:
        return "clear-failure", final_message(result.stderr)
    return f"exit:{code}", final_message(result.stderr)


def leftovers(session: int | None, namespace: str | None = None) -> list[int]:
    """Live (non-zombie) processes still in the worker's session or PID namespace, after a short grace."""
    return procfs.leftovers(session, namespace)


def run_case(case: Case, workdir: Path) -> Outcome:
    os.environ[SECRET_NAME] = SECRET_VALUE  # the parent has a secret; the worker must not see it
    path = workdir / f"{re.sub(r'[^a-z0-9]+', '_', case.name.lower())}.py"
    path.write_bytes(case.source.encode())
    try:
        env = {**(case.env or {}), "GLASSBOX_SHARED_HINT": str(_shared_cache())}
        directory = WorkDirectory()
        try:
            evidence = directory.path / EVIDENCE_NAME
            result = run_sandboxed(explore_command(str(path), [*case.options, "--evidence-out", str(evidence)],
                                                   case.verb), case.limits, env=env, workdir=directory.path)
            data = read_evidence(evidence)
        finally:
            directory.remove()
        # before the judge's own sandbox starts: a namespace's number may be reused by the next one
        left = leftovers(result.session, result.pid_namespace)
        outcome, message = classify(result, judged_record(result, data, case.verb), case.verb)
        if case.name == "writes outside the work dir" and not OUTSIDE_FILE.exists():
            outcome = "file-not-written"  # the job's /tmp is its own
        return Outcome(case, outcome, message, result.wall_s, left, result)
    finally:
        if case.name == "writes outside the work dir" and OUTSIDE_FILE.exists():
            OUTSIDE_FILE.unlink()


def _shared_cache() -> Path:
    from engine.runtime.build import cache_dir
    return cache_dir()


def runnable_cases(cases: list[Case] = CASES) -> list[Case]:
    """The cases this machine can run safely: without bubblewrap, the ones that only namespaces make safe (a
    model that kills every process it sees) are left out, and the report says so."""
    return [case for case in cases if ISOLATED or not case.needs_isolation]


# --- checks: attacks that are not one model file explored (Note in the module docstring) ----------------------

@dataclass
class Check:
    """An attack run by a function of its own: `run(workdir)` returns (outcome, message, processes it left)."""
    name: str
    run: Callable[[Path], tuple[str, str, list[int]]] | None
    expected: str
    note: str = ""
    needs_isolation: bool = False
    message: str | None = None  # a regex the message must match

    @property
    def outcome_expected(self) -> str:
        return self.expected


def _stored_by(marker: str) -> list[Path]:
    """The shared cache's C++ entries whose source carries `marker` (a job's own, whoever else builds meanwhile)."""
    from engine.runtime.build import cache_dir
    found = []
    for entry in (cache_dir() / "cpp").glob("*"):
        try:
            if marker in (entry / "kernels.cpp").read_text(errors="replace"):
                found.append(entry)
        except OSError:
            continue
    return found


CACHE_QUOTA_CHECK_MB = 16  # the job's quota while it tries to fill the cache (the default is 256 MB)


def fills_the_shared_cache(workdir: Path) -> tuple[str, str, list[int]]:
    """A job asks the trusted builder for ten libraries of 6 MB each (a 6 MB initialized array) under a 16 MB
    quota: what it leaves in the shared cache must stay under the quota (Note [Builds inside the job's limits]).
    Its entries are removed afterwards: the suite's shared cache is the user's."""
    from engine.tools import builder

    marker = f"hostile-fill-{uuid.uuid4().hex}"
    path = workdir / "fills_the_shared_cache.py"
    path.write_text(_src(f"""
        import torch
        from engine.runtime import build
        stored = refused = 0
        for number in range(10):
            try:
                build.build_library('extern "C" {{ char hoard[6 << 20] = {{1}}; }}\\n// {marker} %d\\n' % number)
                stored += 1
            except build.BuildError:
                refused += 1
        raise RuntimeError(f"libraries stored: {{stored}}, refused: {{refused}}")
        """))
    quota, builder.JOB_CACHE_BYTES = builder.JOB_CACHE_BYTES, CACHE_QUOTA_CHECK_MB << 20
    try:
        result = run_sandboxed(explore_command(str(path), []), Limits(timeout_s=300, memory_mb=3000))
    finally:
        builder.JOB_CACHE_BYTES = quota
    left = leftovers(result.session, result.pid_namespace)
    entries = _stored_by(marker)
    stored = sum(builder.cache_bytes(entry) for entry in entries)
    for entry in entries:
        builder._remove_entry(entry)
    message = f"{final_message(result.stderr)} The job left {stored / 2 ** 20:.1f} MB in the shared cache."
    if result.limit_hit or "refused: 0" in result.stderr or "refused" not in result.stderr:
        return f"unexpected ({result.explain() if result.limit_hit else 'no build refused'})", message, left
    return ("under-quota" if stored <= CACHE_QUOTA_CHECK_MB << 20 else "over-quota"), message, left


# the commands that run a model in the caller's process, and the arguments each needs to get that far
UNSANDBOXED_COMMANDS: dict[str, list[str]] = {
    "report": ["--out", "{dir}/report.html"], "bench": ["--no-inductor", "--quick"],
    "compare": ["--a", "fusion=on", "--b", "fusion=off"], "repro": ["--out", "{dir}/repro.py"],
    "whatif": ["--inputs", "x:1"], "fix": ["--out", "{dir}/fixed.py"], "asm": ["--kernel", "kernel_0"],
    "provenance": ["--line", "1"]}
RAN_MARK = "the model ran in the caller's process and saw its secret"
WARNING = re.compile(r"(?i)warning\b[^\n]*unsandboxed")


def unsandboxed_commands_say_so(workdir: Path) -> tuple[str, str, list[int]]:
    """Each command of UNSANDBOXED_COMMANDS, without --sandbox, on a model that looks for the caller's secret
    environment variable as it is loaded (then ends its process): where it found it, the command must have said
    on stderr, before the model ran, that it runs the model unsandboxed (README, Security)."""
    path = workdir / "sees_the_callers_secret.py"
    path.write_text(_src(f"""
        import os, sys
        if os.environ.get({SECRET_NAME!r}) == {SECRET_VALUE!r}:
            print({RAN_MARK!r}, file=sys.stderr, flush=True)
        os._exit(0)
        """))
    env = {**os.environ, SECRET_NAME: SECRET_VALUE, "PYTHONPATH": str(ROOT)}
    env.pop("GLASSBOX_BUILDER_FD", None)
    silent, not_run = [], []
    for command, arguments in UNSANDBOXED_COMMANDS.items():
        argv = [sys.executable, "-m", "engine", command, str(path),
                *[a.replace("{dir}", str(workdir)) for a in arguments]]
        try:
            done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            not_run.append(command)
            continue
        ran = done.stderr.find(RAN_MARK)
        if ran < 0:
            not_run.append(f"{command} ({final_message(done.stderr)[:80]})")
        elif not WARNING.search(done.stderr[:ran]):
            silent.append(command)
    said = [c for c in UNSANDBOXED_COMMANDS if c not in silent and not any(n.startswith(c) for n in not_run)]
    message = (f"said so before the model ran: {', '.join(said) or 'none'}"
               + (f"; silent: {', '.join(silent)}" if silent else "")
               + (f"; the model did not run: {', '.join(not_run)}" if not_run else ""))
    return ("said-so" if not silent and not not_run else "silent" if silent else "unexpected"), message, []


CHECKS: list[Check] = [
    Check("fills the shared cache through the builder", fills_the_shared_cache, "under-quota",
          note=f"a {CACHE_QUOTA_CHECK_MB} MB quota held however large a library is (Note [Builds inside the "
               "job's limits])", needs_isolation=True, message=r"refused: [1-9]"),
    Check("commands that run the model in the caller's process", unsandboxed_commands_say_so, "said-so",
          note="each warns on stderr before the model runs, and names --sandbox where it has one (README, "
               "Security)"),
]


def run_check(check: Check, workdir: Path) -> Outcome:
    os.environ[SECRET_NAME] = SECRET_VALUE
    start = time.monotonic()
    outcome, message, left = check.run(workdir)
    return Outcome(check, outcome, message, time.monotonic() - start, left, None)


def app_check_outcomes(timeout_s: float = 900.0) -> list[Outcome]:
    """The app's attacks (app/hostile_checks.py), run in a process of their own: the engine never imports the
    app. A run that gives no rows is one failing row."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLASSBOX_APP_STANDBY": "0"}
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "app.hostile_checks", "--json"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        rows = json.loads(done.stdout)["outcomes"]
    except (subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as error:
        stderr = getattr(error, "stderr", None) or (locals().get("done").stderr if "done" in locals() else "")
        check = Check("the app's checks (app/hostile_checks.py)", None, "ran")
        return [Outcome(check, "did-not-run", f"{type(error).__name__}: {str(stderr)[-300:]}",
                        time.monotonic() - start, [], None)]
    return [Outcome(Check(row["case"], None, row["expected"], note=row.get("note", "")), row["outcome"],
                    row["message"], row["seconds"], row.get("leftovers") or [], None) for row in rows]



def run_suite(workdir: Path, jobs: int = 2, group_size: int = 6, cases: list[Case] = CASES,
              checks: list[Check] | None = CHECKS, app_checks: bool = True) -> list[Outcome]:
    """Run every case; after each group, one good exploration (its wall time is the group's recovery); then the
    checks, one after another (one of them changes the builder's quota while it runs), and the app's."""
    cases = runnable_cases(cases)
    groups = [cases[i:i + group_size] for i in range(0, len(cases), group_size)]

    def run_group(group: list[Case]) -> list[Outcome]:
        outcomes = [run_case(case, workdir) for case in group]
        check = run_case(CASES[0], workdir)
        if not check.passed:
            raise AssertionError(f"the exploration after {[c.name for c in group]} failed: {check.problems()}")
        for outcome in outcomes:
            outcome.recovery_s = check.seconds
        return outcomes

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outcomes = [outcome for outcomes in pool.map(run_group, groups) for outcome in outcomes]
    outcomes += [run_check(check, workdir) for check in checks or [] if ISOLATED or not check.needs_isolation]
    return outcomes + (app_check_outcomes() if app_checks else [])


def report(outcomes: list[Outcome]) -> str:
    have, missing = isolation.protection()
    lines = ["# Hostile input suite", "",
             "Generated by `python -m engine sweep hostile --jobs 2` (also run by tests/test_hostile.py). Every case",
             "runs through the sandbox (engine/tools/sandbox.py); after each case no process of its session or PID",
             "namespace is left, and after each group a good exploration runs: its wall time is the group's time to",
             "recover. The rows after the model files are checks: attacks that are not one model file explored",
             "(a job filling the shared compile cache, the commands that run a model in the caller's process) and",
             "the app's (app/hostile_checks.py: its result cache's byte bound, a build when the app stops its job).",
             "", f"Protection in force on this machine: {'; '.join(have)}.",
             f"Missing: {'; '.join(missing) or 'nothing'}." + (
                 f" Left out here (they need namespaces to be safe): "
                 f"{', '.join(c.name for c in [*CASES, *CHECKS] if c.needs_isolation)}." if not ISOLATED else ""),
             "",
             "| case | outcome | message (first 120 chars) | seconds | recovery seconds | pass |",
             "|---|---|---|---|---|---|"]
    for o in outcomes:
        shown = o.outcome + (f" ({o.case.note})" if o.case.note else "")
        message = o.message.replace("|", "\\|").replace("\n", " ")[:120]
        recovery = f"{o.recovery_s:.1f}" if o.recovery_s is not None else "-"
        lines.append(f"| {o.case.name} | {shown} | {message} | {o.seconds:.1f} | {recovery} | "
                     f"{'yes' if o.passed else 'NO: ' + '; '.join(o.problems())[:200]} |")
    return "\n".join(lines + ["", *ELSEWHERE]) + "\n"


# the classes of attack (issue 33) this suite does not run, or runs in part, and the tests that run them
ELSEWHERE = [
    "Attacks that are not a model file explored here, or are in part, each a test that must fail the attack:", "",
    "| class | test |", "|---|---|",
    "| a model that patches the verifier, torch.allclose/equal or the record writer, sandboxed; a training step "
    "that patches its judge; Inductor's check of a forger; a shared link of a forger or of a model steering its "
    "float64 run | tests/test_verdict_outside.py |",
    "| a forger's `bench --sandbox` (inference and training step), `compare --sandbox`, `report --sandbox`, the "
    "app's bench and compare | tests/test_commands_judged.py |",
    "| one element 75% off at 65 and 20,200 elements; a Python number 75% off; atol=inf; strides; random "
    "| tests/test_verdict_teeth.py |",
    "| healthy fp16 GPT-2 and bf16 Llama pass judged by fp64, the rule named; a model steering its float64 run "
    "| tests/test_verdict_teeth.py, tests/test_fp64_shadow.py |",
    "| nested user namespace; cgroup files; /dev, /run; 2 GB SysV shm; private files | tests/test_sandbox_limits.py |",
    "| `#include \"/dev/zero\"` and every other spelling that reads a file (digraphs, splices, comments, "
    "strings, `.incbin`/`.include`, section names, token pasting; `#line`, `__has_include`, `_Pragma`, a "
    "self-include, outside the allowlist of directives and headers), refused in linear time; a build that "
    "grows stops its job at the job's memory (its cgroup), with none of the server's environment; builds "
    "killed with their job and when the app stops it (in Chromium too); the shared cache's byte quota, one "
    "large library included, and eviction | tests/test_builder_limits.py, tests/test_browser_stop.py |",
    "| a record with markup in every field in `report`, in Chromium | tests/test_report_scripts.py |",
    "| the app's result cache counts at least what a value holds, whatever its shape | tests/test_app.py "
    "(test_result_cache_is_bounded_in_bytes, test_the_result_caches_estimate_is_above_what_a_value_holds) |",
    "| the commands that run a model in the caller's process say so | tests/test_commands_judged.py, "
    "tests/test_whatif.py |",
]


def outcome_json(outcome: Outcome) -> dict:
    return {"case": outcome.case.name, "expected": outcome.case.outcome_expected, "outcome": outcome.outcome,
            "message": outcome.message, "seconds": outcome.seconds, "recovery_s": outcome.recovery_s,
            "leftovers": outcome.leftovers, "passed": outcome.passed, "problems": outcome.problems()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine sweep hostile", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "reports" / "hostile_suite.md"))
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON on stdout and nothing else")
    args = parser.parse_args(argv)
    import tempfile
    with stdout_to_stderr() if args.json else nullcontext():
        with tempfile.TemporaryDirectory(prefix="glassbox-hostile-") as tmp:
            outcomes = run_suite(Path(tmp), jobs=args.jobs)
        text = report(outcomes)
        Path(args.out).write_text(text)
        if not args.json:
            print(text)
    if args.json:
        print_json({"outcomes": [outcome_json(o) for o in outcomes], "report": args.out})
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
