"""Compare (what-if): the current model explored twice, under two settings, and their differences."""
from __future__ import annotations

import streamlit as st

from app import state, ui
from app.safe_text import md_text
from engine import options as engine_options
from visualizers import compare as compare_view

st.markdown("### Compare two compiles")
st.caption("What changes when you switch the backend, dynamic shapes, fusion, or edit the model: the kernels "
           "(same / merged / split / added / removed, matched by the ATen nodes they compute), the code and the "
           "time (each kernel timed in its wrapper).")


def side_settings(column, side: str, defaults: dict) -> list[str]:
    with column:
        st.markdown(f"**{side}**")
        compiler = st.selectbox("compiler", ["glassbox", "inductor"], key=f"cmp_{side}_compiler",
                                index=["glassbox", "inductor"].index(defaults.get("compiler", "glassbox")))
        settings = [f"compiler={compiler}"]
        if compiler == "glassbox":
            backends = list(engine_options.infos()["backend"].choices)
            backend = st.selectbox("backend", backends, key=f"cmp_{side}_backend",
                                   index=backends.index(defaults.get("backend", engine_options.default("backend"))))
            dynamic = st.checkbox("dynamic shapes", key=f"cmp_{side}_dynamic", value=defaults.get("dynamic", False))
            fusion = st.checkbox("fusion", key=f"cmp_{side}_fusion", value=defaults.get("fusion", True))
            cap = st.number_input("max IR nodes per kernel (0: no cap)", min_value=0, value=0, step=1,
                                  key=f"cmp_{side}_cap")
            settings += [f"backend={backend}", f"dynamic={'true' if dynamic else 'false'}",
                         f"fusion={'on' if fusion else 'off'}"] + ([f"max_nodes={int(cap)}"] if cap else [])
        return settings


# Note [Compare presets]: the questions people ask, each a pair of settings on the same backend and device (C++
# against Triton under the CPU interpreter compares a compiler with an emulator: its times mean nothing)
PRESETS = {
    "fusion on vs off": (["fusion=on"], ["fusion=off"]),
    "GEMM templates on vs off": (["templates=on"], ["templates=off"]),
    "this code before vs after an edit": ([], []),
    "Glassbox vs Inductor": (["compiler=glassbox"], ["compiler=inductor"]),
    "custom": None,
}
preset = st.selectbox("What to compare", list(PRESETS), key="cmp_preset")
edited = None
if PRESETS[preset] is not None:
    options = state.current_request().options
    base = [f"backend={options.backend}", f"device={options.device}"]
    side_a, side_b = (list(side) + ([] if "compiler=inductor" in side else base) for side in PRESETS[preset])
    if preset == "this code before vs after an edit":
        edited = st.text_area("B's code (edit it)", value=state.user_source(), height=240, key="cmp_edited_code")
    st.caption(f"A: {' '.join(side_a) or 'the code as it is'} · B: {' '.join(side_b) or 'the edited code'} "
               "(the sidebar's backend and device)")
else:
    left, right = st.columns(2, gap="medium")
    side_a = side_settings(left, "A", {"backend": "cpp"})
    side_b = side_settings(right, "B", {"backend": "triton"})
    with right:
        if st.checkbox("B explores edited code (before vs after an edit)", key="cmp_edit"):
            edited = st.text_area("B's code", value=state.user_source(), height=240, key="cmp_edited_code")
if st.button("Compare A and B", type="primary", key="cmp_run"):
    state.run_compare(side_a, side_b, edited)
outcome = state.cached_compare()
if outcome is None:
    st.info("Pick two settings and press **Compare A and B** (two explorations in a worker: a few seconds each; "
            "Triton on the CPU runs under its interpreter, which is slow).")
elif outcome.problem is not None and not outcome.document:
    ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
else:
    document = outcome.document
    kernels, timing = document.get("kernels") or {}, document.get("timing") or {}
    counts = kernels.get("count") or [0, 0]
    paired = sum(len(kernels.get(key) or []) for key in ("same", "merged", "split", "changed"))
    columns = st.columns(5)
    columns[0].metric("kernels A", counts[0])
    columns[1].metric("kernels B", counts[1], delta=counts[1] - counts[0], delta_color="off")
    columns[4].metric("kernels paired", paired, help="pairings across the sides, by the nodes the kernels compute")
    speedup = timing.get("speedup_b_over_a")
    judged = (timing.get("verdict") or {}).get("judged", True)
    columns[2].metric("speedup of B over A", ("too noisy" if not judged else f"{speedup:.3g}x")
                      if isinstance(speedup, (int, float)) else "-",
                      help="time of A / time of B: higher is better for B; \"too noisy\" when the spreads are "
                           "too wide to tell")
    columns[3].metric("code lines changed", sum(1 for line in (document.get("code_diff") or "").splitlines()
                                                  if line[:1] in "+-" and line[:3] not in ("+++", "---")))
    st.caption(f"A: {document['a']['label']} · B: {document['b']['label']}. {compare_view.speedup_sentence(timing)}")
    for side in ("a", "b"):
        record = compare_view.side_record(document, side)
        if record is not None and any(g.profile.interpreted for g in record.graphs):
            st.warning(f"{side.upper()} is Triton on the CPU: it ran under Triton's interpreter, so its times say "
                       "nothing about a GPU (compare its kernels and code, not its speed).")
    for side in ("a", "b"):
        for error in (document.get("errors") or {}).get(side) or []:
            st.error(f"{side.upper()} failed in {error.get('stage', '?')}: {error.get('message', '')}")
    for side in ("a", "b"):  # Note [Bench and compare judged outside the job]: each side's check
        verify = ((document.get(side) or {}).get("record") or {}).get("verify") or {}
        if verify and verify.get("ok") is not True:
            st.error(md_text(f"{side.upper()}'s outputs differ from eager's ({verify.get('verdict', 'mismatch')}, "
                             f"judged outside the job): {verify.get('problem', '')}"))
    st.markdown("**Kernels**")
    st.caption("Kernels paired across the sides by the nodes they compute: same, merged, split, changed (they "
               "share nodes: an op alone in A, with its neighbours in B), only in one side.")
    st.dataframe(compare_view.kernel_diff_rows(kernels, document), hide_index=True, width="stretch")
    st.markdown("**Time per kernel**")
    st.dataframe(compare_view.timing_rows(document), hide_index=True, width="stretch")
    st.markdown("**Code diff** (A → B: kernels, then the wrapper; the shared helpers folded)")
    ui.show_code(document.get("code_diff") or "(identical)", "diff", max_height=640)
