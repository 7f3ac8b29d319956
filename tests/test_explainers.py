"""Record -> teaching text, fusion groups named by ops and FX nodes, the memory timeline, and shareable state
(visualizers/teaching.py, visualizers/memory.py, app/share.py)."""
import re

import pytest
import torch

import engine
from app import share
from engine.tools import cli_format
from engine.record import AtenNode, Exploration, GraphRecord, IRNode, IRRecord, MemoryBuffer, MemoryRecord
from engine.tools.model_file import load_model_file
from visualizers import memory, teaching


@pytest.fixture(scope="module")
def softmax_record():
    spec = load_model_file("softmax")
    # read back from JSON into the typed record, as the app does (app/worker.py)
    return Exploration.from_json(engine.explore(spec.model, spec.example_inputs, name=spec.name, fusion=False).to_json())


@pytest.fixture(scope="module")
def mlp_record():
    spec = load_model_file("mlp")
    return Exploration.from_json(engine.explore(spec.model, spec.example_inputs, name=spec.name).to_json())


BUFFER = re.compile(r"\bbuf\d+\b")


def _two_op_graph() -> GraphRecord:
    """buf0 = mm (FX node `linear`), buf1 = relu of it (FX node `act`), buf2 = topk run eagerly (FX `top`)."""
    aten = [AtenNode(name="mm", op="call_function", target="aten::mm", fx_origins=["linear"]),
            AtenNode(name="relu", op="call_function", target="aten::relu", fx_origins=["act"]),
            AtenNode(name="topk", op="call_function", target="aten::topk", fx_origins=["top"])]
    ir = IRRecord(nodes=[IRNode(name="buf0", kind="extern", size=["4"], dtype="float32", aten_origins=["mm"]),
                         IRNode(name="buf1", kind="pointwise", size=["4"], dtype="float32", aten_origins=["relu"]),
                         IRNode(name="buf2", kind="fallback", size=["4"], dtype="float32", aten_origins=["topk"],
                                reason="sorting runs eagerly (Note [Sorting runs eagerly] in engine/lowering.py)")])
    memory = MemoryRecord(buffers=[MemoryBuffer(name="buf1", bytes=16, first=1, last=1, reuses="buf0")])
    return GraphRecord(index=0, aten=aten, ir=ir, memory=memory)


@pytest.mark.parametrize("words", [teaching.plain_words, cli_format.plain_words])
def test_plain_words_drop_note_references_and_say_buffers_as_ops(words):
    # the engine's references to its Notes go, in each form they take; the sentence around them stays
    assert words("rows per program (Note [Row tiles])") == "rows per program"
    assert words("rows per program (see Note [Row tiles] in engine/schedule.py).") == "rows per program."
    assert words("two passes (cheaper; see Note [Online softmax])") == "two passes"
    assert words("Note [Row tiles] rows per program") == "rows per program"
    assert "Note [" not in words("a (Note [A]) and b (see Note [B] in x/y.py), then Note [C]")
    assert words(None) == "" and words("nothing to drop") == "nothing to drop"
    # given the graph, a buffer is said as the op that computes it; a library call by its op
    graph = _two_op_graph()
    said = words("buf1 is contiguous along the outputs", graph)
    assert said.startswith("relu") and "result" in said and not BUFFER.search(said)
    said = words("producer buf0 is a library call (mm): not fused (Note [Library calls])", graph)
    assert "mm is a library call" in said and not BUFFER.search(said) and "Note [" not in said
    assert words("buf9 is unknown", graph) == "buf9 is unknown"  # no such node: left as it is, not guessed
    assert BUFFER.search(words("buf1 is contiguous")), "without the graph there is nothing to say it as"


def test_teaching_says_fallbacks_and_reused_memory_as_ops_not_buffers():
    graph = _two_op_graph()
    record = Exploration(model="m", backend="cpp", device="cpu", graphs=[graph])
    for stage in ("loop IR", "code"):
        text = " ".join(teaching.stage_text(record, graph, stage))
        assert not BUFFER.search(text) and "Note [" not in text, text
    ir = " ".join(teaching.stage_text(record, graph, "loop IR"))
    assert "topk" in ir and "top" in ir and "falls back to eager" in ir and "sorting runs eagerly" in ir
    code = " ".join(teaching.stage_text(record, graph, "code"))
    assert "reuses memory" in code and "relu" in code and "mm" in code  # the ops whose results share storage


def test_teaching_text_names_this_models_ops_and_kernels(mlp_record):
    graph = mlp_record.graphs[0]
    text = {stage: " ".join(teaching.stage_text(mlp_record, graph, stage))
            for stage in ("capture", "ATen", "loop IR", "fusion", "code", "run", "bench")}
    assert "1 graph" in text["capture"] and "no graph break" in text["capture"]
    kernels = graph.kernels
    assert f"{len(kernels)} kernel" in text["fusion"]
    assert "match eager" in text["run"]
    assert "profile" in text["bench"]  # explored without it: says so
    assert str(len(graph.ir.nodes)) in text["loop IR"]


def test_fusion_decisions_are_named_by_ops_and_fx_nodes(softmax_record):
    graph = softmax_record.graphs[0]
    decision = graph.fusion.decisions[0]
    named = teaching.decision_ops(graph, decision.producer)
    assert named["ops"] and named["fx"] == ["softmax"] and not any(op.startswith("buf") for op in named["ops"])
    assert "FX: softmax" in teaching.describe_group(graph, decision.consumer)
    assert "stay apart" in " ".join(teaching.fusion_text(graph))  # fusion=off: refusals explained


def test_memory_timeline_has_a_bar_per_buffer_and_the_peak(softmax_record):
    graph = softmax_record.graphs[0]
    buffers = graph.memory.buffers
    figure = memory.memory_timeline_figure(graph)
    bars = [t for t in figure.data if t.type == "bar"]
    assert len(bars) == len(buffers)
    live = memory.live_bytes(buffers, len(graph.kernels) + 1)
    assert max(live) > 0
    assert any("peak" in (a.text or "") for a in figure.layout.annotations)


def test_live_bytes_count_a_reused_storage_once():
    buffers = [MemoryBuffer("a", bytes=100, first=0, last=1), MemoryBuffer("b", bytes=100, first=2, last=3, reuses="a"),
               MemoryBuffer("c", bytes=10, first=1, last=2)]
    assert memory.live_bytes(buffers, 4) == [100, 110, 110, 100]


def test_url_state_keeps_only_valid_values():
    state = share.clean_state({"page": "explorer", "sample": "softmax", "backend": "rust", "stage": "fusion",
                               "node": "<script>", "dynamic": "1", "evil": "x", "code": "zz"},
                              samples=["softmax"], pages=["explorer"], stages=["fusion"])
    assert state == {"page": "explorer", "sample": "softmax", "stage": "fusion", "dynamic": "1"}


def test_pasted_code_round_trips_by_content_and_a_missing_link_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_SHARE_DIR", str(tmp_path))
    source = "import torch\nmodel = torch.relu\nexample_inputs = (torch.randn(4),)\n"
    key = share.store_code(source)
    assert share.store_code(source) == key and share.load_code(key) == source
    assert share.load_code("0" * 24) is None  # no such code (another server, a cleaned cache)
    (tmp_path / f"{key}.py").write_text("tampered")
    assert share.load_code(key) is None
    with pytest.raises(ValueError):
        share.store_code("x" * (share.MAX_SHARED_BYTES + 1))



def test_session_and_url_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("GLASSBOX_SHARE_DIR", str(tmp_path))
    stages = ["none", "capture", "fusion", "loop IR"]
    values = share.session_from_url({"sample": "softmax", "backend": "triton", "dynamic": "1", "stage": "loop IR",
                                     "side": "none"}, ["softmax"], stages)
    assert values == {"sample": "softmax", "backend": "triton", "dynamic": True, "stage_left": "loop IR",
                      "stage_right": "none"}
    assert share.url_from_session(values) == {"sample": "softmax", "backend": "triton", "dynamic": "1",
                                              "stage": "loop IR", "side": "none"}
    key = share.store_code("x = 1\n")
    assert share.session_from_url({"code": key}, [], stages)["code"] == "x = 1\n"
    assert share.session_from_url({"code": "f" * 24}, [], stages) == {"code_missing": "f" * 24}
    assert "sample" not in share.url_from_session(values, code=key)


def test_guards_are_told_by_kind():
    from visualizers import tables

    guards = ["shape_env", "grad_mode", "L['x']: size()[0] == 8",
              "L['x']: hasattr(L['x'], '_dynamo_dynamic_indices') == False",
              "empty_nn_module_hooks_dict on G['net']._forward_hooks", "G['net']: ___check_type_id(G['net'], 1)",
              "guard on G['net'].config"]
    groups = tables.guard_groups(guards)
    assert groups["shapes and sizes"] == ["shape_env", "L['x']: size()[0] == 8"]  # not "global state"
    assert groups["global state"] == ["grad_mode"] and len(groups["inputs"]) == 1
    assert list(groups) == [k for k in tables.GUARD_KINDS if k in groups] and sum(map(len, groups.values())) == 7
    assert tables.guard_summary(guards).startswith("2 shapes and sizes, 1 inputs, 1 global state")


def test_the_mode_is_kept_in_the_url():
    query = share.url_from_session({"sample": "mlp", "mode": "max-autotune"})
    assert query["mode"] == "max-autotune"
    assert share.session_from_url(query, samples=["mlp"], stages=[])["mode"] == "max-autotune"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)) * 0.5 + x


@pytest.fixture(scope="module")
def layers_record():
    """Four alike blocks: a Linear (a library call, templates off), then GELU, scale and residual add fused."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Block() for _ in range(4)]).eval()
    return Exploration.from_json(engine.explore(model, (torch.randn(4, 16),), name="layers", templates="off").to_json())


def test_alike_layers_are_told_once_with_their_count_in_users_words(layers_record):
    from engine.tools import cli_format
    graph = layers_record.graphs[0]
    aten = teaching.aten_text(graph)
    linear = [line for line in aten if "addmm" in line or " mm" in line]
    assert len(linear) == 1 and "each decomposed" in linear[0], aten  # one sentence for the four Linears
    fusion = teaching.fusion_text(graph)
    library = sum(1 for k in graph.kernels if k.kind == "extern")
    assert library >= 4 and f"{library} library calls" in fusion[0] and "extern" not in fusion[0], fusion
    loop_nests = [line for line in fusion if "in one loop nest" in line]
    assert loop_nests and not any("mm" in line.split(" in one loop nest")[0] for line in loop_nests), fusion
    refused = [d for d in graph.fusion.decisions if not d.fused]
    alike = [line for line in fusion if "stay apart" in line]
    assert alike and any("pairs alike" in line for line in alike), fusion
    assert not any(re.search(r"\bbuf\d+", line) or "'s result is a library call" in line for line in fusion)
    told = [int(n) for line in alike for n in re.findall(r"(\d+) pairs alike", line)] or [1]
    more = [int(m) for line in fusion for m in re.findall(r"^(\d+) more refusal", line)]
    assert sum(told) + sum(more) + sum(1 for line in alike if "pairs alike" not in line) == len(refused), fusion
    # the CLI's text counts each repeated refusal over the whole graph, and the counts add up
    summary = cli_format.graph_summary(graph, verbose=False)
    counts = [int(c) if c else 1 for line in summary if line.startswith("    refused")
              for c in [re.search(r"\(x(\d+)\)$", line) and re.search(r"\(x(\d+)\)$", line).group(1)]]
    hidden = [int(h) for line in summary for h in re.findall(r"\.\.\. (\d+) more refusal", line)]
    assert sum(counts) + sum(hidden) == len(refused) and max(counts) >= 4, summary
