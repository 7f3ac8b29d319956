"""Compare (what-if): the current model explored twice, under two settings, and their differences."""
from __future__ import annotations

import streamlit as st

from app import compare_presets, state, ui
from app.safe_text import md_text
from engine import options as engine_options
from visualizers import compare as compare_view

st.markdown("### Compare two compiles")
st.caption("What changes when you switch the backend, dynamic shapes, fusion, or edit the model: the kernels "
           "(same / merged / split / changed / added / removed, matched by the ATen nodes they compute), the code "
           "and the time (each kernel timed in its wrapper).")


def side_settings(column, side: str, backend: str) -> list[str]:
    """One side's settings as compare's KEY=VALUE (engine/options.py: their names and choices)."""
    with column:
        st.markdown(f"**{side}**")
        compiler = st.selectbox("compiler", ["glassbox", "inductor"], key=f"cmp_{side}_compiler")
        settings = [f"compiler={compiler}"]
        if compiler == "glassbox":
            backends = list(engine_options.infos()["backend"].choices)
            backend = st.selectbox("backend", backends, key=f"cmp_{side}_backend", index=backends.index(backend))
            dynamic = st.checkbox("dynamic shapes", key=f"cmp_{side}_dynamic", value=False)
            fusion = st.checkbox("fusion", key=f"cmp_{side}_fusion", value=engine_options.default("fusion"))
            cap = st.number_input("max IR nodes per kernel (0: no cap)", min_value=0, value=0, step=1,
                                  key=f"cmp_{side}_cap")
            settings += [f"backend={backend}", f"dynamic={'true' if dynamic else 'false'}",
                         f"fusion={'on' if fusion else 'off'}"] + ([f"max_nodes={int(cap)}"] if cap else [])
        return settings


preset = st.selectbox("What to compare", list(compare_presets.PRESETS), key="cmp_preset")  # Note [Compare presets]
edited = None
options = state.current_request().options
preset_sides = compare_presets.sides(preset, options.backend, options.device)
if preset_sides is not None:
    side_a, side_b = preset_sides
    if preset == compare_presets.EDIT:
        edited = st.text_area("B's code (edit it)", value=state.user_source(), height=240, key="cmp_edited_code")
    st.caption(f"A: {' '.join(side_a)} · B: {' '.join(side_b)}"
               + (" and the edited code" if edited is not None else "") + " (the sidebar's backend and device)")
else:
    left, right = st.columns(2, gap="medium")
    side_a = side_settings(left, "A", "cpp")
    side_b = side_settings(right, "B", "triton")
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
    comparison = compare_view.Comparison.from_json(outcome.document)
    counts, timing = comparison.counts, comparison.timing
    paired = sum(1 for p in comparison.pairings if p.change in ("same", "merged", "split", "changed"))
    columns = st.columns(5)
    columns[0].metric("kernels A", counts[0])
    columns[1].metric("kernels B", counts[1], delta=counts[1] - counts[0], delta_color="off")
    columns[4].metric("kernels paired", paired, help="pairings across the sides, by the nodes the kernels compute")
    speedup = timing.speedup_b_over_a
    judged = timing.verdict is None or timing.verdict.judged
    columns[2].metric("speedup of B over A", ("too noisy" if not judged else f"{speedup:.3g}x")
                      if speedup is not None else "-",
                      help="time of A / time of B: higher is better for B; \"too noisy\" when the spreads are "
                           "too wide to tell")
    columns[3].metric("code lines changed", sum(1 for line in comparison.code_diff.splitlines()
                                                  if line[:1] in "+-" and line[:3] not in ("+++", "---")))
    st.caption(f"A: {comparison.labels['a']} · B: {comparison.labels['b']}. "
               f"{compare_view.speedup_sentence(timing)}")
    for side in ("a", "b"):
        record = comparison.records[side]
        if record is not None and any(g.profile.interpreted for g in record.graphs):
            st.warning(f"{side.upper()} is Triton on the CPU: it ran under Triton's interpreter, so its times say "
                       "nothing about a GPU (compare its kernels and code, not its speed).")
    for side in ("a", "b"):
        for error in comparison.errors[side]:
            st.error(f"{side.upper()} failed in {error.stage or '?'}: {error.message}")
    for side in ("a", "b"):  # Note [Bench and compare judged outside the job]: each side's check
        record = comparison.records[side]
        verify = record.verify if record is not None else None
        if verify is not None and verify.ok is not None and verify.ok is not True:
            st.error(md_text(f"{side.upper()}'s outputs differ from eager's ({verify.verdict or 'mismatch'}, "
                             f"judged outside the job): {verify.problem or ''}"))
    st.markdown("**Kernels**")
    st.caption("Kernels paired across the sides by the nodes they compute: same, merged, split, changed (the "
               "same nodes computed another way, as a template in A and a library call in B or in other code; or "
               "they share nodes: an op alone in A, with its neighbours in B), only in one side.")
    st.dataframe(compare_view.kernel_diff_rows(comparison), hide_index=True, width="stretch")
    st.markdown("**Time per kernel**")
    st.dataframe(compare_view.timing_rows(comparison), hide_index=True, width="stretch")
    st.markdown("**Code diff** (A → B: kernels, then the wrapper; the shared helpers folded)")
    ui.show_code(comparison.code_diff or "(identical)", "diff", max_height=640)
