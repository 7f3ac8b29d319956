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


def _job(text: str, dynamic: bool) -> worker.Outcome:
    request = state.current_request()
    name = worker.model_file_name(request.label)
    options = request.options
    with st.status("Asking Dynamo's guards, then running the inputs…", expanded=False) as status:
        finished = worker.run_job(
            lambda workdir: ["--", "whatif", str(workdir / name), "--inputs", text, "--json", "--backend",
                             options.backend, "--device", options.device] + (["--dynamic"] if dynamic else []),
            worker.limits(max(worker.BENCH_TIMEOUT_S, state.time_limit_s()), state.memory_limit_gb()),
            inputs={name: request.source}, on_tick=lambda s: status.update(label=f"What-if… {s:.0f} s"))
        document = worker.parse_json(finished.stdout)
        problem = None if finished.returncode == 0 and document is not None else \
            worker.diagnose(finished, document, model_name=name)
        outcome = worker.Outcome(document=document, problem=problem, seconds=finished.seconds)
        status.update(label=f"Answered in {outcome.seconds:.0f} s", state="complete" if problem is None else "error")
    state.result_cache().put(request.key(f"whatif:{text}:{dynamic}"), outcome)
    return outcome


def render(record: Exploration) -> None:
    st.markdown("**What if: other inputs** — would they recompile? Dynamo's guards answer before they run")
    left, middle, right = st.columns([3, 1.4, 1.2], vertical_alignment="bottom")
    text = left.text_input("Inputs, one per tensor", value=record.inputs, key="whatif_inputs",
                           help="dtype[sizes] per tensor input, comma-separated, e.g. float32[16, 128]")
    dynamic = middle.toggle("dynamic=True", key="whatif_dynamic", help="ask the dynamic-shape compile instead")
    outcome = state.result_cache().get(state.current_request().key(f"whatif:{text}:{dynamic}"))
    if right.button("Ask, then run", key="whatif_run", type="primary"):
        outcome = _job(text, dynamic)
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
    if not prediction.get("known"):
        st.info(f"No prediction: {md_text(prediction.get('reason', ''))}")
    elif prediction["recompile"]:
        failed = [f for check in prediction["checked"] for f in check["failed"]]
        st.error(f"**Would recompile**: no compiled version's guards pass ({', '.join(prediction['failed_kinds'])} "
                 "guards fail):\n\n" + "\n".join(f"- version {c['entry']}: `{_code_span(f)}`"
                                                 for c in prediction["checked"] for f in c["failed"]))
        st.caption(md_text(prediction["dynamic"]) if failed else "")
    else:
        st.success("**No recompile**: a compiled version's guards all pass for these inputs.")
    words = (f"recompiled ({happened['new_graphs']} new graph(s))" if happened["recompiled"] else "no recompile")
    (st.success if result["predicted_right"] else st.warning)(
        f"Then ran them: {words}; the prediction was {'right' if result['predicted_right'] else 'wrong'}.")
