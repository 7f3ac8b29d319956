"""Pure functions from the Exploration record (plain JSON data) to DOT strings, HTML and plotly figures.

No engine imports and no Streamlit imports: the app, a report or a notebook can all call these. Each module
reads the record's documented fields (engine/report.py, engine/record.py) and tolerates missing ones, because
the record grows while the engine does.
"""
