"""The app without a browser: every page through streamlit.testing.v1.AppTest, plus its worker and visualizers.

AppTest runs the real script; each exploration runs the real engine in a worker process (a few seconds each on a
small CPU, shared through the app's result cache across the tests of this module).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import graphviz
import pytest
from streamlit.testing.v1 import AppTest

from app import inputs as input_specs
from app import worker
from app.results import ResultCache, content_key
from engine.options import Options
from engine.record import Exploration, GraphBreakRecord, GraphRecord
from samples import DEFAULT_SAMPLE, sample_names
from visualizers import charts, graphs, provenance, tables
from visualizers import code as code_html

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app" / "streamlit_app.py")
TIMEOUT = 300  # seconds per script run: a cold worker imports torch and compiles

GRAPH_BREAK_CODE = textwrap.dedent('''\
    import torch


    def model(x):
        y = torch.sin(x) * 2
        if y.sum() > 0:
            y = y + 1
        return torch.cos(y)


    example_inputs = (torch.randn(32, 16),)
''')

BROKEN_CODE = textwrap.dedent('''\
    import torch

    def model(x)
        return x * 2

    example_inputs = (torch.randn(4),)
''')


def markdown_text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.success]
    parts += [w.value for w in at.warning] + [e.value for e in at.error] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def html_text(at: AppTest) -> str:
    return "\n".join(str(h.proto.body) for h in at.get("html"))


def dots(at: AppTest) -> list[str]:
    return [chart.proto.spec for chart in at.get("graphviz_chart")]


def started(page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


# --- pages ---------------------------------------------------------------------------------------------------


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_default_sample_renders_explorer():
    at = started()
    assert at.session_state.sample == DEFAULT_SAMPLE
    assert any(f"### {DEFAULT_SAMPLE}" in m.value for m in at.markdown)
    assert not at.error
    graph = dots(at)
    assert graph and "digraph" in graph[0] and "relu" in graph[0]
    assert 'class="gb-code"' in html_text(at)  # the generated code, highlighted
    assert at.get("plotly_chart")  # compile time per stage
    # the stage stepper walks the stages; every stage renders
    for stage in ("ATen", "loop IR", "fusion", "code", "run", "bench"):
        at.button_group(key="stage_left").set_value(stage).run()
        assert not at.exception, (stage, at.exception)
        assert any(m.value == f"#### {stage}" for m in at.markdown), stage
    at.button(key="stage_next").click().run()  # bench -> capture (wraps around)
    assert at.session_state.stage_left == "capture"


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_switching_sample_updates_every_stage():
    at = started()
    at.selectbox(key="sample").set_value("softmax").run()
    assert not at.exception
    assert any("### softmax" in m.value for m in at.markdown)
    at.button_group(key="stage_left").set_value("fusion").run()
    fusion = [dot for dot in dots(at) if "cluster" in dot]
    assert fusion and "kernel_0 · reduction" in fusion[0]  # softmax is one kernel
    at.selectbox(key="stage_right").set_value("loop IR").run()
    assert 'data-language="ir"' in html_text(at) and "reduce_max" in html_text(at)


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_pasted_code_with_a_graph_break_shows_its_reason_and_line():
    at = started("views/model.py")
    at.toggle(key="plain_editor").set_value(True).run()  # AppTest cannot type into the code editor
    at.text_area(key="editor").input(GRAPH_BREAK_CODE)
    at.button(key="explore_button").click().run()
    assert not at.exception
    assert at.session_state.applied["label"] == "pasted"
    assert at.session_state.applied["inputs"] is None  # the shapes box showed the last sample's: not applied
    assert any("1 graph break" in s.value for s in at.success), markdown_text(at)
    at.switch_page("views/breaks.py").run()
    text = markdown_text(at)
    assert "Break 1 — line 6" in text
    assert "tensor" in text.lower()  # the reason, in words: the `if` depends on a tensor's value
    assert "if y.sum() > 0:" in "\n".join(c.value for c in at.code)
    at.switch_page("views/explorer.py").run()
    assert any("GRAPH BREAK at line 6" in dot for dot in dots(at))


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_broken_paste_shows_a_clear_error_and_the_app_keeps_working():
    at = started("views/model.py")
    at.toggle(key="plain_editor").set_value(True).run()  # AppTest cannot type into the code editor
    at.text_area(key="editor").input(BROKEN_CODE)
    at.button(key="explore_button").click().run()
    assert not at.exception
    assert any("problem in the model code" in e.value for e in at.error)
    assert "SyntaxError" in html_text(at) and "pasted.py:3" in html_text(at)
    assert "What to try" in markdown_text(at)
    at.switch_page("views/explorer.py").run()  # every page shows the problem instead of failing
    assert not at.exception and at.error
    at.selectbox(key="sample").set_value("softmax").run()  # and a sample still explores
    assert not at.exception and not at.error
    assert any("### softmax" in m.value for m in at.markdown)


ENDLESS_LOOP_CODE = textwrap.dedent('''\
    import torch

    def model(x):
        while True:
            x = x + 1

    example_inputs = (torch.randn(3),)
''')


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_endless_loop_is_stopped_at_the_time_limit_set_in_the_sidebar_and_the_app_recovers():
    at = started("views/model.py")
    at.number_input(key="time_limit_s").set_value(4).run()
    at.toggle(key="plain_editor").set_value(True).run()  # AppTest cannot type into the code editor
    at.text_area(key="editor").input(ENDLESS_LOOP_CODE)
    at.button(key="explore_button").click().run()
    assert not at.exception
    assert any("ran too long" in e.value for e in at.error), [e.value for e in at.error]
    page = html_text(at)
    assert "after 4 s (its time limit)" in page and "line 5 of pasted.py" in page  # where the loop is
    assert "pasted.py, line 5" in page  # the line, highlighted in the user's code
    assert "Re-explore" in markdown_text(at)
    at.number_input(key="time_limit_s").set_value(180).run()  # the stopped result stays until Re-explore
    assert any("ran too long" in e.value for e in at.error)
    at.selectbox(key="sample").set_value("layernorm").run()  # a fresh worker explores a sample
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("Explored **layernorm**" in s.value for s in at.success)


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_triton_backend_shows_its_kernels_and_lowerings_on_request():
    at = started()
    at.selectbox(key="sample").set_value("softmax").run()
    at.radio(key="backend").set_value("triton").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "triton · cpu" in markdown_text(at).lower() or any("Triton" in m.value for m in at.markdown)
    assert "@triton.jit" in html_text(at) or "triton" in html_text(at)
    at.button_group(key="R_code_view").set_value("Triton lowering").run()
    assert at.button(key="R_asm_button")
    at.button(key="R_asm_button").click().run()
    assert not at.exception
    lowering = at.button_group(key="R_asm_stage")
    assert "ttir" in lowering.options or "TTIR" in lowering.options
    assert 'data-language="ttir"' in html_text(at)


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_input_shapes_can_be_edited():
    at = started("views/model.py")
    at.run()  # the first exploration reported its inputs: they are shown in the box
    assert at.text_input(key="inputs_text").value == "float32[64, 1024]"
    at.text_input(key="inputs_text").input("float32[8, 1024]")
    at.button(key="explore_button").click().run()
    assert not at.exception and not at.error
    assert at.session_state.applied["inputs"] == [{"dtype": "float32", "shape": [8, 1024]}]
    at.switch_page("views/explorer.py").run()
    assert any("f32[8, 1024]" in dot for dot in dots(at))
    at.switch_page("views/model.py").run()
    at.text_input(key="inputs_text").input("float32[8 1024]")
    at.button(key="explore_button").click().run()
    assert "Expected a comma" in at.session_state.input_error or at.error


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_provenance_page_follows_a_node_and_a_generated_line():
    at = started("views/provenance.py")
    assert not at.exception
    charts_ = dots(at)
    assert len(charts_) == 2 and all("#dc2626" in dot for dot in charts_)  # highlighted in FX and ATen
    assert "#fde68a" in html_text(at)  # highlighted lines in code and IR
    at.radio(key="prov_start").set_value("generated line").run()
    assert not at.exception and "#fde68a" in html_text(at)
    at.radio(key="prov_start").set_value("your source line").run()
    assert not at.exception


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_graph_breaks_and_inductor_pages_render():
    at = started("views/breaks.py")
    assert any("No graph breaks" in s.value for s in at.success)
    at.switch_page("views/inductor.py").run()
    assert not at.exception
    assert at.button(key="inductor_button")
    assert "Press **Compile with Inductor**" in markdown_text(at)


# --- the worker ------------------------------------------------------------------------------------------------


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_worker_explores_a_sample_and_reports_its_inputs():
    source = (ROOT / "samples" / "graph_break.py").read_text()
    outcome = worker.explore(source, "graph_break", Options())
    assert outcome.problem is None
    assert [b.lineno for b in outcome.record.graph_breaks] == [15, 19]
    assert outcome.record.graph_breaks[0].filename == "graph_break.py"  # no temp directory in messages
    assert outcome.inputs == [{"dtype": "float32", "shape": [64, 256]}, {"dtype": "float32", "shape": [8]}]


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_worker_kills_a_model_that_hangs():
    outcome = worker.explore("import time\nwhile True:\n    time.sleep(0.1)\n", "pasted", Options(),
                             timeout=4)
    assert outcome.record is None and outcome.problem is not None
    assert "too long" in outcome.problem.title and outcome.seconds < 30


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_worker_survives_a_model_that_crashes_the_interpreter():
    outcome = worker.explore("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "pasted",
                             Options())
    assert outcome.problem is not None and "crashed" in outcome.problem.title
    assert "killed by signal SIGSEGV (segmentation fault)" in outcome.problem.message
    assert outcome.problem.lineno == 2 and "Traceback" not in outcome.problem.message


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
@pytest.mark.parametrize("code,title,words,lineno", [
    ("import os, torch\ndef model(x):\n    os._exit(1)\nexample_inputs = (torch.randn(3),)\n",
     "ended early", "os._exit()", None),
    ("import torch\ndef model(x):\n    raise KeyboardInterrupt\nexample_inputs = (torch.randn(3),)\n",
     "interrupted", "killed by signal SIGINT (interrupt)", 3),
    ("import ctypes, torch\ndef model(x):\n    return ctypes.string_at(0)\nexample_inputs = (torch.randn(3),)\n",
     "crashed", "killed by signal SIGSEGV (segmentation fault)", 3),
], ids=["os_exit", "keyboard_interrupt", "segfault_in_forward"])
def test_worker_that_dies_in_user_code_is_explained_in_words(code, title, words, lineno):
    outcome = worker.explore(code, "pasted", Options())
    assert outcome.record is None and outcome.problem is not None
    assert title in outcome.problem.title and words in outcome.problem.message, outcome.problem
    assert outcome.problem.lineno == lineno
    assert worker.explore(GRAPH_BREAK_CODE, "pasted", Options()).problem is None  # the next one works


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_worker_runs_in_the_sandbox_without_the_servers_secrets(monkeypatch):
    monkeypatch.setenv("GLASSBOX_APP_TEST_SECRET", "hunter2")
    code = ("import os, torch\ndef model(x):\n    raise RuntimeError('env ' + repr(os.environ.get("
            "'GLASSBOX_APP_TEST_SECRET')) + ' cwd ' + os.getcwd())\nexample_inputs = (torch.randn(3),)\n")
    outcome = worker.explore(code, "pasted", Options())
    assert "env None" in outcome.problem.message and "hunter2" not in outcome.problem.log
    assert "cwd /" in outcome.problem.message and "glassbox-run-" in outcome.problem.message  # a private folder


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_the_standby_worker_takes_one_job_and_is_thrown_away():
    worker.STANDBY.refill()
    standby = worker.STANDBY._ready
    assert standby is not None and standby.alive()
    source = (ROOT / "samples" / "softmax.py").read_text()
    outcome = worker.explore(source, "softmax", Options())
    assert outcome.problem is None and outcome.record.verify.ok
    assert not standby.alive() and not standby.workdir.exists()
    assert worker.STANDBY._ready is not standby


def test_stopped_at_finds_the_users_innermost_line():
    dump = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n'
            '  File "/x/torch/nn/module.py", line 10 in _call\n  File "pasted.py", line 7 in helper\n'
            '  File "pasted.py", line 3 in model\n  File "/x/engine/model_file.py", line 99 in run_eager\n')
    assert worker.stopped_at(dump, "pasted.py") == (7, "helper")
    traceback = ('Traceback (most recent call last):\n  File "pasted.py", line 3, in model\n    helper()\n'
                 '  File "pasted.py", line 7, in helper\n    raise KeyboardInterrupt\nKeyboardInterrupt\n')
    assert worker.stopped_at(traceback, "pasted.py") == (7, "helper")
    assert worker.stopped_at(dump, "other.py") is None and worker.stopped_at("", "pasted.py") is None


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_worker_points_at_the_users_line():
    code = "import torch\n\ndef model(x):\n    return x @ torch.ones(3, 3)\n\nexample_inputs = (torch.ones(2, 4),)\n"
    outcome = worker.explore(code, "pasted", Options())
    assert outcome.problem is not None and outcome.problem.lineno == 4
    assert "pasted.py:4" in outcome.problem.message


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_inductor_worker_returns_its_output_code():
    source = (ROOT / "samples" / "softmax.py").read_text()
    outcome = worker.inductor(source, "softmax", Options())
    assert outcome.problem is None, outcome.problem
    document = outcome.document
    assert document["code"] and document["calls"][0] and document["compile_s"] > 0
    assert document["kernels"] and document["kernels"][0]["source"]  # softmax: one fused kernel


def test_last_paragraph_keeps_excerpts_and_drops_model_prints():
    stderr = ("model says hi\n\nSyntaxError at pasted.py:3: expected ':'.\n\n    def model(x)\n"
              "                ^\n\nFix that line and load the file again.\n")
    message = worker.last_paragraph(stderr)
    assert message.startswith("SyntaxError at pasted.py:3") and "def model(x)" in message
    assert worker.user_line(message) == 3
    assert worker.last_paragraph("printed\nGlassbox failed while compiling m: boom.") == \
        "Glassbox failed while compiling m: boom."


# --- plain modules ---------------------------------------------------------------------------------------------


def test_result_cache_is_bounded_lru():
    cache = ResultCache(max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert content_key("x", 1) == content_key("x", 1) != content_key("x", 2)


def test_input_specs_round_trip_and_errors():
    specs = input_specs.parse_inputs("float32[64, 256], int64[8], bool[]")
    assert specs == [{"dtype": "float32", "shape": [64, 256]}, {"dtype": "int64", "shape": [8]},
                     {"dtype": "bool", "shape": []}]
    assert input_specs.format_inputs(specs) == "float32[64, 256], int64[8], bool[]"
    for bad in ("float32[64", "complex[3]", "float32[0]", "float32[3] float32[4]"):
        with pytest.raises(input_specs.InputSpecError):
            input_specs.parse_inputs(bad)
    source = "import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.randn(2, 3),)\n"
    resized = input_specs.with_inputs(source, [{"dtype": "float64", "shape": [5, 3]}])
    assert resized.startswith(source.rstrip("\n"))  # the user's lines keep their numbers
    namespace: dict = {}
    exec(compile(resized, "m.py", "exec"), namespace)
    (tensor,) = namespace["example_inputs"]()
    assert list(tensor.shape) == [5, 3] and str(tensor.dtype) == "torch.float64"


def _record(name: str) -> dict:
    """A real record from the engine's CLI (the app's only input)."""
    source = (ROOT / "samples" / f"{name}.py").read_text()
    outcome = worker.explore(source, name, Options())
    assert outcome.record is not None, outcome.problem
    return outcome.record


@pytest.fixture(scope="module")
def gpt_record() -> Exploration:
    return _record("gpt_decoder")


@pytest.mark.slow
def test_graphs_colour_kinds_cluster_kernels_and_collapse_modules(gpt_record):
    graph = gpt_record.graphs[0]
    kinds = graphs.aten_kinds(graph)
    assert "extern" in kinds.values() and "reduction" in kinds.values() and "param" in kinds.values()
    fused = graphs.graph_dot(graph, "aten", graphs.DrawOptions(kernels_as_clusters=True))
    assert fused.count("subgraph") >= 3 and "kernel_0 ·" in fused
    depth = graphs.auto_depth(graph, "fx")
    assert depth > 0 and graphs.box_count(graph, "fx", depth, hide_params=True) <= 30
    collapsed = graphs.graph_dot(graph, "fx", graphs.DrawOptions(collapse_depth=depth, hide_params=True))
    assert "box3d" in collapsed and collapsed.count("->") < graphs.graph_dot(graph, "fx").count("->")
    group = sorted(graphs.module_groups(graph, "fx", depth))[0]
    expanded = graphs.graph_dot(graph, "fx", graphs.DrawOptions(collapse_depth=depth, expanded=frozenset([group])))
    assert f'label={graphviz.quoting.quote(group)}' in expanded  # the expanded module: a labelled cluster


def test_fallbacks_are_marked_and_breaks_drawn_between_graphs():
    node = {"op": "call_function", "shape": ["4"], "dtype": "float32", "source": None, "module_path": ""}
    graph = GraphRecord.from_json({"index": 0,
             "fx": [{**node, "name": "x", "op": "placeholder", "target": "L_x_", "args": []},
                    {**node, "name": "weird", "target": "weird_op", "args": ["x"]},
                    {**node, "name": "output", "op": "output", "target": "output", "args": ["weird"]}],
             "aten": [{**node, "name": "arg0_1", "op": "placeholder", "target": "arg0_1", "args": [], "fx_origins": []},
                      {**node, "name": "weird_1", "target": "aten::weird", "args": ["arg0_1"],
                       "fx_origins": ["weird"]}],
             "ir": {"nodes": [{"name": "buf0", "kind": "fallback", "size": ["4"], "dtype": "float32",
                               "aten_origins": ["weird_1"], "text": ["..."]}]},
             "kernels": [{"name": "fallback_0", "kind": "fallback", "ir_nodes": ["buf0"], "aten_origins": ["weird_1"],
                          "fx_origins": ["weird"]}]})
    assert graphs.fx_kinds(graph)["weird"] == "fallback"
    dot = graphs.graph_dot(graph, "aten", graphs.DrawOptions(kernels_as_clusters=True))
    assert "FALLBACK (eager)" in dot and "fallback_0 · fallback (eager)" in dot and "dashed" in dot
    record = Exploration(model="m", backend="cpp", device="cpu",
                         graphs=[graph, GraphRecord.from_json({**graph.to_json(), "index": 1})],
                         graph_breaks=[GraphBreakRecord(reason="print() has a side effect: the graph ends",
                                                        filename="m.py", lineno=7)])
    both = graphs.record_dot(record, "fx")
    assert "GRAPH BREAK at line 7" in both and "g0_output -> break0" in both and "break0 -> g1_x" in both


def test_provenance_links_both_ways(gpt_record):
    graph = gpt_record.graphs[0]
    line = provenance.traced_lines(graph)[0]
    back = provenance.from_generated_line(graph, line)
    assert back.kernels and back.ir and back.aten and back.fx
    forward = provenance.from_fx(graph, back.fx)
    assert back.ir <= forward.ir and line in forward.generated_lines
    user = provenance.from_user_line(graph, sorted(back.user_lines)[0])
    assert back.fx <= user.fx


def test_code_charts_and_tables_from_a_record(gpt_record):
    graph = gpt_record.graphs[0]
    text, where = code_html.ir_listing(graph)
    assert all(name in where for name in (n.name for n in graph.ir.nodes))
    page = code_html.highlight_html(text, "ir", hl_lines=where[graph.ir.nodes[0].name])
    assert "#fde68a" in page and "gb-code" in page
    assert tables.kernel_rows(graph)[0]["kernel"] == graph.kernels[0].name
    assert any(not row["fused"] for row in tables.decision_rows(graph)) and tables.numerics_rows(gpt_record.verify)
    figure = charts.stage_times_figure(gpt_record.timings, inductor_compile_s=3.0)
    assert {bar.name for bar in figure.data} >= {"capture", "Inductor compile"}
    bench = {"eager_ms": 2.0, "glassbox_ms": 1.0, "inductor_ms": 0.5, "compile_s": 1.0, "inductor_compile_s": 9.0}
    assert len(charts.bench_figure(bench).data[0].x) == 3 and charts.speedup_figure(bench).data
    json.dumps(charts.compile_figure(bench, gpt_record.timings).to_dict())  # serializable for the browser


def test_server_binds_to_localhost_by_default():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "localhost" and config["server"]["headless"] is True


@pytest.mark.slow
def test_every_sample_is_offered():
    at = started()
    assert at.selectbox(key="sample").options == sample_names()


def test_result_cache_is_bounded_in_bytes():
    # Note [Result cache in bytes]: a count alone let large records take the server's memory
    cache = ResultCache(max_entries=32, max_bytes=10_000)
    cache.put("big", "x" * 20_000)  # larger than the whole budget: not kept
    assert "big" not in cache
    for name in "abcdef":
        cache.put(name, "y" * 1500)  # ~3 kB each, estimated as resident bytes: three fit
    assert cache.bytes <= 10_000 and "a" not in cache and "f" in cache
    cache.discard("f")
    assert "f" not in cache and cache.bytes <= 10_000


def _explored_record() -> dict:
    import torch

    import engine
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    return engine.explore(model, (torch.randn(4, 16),)).to_json()


@pytest.mark.parametrize("shape", ["empty lists", "empty dicts", "short strings", "numbers", "a record"])
def test_the_result_caches_estimate_is_above_what_a_value_holds(shape):
    # Note [Result cache in bytes]: a bench document is the job's own JSON, and one of tiny containers held
    # three times what a fixed factor of its text allowed
    import tracemalloc

    from app.results import estimated_bytes
    text = {"empty lists": json.dumps({"rows": [[] for _ in range(200_000)]}),
            "empty dicts": json.dumps({"rows": [{} for _ in range(200_000)]}),
            "short strings": json.dumps({"rows": [f"a{i % 10}" for i in range(200_000)]}),
            "numbers": json.dumps({"rows": [i + 1000.5 for i in range(200_000)]}),
            "a record": "" if shape != "a record" else json.dumps(_explored_record())}[shape]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        value = json.loads(text)
        if shape == "a record":
            value = Exploration.from_json(value)  # what the app caches: the typed record
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert estimated_bytes(value) >= held, (shape, estimated_bytes(value), held)
    cache = ResultCache(max_entries=32, max_bytes=held * 3 // 2)
    for key in "abc":
        cache.put(key, value)
    assert cache.bytes <= held * 3 // 2 and len(cache) <= 1  # two of them never fit in 1.5 times one
