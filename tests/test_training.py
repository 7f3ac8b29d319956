"""Training through AOTAutograd: the samples train through both backends (loss and every gradient match eager),
the partition is recorded and recomputation shrinks the saved set, compile() trains, and bad input gets a clear
message."""
import pytest
import torch
from torch import nn

import engine
from engine.tools.model_file import load_model_file
from engine.train_verify import TrainingInputError

TRAINED_SAMPLES = ["mlp", "transformer_block", "conv_bn_relu", "gpt_decoder", "bert_encoder", "vit", "moe"]


def _train(model, inputs, backend="cpp", **kwargs):
    return engine.explore(model, inputs, backend=backend, train=True, **kwargs)


def _check_step(exploration):
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients, *verify.buffers] if not e.ok]
    assert verify.gradients, "no gradient was checked"
    phases = [g.phase for g in exploration.graphs]
    assert "forward" in phases and "backward" in phases, phases
    for graph in exploration.graphs:
        if graph.phase == "forward":
            partition = graph.partition
            assert partition.saved, "the partition saves nothing"
            assert all(s.reason and s.bytes >= 0 for s in partition.saved + partition.recomputed)
            assert partition.saved_bytes <= partition.saved_all_bytes
        if graph.phase == "backward":
            assert graph.partition.forward_graph < graph.index
            assert any(k.fx_origins for k in graph.kernels), "backward kernels lost their FX provenance"
            # backward ops are decomposed, lowered, or library calls (convolution_backward, attention's backward)
            assert not [k.ops for k in graph.kernels if k.kind == "fallback"]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", TRAINED_SAMPLES)
def test_sample_trains_like_eager(name, backend):
    spec = load_model_file(name)
    model = spec.model.train()  # conv_bn_relu: batch statistics and running stats; bert_encoder: dropout
    _check_step(_train(model, spec.example_inputs, backend, name=name, tolerance=spec.tolerance))


def test_every_parameter_gradient_is_named_by_its_path():
    spec = load_model_file("transformer_block")
    verify = _train(spec.model.train(), spec.example_inputs).verify
    names = {e.name for e in verify.gradients}
    assert names == {f"param:{n}" for n, _ in spec.model.named_parameters()} | {"input[0]"}


def test_batch_norm_running_stats_move_like_eager():
    spec = load_model_file("conv_bn_relu")
    verify = _train(spec.model.train(), spec.example_inputs).verify
    running = [e for e in verify.buffers if "running_mean" in e.name or "running_var" in e.name]
    assert running and all(e.ok for e in running)


def test_backward_kernels_point_at_the_user_line_they_differentiate():
    spec = load_model_file("transformer_block")
    exploration = _train(spec.model.train(), spec.example_inputs)
    backward = next(g for g in exploration.graphs if g.phase == "backward")
    assert any(p.user_lines for p in backward.code.provenance)
    differentiated = {n.name for n in backward.aten}
    assert differentiated


def test_recomputation_changes_the_saved_set():
    """sin's backward reads x, cos's reads sin(x), the matmul's reads cos(sin(x)): saving everything keeps two
    activations; recomputing the pointwise chain from x (an input, alive anyway) keeps none."""
    def chain_then_matmul(x, w):
        return x.sin().cos() @ w

    x, w = torch.randn(32, 64), torch.randn(64, 16)
    exploration = _train(chain_then_matmul, (x, w))
    _check_step(exploration)
    partition = next(g for g in exploration.graphs if g.phase == "forward").partition
    saved_ops = {s.op for s in partition.saved}
    recomputed_ops = {r.op for r in partition.recomputed}
    assert {"sin.default", "cos.default"} <= recomputed_ops, partition.recomputed
    assert not saved_ops & {"sin.default", "cos.default"}, partition.saved
    assert partition.saved_bytes == 0 and partition.saved_all_bytes >= 2 * 32 * 64 * 4
    assert {"sin", "cos"} <= set(partition.saved_all)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_embedding_backward_is_an_atomic_add_not_a_search(backend):
    """Note [Embedding backward as an atomic add]: the weight gradient is a generated kernel that adds each
    token's gradient into its row, instead of every row searching all the tokens (or ATen's library call);
    repeated ids add up."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 4))
    exploration = _train(model, (torch.tensor([[1, 7, 7, 49], [0, 1, 1, 1]]),), backend=backend)
    _check_step(exploration)
    backward = next(g for g in exploration.graphs if g.phase == "backward")
    ops = {k.kind: [] for k in backward.kernels}
    for kernel in backward.kernels:
        ops[kernel.kind] += kernel.ops
    assert "aten::embedding_dense_backward" in ops["pointwise"]
    assert "aten::embedding_dense_backward" not in ops.get("extern", []) + ops.get("fallback", [])
    assert not [k for k in backward.kernels if k.kind == "reduction"
                and "aten::embedding_dense_backward" in k.ops], "the gradient is a search"
    scatters = {n.name for n in backward.ir.nodes if n.kind == "scatter"}
    assert scatters and not any("index_put" in op for op in sum(ops.values(), [])), ops


def test_matmul_outputs_are_saved_not_recomputed():
    def matmul_then_tanh(x, w):
        return (x @ w).tanh()

    exploration = _train(matmul_then_tanh, (torch.randn(8, 16), torch.randn(16, 4)))
    partition = next(g for g in exploration.graphs if g.phase == "forward").partition
    assert not any(r.op in ("mm.default", "tanh.default") for r in partition.recomputed)
    assert partition.saved_bytes == 8 * 4 * 4  # tanh's output (its backward is 1 - tanh^2), kept once


@pytest.mark.slow
def test_saving_the_backward_library_operands(monkeypatch):
    """Note [Operands the backward stores]: with GLASSBOX_PARTITION=save-library-operands a value that a
    library call of the backward reads (the matmul's operand cos(sin(x)), read again for w's gradient) is saved
    instead of recomputed, while what only a pointwise backward reads (sin(x), for cos's) is still recomputed;
    in the transformer block every recomputed value but views was such an operand, so the partition saves
    all that the backward reads. Gradients stay eager's; an unknown policy is refused by name."""
    def chain_then_matmul(x, w):
        return x.sin().cos() @ w

    default = next(g for g in _train(chain_then_matmul, (torch.randn(32, 64), torch.randn(64, 16))).graphs
                   if g.phase == "forward").partition
    spec = load_model_file("transformer_block")
    block_default = next(g for g in _train(spec.model.train(), spec.example_inputs).graphs
                         if g.phase == "forward").partition
    monkeypatch.setenv("GLASSBOX_PARTITION", "save-library-operands")
    exploration = _train(chain_then_matmul, (torch.randn(32, 64), torch.randn(64, 16)))
    _check_step(exploration)
    partition = next(g for g in exploration.graphs if g.phase == "forward").partition
    assert {s.op for s in partition.saved} >= {"cos.default"}
    assert "sin.default" in {r.op for r in partition.recomputed}
    assert partition.saved_bytes == 32 * 64 * 4 and default.saved_bytes == 0
    block = _train(spec.model.train(), spec.example_inputs)
    _check_step(block)
    block_partition = next(g for g in block.graphs if g.phase == "forward").partition
    views = {"view.default", "permute.default", "alias.default", "transpose.int", "t.default", "expand.default"}
    assert {r.op for r in block_partition.recomputed} <= views, block_partition.recomputed
    assert block_default.saved_bytes < block_partition.saved_bytes == block_partition.saved_all_bytes
    monkeypatch.setenv("GLASSBOX_PARTITION", "fastest")
    with pytest.raises(Exception, match="GLASSBOX_PARTITION='fastest'"):
        _train(chain_then_matmul, (torch.randn(4, 8), torch.randn(8, 2)))


def test_compile_trains():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    eager = nn.Sequential(*[m for m in model])  # same parameters
    x = torch.randn(8, 16)
    compiled = engine.compile(model)
    compiled(x).square().mean().backward()
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    eager(x).square().mean().backward()
    for mine, theirs in zip(ours, [p.grad for p in eager.parameters()]):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-4)


def test_loss_fn_is_used():
    model = nn.Linear(8, 3)
    inputs = (torch.randn(4, 8), torch.tensor([0, 1, 2, 1]))
    exploration = _train(lambda x, target: model(x), inputs,
                         loss_fn=lambda out, x, target: nn.functional.cross_entropy(out, target))
    _check_step(exploration)


def test_frozen_parameters_are_skipped_and_said_so():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    model[0].requires_grad_(False)
    verify = _train(model, (torch.randn(4, 8),)).verify
    assert verify.ok
    assert verify.skipped == ["0.weight", "0.bias"]
    assert any("requires_grad=False" in note for note in verify.notes)
    assert "param:0.weight" not in {e.name for e in verify.gradients}


def test_dropout_compares_from_the_same_rng_state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4)).train()
    exploration = _train(model, (torch.randn(8, 16),))
    _check_step(exploration)
    fallbacks = [k for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert any("native_dropout" in " ".join(k.ops) for k in fallbacks)


def test_integer_outputs_get_a_clear_message():
    with pytest.raises(TrainingInputError, match="no floating-point tensor"):
        _train(lambda x: (x > 0).sum(), (torch.randn(4),))


def test_no_gradient_path_gets_a_clear_message():
    embedding = nn.Embedding(10, 4).requires_grad_(False)
    with pytest.raises(TrainingInputError, match="no gradient path"):
        _train(embedding, (torch.tensor([1, 2, 3]),))


def test_in_place_update_of_an_input_is_explained():
    def bump(x, w):
        x.add_(1)
        return x @ w

    exploration = _train(bump, (torch.randn(4, 4), torch.randn(4, 2)))
    verify = exploration.verify
    assert verify.ok, verify
    assert any("in place" in note for note in verify.notes)
    assert all(e.name != "input[0]" for e in verify.gradients)


class _MarksItsViewForCheckpointing(nn.Module):
    """HuBERT's feature extractor: `hidden = x[:, None]; hidden.requires_grad = True` raises when x requires
    grad (a view is no leaf) and runs when it does not."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3)

    def forward(self, x):
        hidden = x[:, None]
        if self.training:
            hidden.requires_grad = True
        return self.conv(hidden).relu()


def test_a_model_that_refuses_inputs_requiring_grad_trains_with_its_inputs_frozen():
    exploration = _train(_MarksItsViewForCheckpointing(), (torch.randn(2, 16),))
    verify = exploration.verify
    assert verify.ok and not exploration.errors, (verify, exploration.errors)
    assert any("raises when its inputs require grad" in note for note in verify.notes), verify.notes
    assert not [g for g in verify.gradients if g.name.startswith("input")]
    assert {g.name for g in verify.gradients} == {"param:conv.weight", "param:conv.bias"}


def test_dynamic_shapes_train_and_keep_graph_order():
    """Under dynamic shapes AOTAutograd compiles the backward at once: it still follows its forward."""
    spec = load_model_file("mlp")
    exploration = _train(spec.model.train(), spec.example_inputs, dynamic=True)
    _check_step(exploration)
    assert [g.phase for g in exploration.graphs] == ["forward", "backward"]


def test_graph_breaks_give_one_backward_per_forward():
    spec = load_model_file("graph_break")
    exploration = _train(spec.model, spec.example_inputs)
    assert exploration.verify.ok and exploration.graph_breaks
    forwards = [g.index for g in exploration.graphs if g.phase == "forward"]
    backwards = sorted(g.partition.forward_graph for g in exploration.graphs if g.phase == "backward")
    assert backwards == forwards


def test_partition_draws_the_joint_graph_with_saved_values_and_the_cut():
    from visualizers import partition as partition_view

    exploration = _train(lambda x, w: x.sin().cos() @ w, (torch.randn(8, 16), torch.randn(16, 4)))
    partition = exploration.graphs[0].partition
    dot = partition_view.joint_dot(partition)
    assert dot.startswith("digraph")
    assert "dashed" in dot and "saved" in dot  # recomputed sin/cos; the saved inputs
    assert partition_view.saved_rows(partition) and partition_view.recomputed_rows(partition)
    rows = partition_view.gradient_rows(exploration.verify)
    assert [r["tensor"] for r in rows] == ["loss", "input[0]", "input[1]"] and all(r["ok"] for r in rows)


@pytest.mark.slow
def test_app_training_toggle_shows_partition_and_gradients():
    from pathlib import Path
    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "app" / "streamlit_app.py")
    at = AppTest.from_file(app, default_timeout=300)
    at.run()
    at.toggle(key="train").set_value(True).run()
    assert not at.exception, at.exception
    at.button_group(key="stage_left").set_value("ATen").run()
    assert not at.exception, at.exception
    text = "\n".join(str(m.value) for m in at.markdown)
    assert "Partition" in text
    at.button_group(key="stage_left").set_value("run").run()
    assert "Training step" in "\n".join(str(m.value) for m in at.markdown)


def test_cli_train_flag_and_a_clear_user_error(tmp_path, capsys):
    import json

    from engine.__main__ import EXIT_USER_ERROR, main

    assert main(["explore", "mlp", "--train", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [g["phase"] for g in record["graphs"]] == ["forward", "backward"]
    assert record["verify"]["ok"] and record["graphs"][0]["partition"]["saved"]
    integer_only = tmp_path / "counts.py"
    integer_only.write_text("import torch\ndef model(x):\n    return (x > 0).sum()\nexample_inputs = (torch.randn(4),)\n")
    assert main(["explore", str(integer_only), "--train"]) == EXIT_USER_ERROR
    assert "no floating-point tensor" in capsys.readouterr().err


def test_a_backward_reading_an_unsaveable_value_saves_what_it_reads():
    """No finite cut (the backward reads a tuple): the partition says so and saves what the backward reads."""
    import operator

    from engine.partition import choose_saved

    graph = torch.fx.Graph()
    x, tangent = graph.placeholder("primals_1"), graph.placeholder("tangents_1")
    x.meta["val"] = tangent.meta["val"] = torch.empty(4)
    pair = graph.call_function(torch.ops.aten.sort.default, (x,))
    pair.meta["val"] = (torch.empty(4), torch.empty(4, dtype=torch.long))
    values = graph.call_function(operator.getitem, (pair, 0))
    values.meta["val"] = torch.empty(4)
    grad = graph.call_function(torch.ops.aten.mul.Tensor, (tangent, pair))  # reads the tuple itself
    grad.meta.update(val=torch.empty(4), partitioner_tag="is_backward")
    graph.output((values, grad))
    choice = choose_saved(graph, num_fwd_outputs=1)
    assert "no finite cut" in choice["note"]
    assert choice["saved"] == [pair]


def test_the_partition_option_chooses_the_policy_and_is_recorded(monkeypatch):
    """partition= (engine/options.py) does what GLASSBOX_PARTITION does, wins over it, and the record says
    which policy ran."""
    def chain_then_matmul(x, w):
        return x.sin().cos() @ w

    monkeypatch.setenv("GLASSBOX_PARTITION", "min-memory")
    inputs = (torch.randn(32, 64), torch.randn(64, 16))
    exploration = _train(chain_then_matmul, inputs, partition="save-library-operands")
    _check_step(exploration)
    partition = next(g for g in exploration.graphs if g.phase == "forward").partition
    assert {s.op for s in partition.saved} >= {"cos.default"} and partition.saved_bytes == 32 * 64 * 4
    assert exploration.options.partition == "save-library-operands"
    assert _train(chain_then_matmul, inputs).options.partition == "min-memory"
