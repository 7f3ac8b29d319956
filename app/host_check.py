"""Refuse pages asked for under a foreign Host name (DNS rebinding), before anything runs.

Note [Host check]
The app runs model code and is served on localhost. A web page on another site can make its own name resolve
to 127.0.0.1 (DNS rebinding) and then talk to the app as if it were the same origin: CORS and Streamlit's XSRF
token (both kept on in .streamlit/config.toml) do not stop that, because the origin matches the Host. The
browser still sends the attacker's name in the Host header, so every script run checks it first: only
localhost, the loopback addresses, the configured server.address and the names in GLASSBOX_ALLOWED_HOSTS
(comma-separated) are served; anything else gets an error and the run stops before a model is explored.
A run with no HTTP request behind it (AppTest) has no Host header and is let through.
"""
from __future__ import annotations

import streamlit as st

from app import settings

LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def allowed_hosts() -> set[str]:
    names = set(LOOPBACK)
    try:
        configured = st.get_option("server.address")
    except Exception:  # noqa: BLE001 - outside a Streamlit runtime
        configured = None
    if configured:
        names.add(str(configured).lower())
    names.update(settings.allowed_hosts())
    return names


def host_name(header: str) -> str:
    """The name part of a Host header: `localhost:8501` -> localhost, `[::1]:8501` -> ::1."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str | None) -> bool:
    return header is None or host_name(header) in allowed_hosts()


def request_host() -> str | None:
    try:
        headers = st.context.headers
    except Exception:  # noqa: BLE001 - no request context
        return None
    return headers.get("Host") if headers else None


def enforce() -> None:
    """Stop this run unless the request came for an allowed host (Note [Host check])."""
    host = request_host()
    if not host_allowed(host):
        st.error(f"This Glassbox app is not served under the name {host!r}. Open it as http://localhost (or add "
                 "the name to GLASSBOX_ALLOWED_HOSTS when you serve it on purpose under another name).")
        st.stop()
