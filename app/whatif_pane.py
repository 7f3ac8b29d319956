"""The Graph breaks page's recompile what-if (Note [Recompile what-if] in engine/tools/whatif.py): other input
shapes or dtypes, asked of Dynamo's guards before they run, then run: the prediction beside what happened."""
from __future__ import annotations

import streamlit as st

from app import state, ui, worker
from app.safe_text import md_text
from engine.record import Exploration


def _code_span(text: str) -> str:
    """Record text inside a Markdown code span: nothing in it renders, so it needs no escapes, only no backtick
    (and one line)."""
    return " ".join(text.replace("`", "'").split())


def _job(text: str, dynamic: bool, marks: str) -> worker.Outcome:
    request = state.current_request()
    name = worker.model_file_name(request.label)
    options = request.options
    with st.status("Asking Dynamo's guards, then running the inputs…", expanded=False) as status:
        finished = worker.run_job(
            lambda workdir: ["--", "whatif", str(workdir / name), "--inputs", text, "--json", "--backend",
                             options.backend, "--device", options.device] + (["--dynamic"] if dynamic else [])
            + (["--mark-dynamic", marks] if marks else []),
            worker.limits(max(worker.BENCH_TIMEOUT_S, state.time_limit_s()), state.memory_limit_gb()),
            inputs={name: request.source}, on_tick=lambda s: status.update(label=f"What-if… {s:.0f} s"))
        document = worker.parse_json(finished.stdout)
        problem = None if finished.returncode == 0 and document is not None else \
            worker.diagnose(finished, document, model_name=name)
        outcome = worker.Outcome(document=document, problem=problem, seconds=finished.seconds)
        status.update(label=f"Answered in {outcome.seconds:.0f} s", state="complete" if problem is None else "error")
    state.result_cache().put(request.key(f"whatif:{text}:{dynamic}:{marks}"), outcome)
    return outcome


def _dim_toggles(record: Exploration) -> str:
    """One row of pills per tensor input, a pill per dim: the dims picked are marked dynamic on the example
    before it compiles (torch._dynamo.mark_dynamic). Returns them as --mark-dynamic's 'INPUT:DIM,...'."""
    tensors = [spec for spec in record.input_specs if spec.shape or spec.dtype in TENSOR_DTYPES]
    if not tensors:
        return ""
    st.caption("Mark dims dynamic (torch._dynamo.mark_dynamic on the example input before it compiles): "
               "a marked size is a symbol, so a new size there need not recompile")
    picked = []
    for position, spec in enumerate(tensors):
        options = list(range(len(spec.shape)))
        chosen = st.pills(f"tensor input {position}: {spec.dtype}{spec.shape}", options, selection_mode="multi",
                          format_func=lambda dim, shape=spec.shape: f"dim {dim} = {shape[dim]}",
                          key=f"whatif_dims_{position}")
        picked += [f"{position}:{dim}" for dim in chosen or []]
    return ",".join(picked)


TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")


def version_checks(prediction: dict) -> None:
    """The checks of the version compiled for the example, the ones that matter first; the raw dump folded
    (Note [Guards that matter] in engine/tools/guard_tree.py). They are checks, not the guards listed below
    (Note [Guards and checks] in app/guards_pane.py)."""
    guards = prediction.get("guards") or {}
    if not guards:
        return
    raw = guards.get("raw") or []
    kinds = ", ".join(f"{count} {kind}" for kind, count in (guards.get("checks") or {}).items())
    tensor = " (one check of an input tensor looks at its shape, dtype, stride, requires_grad and device)" \
        if guards.get("inputs") else ""
    st.markdown("**The checks that matter** (the version compiled for the example inputs)")
    st.markdown("\n".join(f"- `{_code_span(line)}`" for line in guards.get("matters") or []))
    st.caption(f"What this version's {len(raw)} checks look at: {md_text(kinds)}{tensor}.")
    with st.expander(f"All {len(raw)} checks of this version, as Dynamo's guard tree runs them", expanded=False):
        st.code("\n".join(raw[:800]) + (f"\n# ... {len(raw) - 800} more" if len(raw) > 800 else ""),
                language="python", wrap_lines=True)


def render(record: Exploration) -> None:
    st.markdown("**What if: other inputs** — would they recompile? Dynamo's guards answer before they run")
    left, middle, right = st.columns([3, 1.4, 1.2], vertical_alignment="bottom")
    text = left.text_input("Inputs, one per tensor", value=record.inputs, key="whatif_inputs",
                           help="dtype[sizes] per tensor input, comma-separated, e.g. float32[16, 128]")
    dynamic = middle.toggle("dynamic=True", key="whatif_dynamic", help="ask the dynamic-shape compile instead")
    marks = _dim_toggles(record)
    outcome = state.result_cache().get(state.current_request().key(f"whatif:{text}:{dynamic}:{marks}"))
    if right.button("Ask, then run", key="whatif_run", type="primary"):
        outcome = _job(text, dynamic, marks)
    if outcome is None:
        st.caption("Change a size or a dtype above and press **Ask, then run**: the guards of every compiled "
                   "version are checked against the new inputs first, then the inputs run, so the prediction is "
                   "checked too.")
        return
    if outcome.problem is not None:
        ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
        return
    result = outcome.document
    prediction, happened = result["prediction"], result["outcome"]
    changed = result.get("changed_dims") or []
    if changed:
        names = prediction.get("input_names") or []
        st.caption("Sizes that change: " + md_text("; ".join(
            f"{names[c['input']] if c['input'] < len(names) else 'tensor input ' + str(c['input'])} "
            + (f"dim {c['dim']}" if c["dim"] is not None else "rank") + f" {c['from']} → {c['to']}"
            + (" (marked dynamic)" if c["marked"] else "") for c in changed)))
    if prediction.get("contradiction"):
        st.error(f"**The mark contradicts the code**: {md_text(prediction.get('reason', ''))}")
        return
    if not prediction.get("known"):
        st.info(f"No prediction: {md_text(prediction.get('reason', ''))}")
    elif prediction["recompile"]:
        failed = [f for check in prediction["checked"] for f in check["failed"]]
        st.error(f"**Would recompile**: no compiled version's guards pass ({', '.join(prediction['failed_kinds'])} "
                 "guards fail):\n\n" + "\n".join(f"- version {c['entry']}: `{_code_span(f)}`"
                                                 for c in prediction["checked"] for f in c["failed"]))
        st.info(md_text(prediction["dynamic"]) if failed else "")
    else:
        why = (prediction.get("dynamic") or "").removeprefix("no recompile: ").removeprefix("no recompile either way: ")
        st.success("**No recompile**: a compiled version's guards all pass for these inputs"
                   + (f"; {md_text(why)}." if why else "."))
    words = (f"recompiled ({happened['new_graphs']} new graph(s))" if happened["recompiled"] else "no recompile")
    (st.success if result["predicted_right"] else st.warning)(
        f"Then ran them: {words}; the prediction was {'right' if result['predicted_right'] else 'wrong'}.")
    version_checks(prediction)
