"""What the user asked for, and the results for it: session state, the shared result cache, the workers.

The pages never run anything themselves: they call `exploration()` (and, on a button, `run_bench()` or
`run_inductor()`), which return a cached worker Outcome or run the worker under an st.status that shows progress.
"""
from __future__ import annotations

import ast
import functools
import os
import textwrap
import shutil
from dataclasses import dataclass, field
import streamlit as st

from app import inputs as input_specs
from app import settings, worker
from app.results import ResultCache, content_key
from engine import options as engine_options
from engine.options import Options
from engine.record import GraphRecord
from samples import DEFAULT_SAMPLE, sample_names, sample_path

PASTED = "pasted"
BACKENDS = dict(engine_options.infos()["backend"].labels)  # the sidebar's names (engine/options.py)


@dataclass(frozen=True)
class Request:
    """Exactly what one explore runs: the code (with any input override appended) and the options (the one
    option set, engine/options.py: the sidebar sets backend, device, dynamic, train, mode and freezing)."""
    source: str
    label: str
    options: Options = field(default_factory=Options)

    def key(self, kind: str = "explore") -> str:
        o = self.options
        return content_key(kind, self.source, self.label, o.backend, o.device, bool(o.dynamic), o.train, o.mode,
                           *(["freeze"] if o.freezing else []))


@st.cache_resource
def result_cache() -> ResultCache:
    """One bounded cache for the whole server: a second browser tab on the same sample is instant."""
    return ResultCache(max_entries=settings.CACHE_ENTRIES)


@st.cache_resource
def warm_worker() -> bool:
    """Start a standby worker (torch already imported) as soon as the server has its first session."""
    worker.STANDBY.refill()
    return True


@st.cache_data(max_entries=64)
def sample_source(name: str) -> str:
    return sample_path(name).read_text(encoding="utf-8")


def description_of(source: str) -> str:
    """A model file's `description` string, read without running it (the sidebar shows it before exploring)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    text = ""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "description"
                                                 for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                text = node.value.value
    if not text:
        text = ast.get_docstring(tree) or ""
    return textwrap.dedent(text).strip()


def machine_memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def default_time_limit_s() -> float:
    return min(float(worker.EXPLORE_TIMEOUT_S), worker.MAX_TIMEOUT_S)


def default_memory_limit_gb() -> float:
    return min(float(worker.MEMORY_GB), machine_memory_gb())


def time_limit_s() -> float:
    """The sidebar's time limit for one exploration (its widget owns the value; GLASSBOX_APP_TIMEOUT by default)."""
    return float(st.session_state.get("time_limit_s") or default_time_limit_s())


def memory_limit_gb() -> float:
    return float(st.session_state.get("memory_limit_gb") or default_memory_limit_gb())


def cuda_available() -> bool:
    """Without importing torch in the server: a driver device node or nvidia-smi means CUDA may be used."""
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


# --- session state ------------------------------------------------------------------------------------------


# The sidebar's widget keys and the options they set (engine/options.py); the toggles are bools
WIDGET_OPTIONS = {"backend": "backend", "device": "device", "dynamic": "dynamic", "train": "train",
                  "freeze": "freezing", "mode": "mode"}
SWITCHES = ("dynamic", "train", "freezing")

# The session's own keys (not a widget's) and their values before anything set them: init() puts them in, so
# the pages read them as attributes.
SESSION_DEFAULTS = {
    "runs": 0,  # script runs of this session (the code editor tells a page revisit)
    "url_restored": False,  # sidebar.restore_from_url ran (once per session)
    "inputs_prefill": "", "input_error": "",  # the shapes box: what the last run reported, a parse error
    "shared_code": None, "share_error": "", "share_missing": False,  # Note [Shareable URL]
    "node": None,  # the node found on the Explorer page (and in the URL)
    "fix_trial": None, "fix_error": "",  # a graph-break fix being tried (app/fix_pane.py)
    "compare_kind": None,
    "editor_key": None, "editor_drawn_in": None, "editor_seen": None, "editor_marks": None, "editor_mounts": 0,
}


def init() -> None:
    warm_worker()
    state = st.session_state
    for key, value in SESSION_DEFAULTS.items():
        state.setdefault(key, value)
    state.runs = state.runs + 1  # script runs of this session (the code editor tells a page revisit)
    if "sample" not in state:
        # ?sample=NAME links straight to a sample (handy for teaching material); the rest of a shared view is
        # restored by sidebar.restore_from_url
        wanted = st.query_params.get("sample")
        if wanted in sample_names():
            state.sample = wanted
        else:
            state.sample = DEFAULT_SAMPLE if DEFAULT_SAMPLE in sample_names() else sample_names()[0]
    if "editor" not in state:
        state.editor = sample_source(state.sample)
    if "applied" not in state:  # the code and input shapes being explored (the editor may differ until Explore)
        state.applied = {"source": state.editor, "label": state.sample, "inputs": None}
    for widget, option in WIDGET_OPTIONS.items():  # the sidebar's widgets start at the options' defaults
        state.setdefault(widget, bool(engine_options.default(option)) if option in SWITCHES else
                         engine_options.default(option))
    state.setdefault("inputs_text", "")


def choose_sample() -> None:
    """on_change of the sample picker: load its code into the editor and explore it."""
    state = st.session_state
    state.editor = sample_source(state.sample)
    state.inputs_text = ""
    state.inputs_prefill = ""
    state.input_error = ""
    state.applied = {"source": state.editor, "label": state.sample, "inputs": None}
    state.shared_code = None


def apply_editor() -> None:
    """on_click of Explore: explore the editor's code, with the input shapes typed if the user changed them."""
    state = st.session_state
    source = state.editor or ""
    label = state.sample if source == sample_source(state.sample) else PASTED
    text = (state.inputs_text or "").strip()
    state.input_error = ""
    if not text or text == (state.inputs_prefill or "").strip():
        # the box shows what the last run reported: no new shapes asked for (keep an override of this same code)
        specs = state.applied["inputs"] if state.applied["source"] == source else None
    else:
        try:
            specs = input_specs.parse_inputs(text)
        except input_specs.InputSpecError as error:
            state.input_error = str(error)
            return
    state.applied = {"source": source, "label": label, "inputs": specs}
    if state.shared_code and label != PASTED:
        state.shared_code = None


def share_current() -> None:
    """on_click of "Share link": pasted code is stored by content and the URL names it (Note [Shareable URL])."""
    from app import share

    state = st.session_state
    if state.applied["label"] == PASTED:
        try:
            state.shared_code = share.store_code(state.applied["source"])
        except (OSError, ValueError) as error:
            state.share_error = str(error)


def sync_url() -> None:
    """Write the view into the URL on every run, so it is kept across pages and can be copied."""
    from app import share

    state = st.session_state
    code = state.shared_code if state.applied["label"] == PASTED else None
    wanted = share.url_from_session({k: state.get(k) for k in share.SESSION_KEYS}, code)
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


def reset_editor() -> None:
    choose_sample()


def current_request() -> Request:
    state = st.session_state
    applied = state.applied
    source = applied["source"]
    if applied["inputs"]:
        source = input_specs.with_inputs(source, applied["inputs"])
    device = state.device if state.device == "cpu" or cuda_available() else "cpu"
    mode = state.mode if state.mode in modes_for(device) else "default"
    return Request(source, applied["label"], Options(backend=state.backend, device=device, dynamic=bool(state.dynamic),
                                                     train=bool(state.train), mode=mode,
                                                     freezing=bool(state.freeze) and not state.train))


def modes_for(device: str) -> list[str]:
    """torch.compile's modes on this device: reduce-overhead records CUDA graphs, so it needs CUDA."""
    modes = [m for m in engine_options.infos()["mode"].choices if m != "reduce-overhead" or device == "cuda"]
    return sorted(modes, key=lambda m: m == "reduce-overhead")  # the CUDA-only mode last


def user_source() -> str:
    """The user's code as explored (without the appended input block)."""
    return st.session_state.applied["source"]


# --- running ----------------------------------------------------------------------------------------------------


def forget_current() -> None:
    """The Re-explore button: drop the cached result so the next run is fresh."""
    result_cache().discard(current_request().key())


def exploration() -> worker.Outcome:
    """The Outcome for the current request: cached, or explored now with progress shown."""
    request = current_request()
    key = request.key()
    cache = result_cache()
    outcome = cache.get(key)
    if outcome is not None:
        st.session_state.last_seconds = (outcome.seconds, True)
        return outcome
    what = request.label if request.label != PASTED else "your code"
    backend = request.options.backend
    with st.status(f"Exploring {what} ({BACKENDS.get(backend, backend)}, {request.options.device})…",
                   expanded=False) as status:
        st.write("A worker process imports torch, runs the model eagerly, then compiles it stage by stage.")

        def tick(seconds: float) -> None:
            status.update(label=f"Exploring {what}… {seconds:.0f} s")

        outcome = worker.explore(request.source, request.label, request.options, on_tick=tick,
                                 timeout=time_limit_s(), memory_gb=memory_limit_gb())
        if outcome.problem is None:
            status.update(label=f"Explored {what} in {outcome.seconds:.1f} s", state="complete")
        else:
            status.update(label=f"{outcome.problem.title} ({outcome.seconds:.1f} s)", state="error")
    cache.put(key, outcome)
    st.session_state.last_seconds = (outcome.seconds, False)
    return outcome


def cached(kind: str) -> worker.Outcome | None:
    return result_cache().get(current_request().key(kind))


def run_bench(with_inductor: bool = False) -> worker.Outcome:
    """Eager vs Glassbox in seconds; with Inductor, its cold compile adds tens of seconds. Cached apart."""
    if with_inductor:
        return _run_long_job("bench+inductor", functools.partial(worker.bench, with_inductor=True),
                             "Benchmarking eager vs Glassbox vs Inductor (Inductor's cold compile takes a while)…",
                             "Benchmarking…", "Benchmarked in")
    return _run_long_job("bench", functools.partial(worker.bench, with_inductor=False),
                         "Benchmarking eager vs Glassbox…", "Benchmarking…", "Benchmarked in")


def cached_bench() -> worker.Outcome | None:
    """The bench of this request, the one with Inductor first."""
    return cached("bench+inductor") or cached("bench")


def run_profile() -> worker.Outcome:
    return _run_long_job("profile", worker.profile, "Timing every kernel inside its wrapper…", "Profiling…",
                         "Profiled in")


def run_inductor() -> worker.Outcome:
    return _run_long_job("inductor", worker.inductor, "Compiling with Inductor (torch.compile), cold…",
                         "Compiling with Inductor…", "Inductor finished in")


def run_compare(side_a: list[str], side_b: list[str], edited: str | None = None) -> worker.Outcome:
    """Two explorations of the current code and their diff (engine compare), cached by both sides' settings."""
    request = current_request()
    kind = "compare:" + " ".join(side_a) + "|" + " ".join(side_b) + (f"|{content_key('edit', edited)}" if edited else "")
    with st.status("Comparing: two explorations, each kernel timed…", expanded=False) as status:
        outcome = worker.compare(request.source, request.label, side_a, side_b, edited,
                                 on_tick=lambda s: status.update(label=f"Comparing… {s:.0f} s"),
                                 timeout=max(worker.BENCH_TIMEOUT_S, time_limit_s()), memory_gb=memory_limit_gb())
        status.update(label=f"Compared in {outcome.seconds:.0f} s",
                      state="complete" if outcome.problem is None else "error")
    result_cache().put(request.key(kind), outcome)
    st.session_state.compare_kind = kind
    return outcome


def cached_compare() -> worker.Outcome | None:
    kind = st.session_state.compare_kind
    return result_cache().get(current_request().key(kind)) if kind else None


def _run_long_job(kind: str, job, title: str, ticking: str, done: str) -> worker.Outcome:
    """A bench or Inductor job in a worker, with a ticking status line; its outcome is cached under `kind`."""
    request = current_request()
    with st.status(title, expanded=False) as status:
        def tick(seconds: float) -> None:
            status.update(label=f"{ticking} {seconds:.0f} s")

        outcome = job(request.source, request.label, request.options, on_tick=tick,
                      timeout=max(worker.BENCH_TIMEOUT_S, time_limit_s()), memory_gb=memory_limit_gb())
        status.update(label=f"{done} {outcome.seconds:.0f} s", state="complete" if outcome.problem is None else "error")
    result_cache().put(request.key(kind), outcome)
    return outcome


def run_assembly(graph: GraphRecord, graph_index: int, kernel: str) -> worker.Outcome:
    with st.status(f"Lowering {kernel} with Triton for sm_90 (TTIR → TTGIR → LLIR → PTX → SASS)…",
                   expanded=False) as status:
        outcome = worker.assembly(graph, [kernel],
                                  on_tick=lambda s: status.update(label=f"Lowering {kernel}… {s:.0f} s"))
        status.update(label=f"Lowered {kernel} in {outcome.seconds:.1f} s",
                      state="complete" if outcome.problem is None else "error")
    result_cache().put(current_request().key(f"asm:{graph_index}:{kernel}"), outcome)
    return outcome


def sample_file_text(name: str) -> str:
    return sample_source(name)


def model_path_name() -> str:
    return worker.model_file_name(st.session_state.applied["label"])

