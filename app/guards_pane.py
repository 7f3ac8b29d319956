"""The Graph breaks page's list of guards: what Dynamo decided to check, sorted by kind, the raw dump folded.

Note [Guards and checks]
Two lists on the page count different things and must not both be called guards. The record's guards are the
ones Dynamo exported as it compiled (guard_export_fn), each named once, over every compiled graph: one per
guarded thing ("shape_env", "empty_nn_module_hooks_dict on ...", a TYPE_MATCH on a global). The what-if reads
one compiled version's guard tree (engine/tools/guard_tree.py): the checks Dynamo really runs before it reuses
that version. A guard becomes several checks (the shape environment, one per size relation), or none (empty
module hooks are not checked), and the tree adds checks of its own (which dims of each tensor are marked
dynamic): for a small GPT-2, 687 guards and 653 checks. So the list says "guards", the what-if says "checks",
and each says what the other counts.
"""
from __future__ import annotations

import streamlit as st

from app.safe_text import md_text
from visualizers import tables

RAW_LINES = 500  # the folded dump of one kind shows this many, then says how many more


def render(guards: list[str]) -> None:
    st.markdown(f"**Guards** ({len(guards)}): what Dynamo decided to check before reusing a compiled graph, "
                "each named once, over every compiled graph")
    if not guards:
        return
    st.caption(f"By kind: {md_text(tables.guard_summary(guards))}. A change to what a guard checks (an input's "
               "shape, the grad mode, a module's attribute) makes Dynamo compile again. Dynamo runs them as checks "
               "in a guard tree, so the what-if above counts checks, not guards: a guard may take several checks "
               "or none (empty module hooks are not checked), and the tree adds a few of its own.")
    for group, items in tables.guard_groups(guards).items():
        with st.expander(f"{group} ({len(items)})", expanded=False):  # the what-if above lists the version's
            # checks that matter first (Note [Guards that matter] in engine/tools/guard_tree.py)
            more = f"\n# ... {len(items) - RAW_LINES} more" if len(items) > RAW_LINES else ""
            st.code("\n".join(items[:RAW_LINES]) + more, language="python", wrap_lines=True)
