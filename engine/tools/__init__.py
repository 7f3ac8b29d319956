"""Tools beside the compiler core: the sandbox, model files, the benchmark, CLI text.

Layering (tests/test_layering.py): tools may import the core (engine.capture ... engine.run, engine.record),
the core never imports tools; the app and visualizers sit above both.
"""
