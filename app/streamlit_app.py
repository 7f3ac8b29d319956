"""Glassbox explorer: `streamlit run app/streamlit_app.py`. The entry point only sets up the page, the sidebar
(what to explore and how) and the navigation; each page is one file in app/views/."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import host_check, sidebar, state  # noqa: E402

# under the config's toolbarMode "minimal", Streamlit shows its toolbar, and with it the Stop button of a running
# job, only for a menu item the app defines: the About entry is that item (a job's Stop ends its worker and its
# build: tests/test_browser_stop.py)
st.set_page_config(page_title="Glassbox", page_icon="🔬", layout="wide",
                   menu_items={"About": "Glassbox: a see-through PyTorch compiler. Every stage from your code to "
                                        "timed kernels."})
host_check.enforce()  # Note [Host check]: a foreign Host header (DNS rebinding) gets nothing
state.init()
# less empty space above the page title than Streamlit's default
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:2.5rem}</style>")
pages = [
    st.Page("views/explorer.py", title="Explorer", icon=":material/account_tree:", default=True),
    st.Page("views/model.py", title="Model code", icon=":material/code:"),
    st.Page("views/provenance.py", title="Provenance", icon=":material/timeline:"),
    st.Page("views/breaks.py", title="Graph breaks", icon=":material/call_split:"),
    st.Page("views/inductor.py", title="Inductor", icon=":material/compare_arrows:"),
    st.Page("views/compare.py", title="Compare", icon=":material/difference:"),
    st.Page("views/profile.py", title="Profile", icon=":material/speed:"),
    st.Page("views/training.py", title="Training", icon=":material/school:"),
]
navigation = st.navigation(pages)
sidebar.render()
navigation.run()
