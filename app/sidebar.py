"""The sidebar on every page: which model (a sample, or the code on the Model code page) and how to compile it."""
from __future__ import annotations

import re

import streamlit as st

from app import share, state, worker
from app.stages import STAGES
from app.safe_text import description_markdown
from engine import options as engine_options


def option_help(name: str, more: str = "") -> str:
    """An option's help as engine/options.py says it (the CLI's too), for people: no Note references."""
    text = re.sub(r"\s*\(Note \[[^\]]*\]\)", "", engine_options.infos()[name].help) + more
    return (text if text.startswith("torch.") else text[:1].upper() + text[1:]) + "."


def restore_from_url() -> None:
    """Once per session: the view a link asks for (Note [Shareable URL] in app/share.py)."""
    session = st.session_state
    if session.url_restored:
        return
    session.url_restored = True
    wanted = share.session_from_url(st.query_params.to_dict(), state.sample_names(), ["none"] + STAGES)
    wanted.pop("sample", None)  # state.init already took it
    shared = wanted.pop("code", None)
    session.share_missing = wanted.pop("code_missing", None)
    for key, value in wanted.items():
        session[key] = value
    if shared is not None:
        session.editor = shared
        session.applied = {"source": shared, "label": state.PASTED, "inputs": None}
        session.shared_code = share.code_key(shared)


def render() -> None:
    restore_from_url()
    with st.sidebar:
        st.markdown("## Glassbox")
        st.caption("A see-through PyTorch compiler: every stage from your code to timed kernels.")
        names = state.sample_names()
        applied = st.session_state.applied
        pasted = applied["label"] == state.PASTED
        st.selectbox("Sample" + (" (not in use)" if pasted else ""), names, key="sample", on_change=state.choose_sample,
                     help="Each sample is one file in samples/ with a short teaching note.")
        if pasted:
            st.info("Exploring **your code** from the Model code page, not the sample above (pick a sample to "
                    "switch back).")
        description = state.description_of(state.sample_file_text(st.session_state.sample))
        if description and applied["label"] != state.PASTED:  # the sample's note is not about pasted code
            with st.expander("About this sample", expanded=False):
                st.markdown(description_markdown(description))
        st.radio("Backend", list(state.BACKENDS), key="backend", format_func=state.BACKENDS.get, horizontal=True,
                 help=option_help("backend"))
        devices = ["cpu"] + (["cuda"] if state.cuda_available() else [])
        st.radio("Device", devices, key="device", format_func=str.upper, horizontal=True,
                 help=option_help("device", "" if len(devices) > 1 else " (CUDA appears when a GPU is present)"))
        modes = state.modes_for(st.session_state.device)
        if st.session_state.mode not in modes:
            st.session_state.mode = "default"
        st.selectbox("Mode", modes, key="mode", help=option_help("mode"))
        st.toggle("Dynamic shapes", key="dynamic", help=option_help("dynamic"))
        st.toggle("Training step", key="train", help=option_help("train"))
        st.toggle("Freeze weights", key="freeze", disabled=bool(st.session_state.train),
                  help=option_help("freezing"))
        with st.expander("Limits", expanded=False):
            st.caption("Model code runs in a separate, sandboxed process (its own namespaces, a read-only system, "
                       "an unprivileged user, a clean environment, its own folder); it is stopped with everything "
                       "it started when it passes a limit.")
            if worker.protection_missing():
                st.warning(worker.protection_missing())
            st.number_input("Time limit (s)", key="time_limit_s", value=state.default_time_limit_s(), min_value=1.0,
                            max_value=worker.MAX_TIMEOUT_S, step=10.0, format="%.0f",
                            help="Wall time for one exploration, from Explore to result.")
            st.number_input("Memory limit (GB)", key="memory_limit_gb", value=state.default_memory_limit_gb(),
                            min_value=0.25, max_value=state.machine_memory_gb(), step=0.5, format="%.2f",
                            help="Resident memory of the model's process and everything it starts.")
        st.button("Re-explore", key="reexplore", on_click=state.forget_current, width="stretch",
                  help="Run the worker again instead of using the cached result.")
        if st.session_state.share_missing:
            st.warning("The shared link names code that no longer exists on this server (links to pasted code "
                       "last as long as the server's share folder); showing a sample instead.")
        if applied["label"] == state.PASTED:
            st.button("Share link to this code", key="share", on_click=state.share_current, width="stretch",
                      help="Stores your code on this server under its content hash and puts it in the URL: "
                           "copy the address bar.")
            if st.session_state.shared_code:
                st.caption("The address bar now links to this code and view.")
            if st.session_state.share_error:
                st.warning(st.session_state.share_error)
    state.sync_url()
