"""Hostile and broken model files, through the sandbox (issue 6): each ends with its expected clear outcome,
nothing of its process group is left running, and the next exploration works. The case list lives in
engine/tools/sweep_hostile.py (`python -m engine sweep hostile` also writes reports/hostile_suite.md), with its
checks (attacks that are not one model file explored) and the app's (app/hostile_checks.py)."""
import pytest

from app import hostile_checks
from engine.tools import sweep_hostile as hostile_suite

NAMES = ([case.name for case in hostile_suite.CASES] + [check.name for check in hostile_suite.CHECKS]
         + list(hostile_checks.CHECKS))

pytestmark = pytest.mark.slow  # the hostile suite: ~30 sandboxed jobs (Note [Two lanes], tests/conftest.py)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return {o.case.name: o for o in hostile_suite.run_suite(tmp_path_factory.mktemp("hostile"), jobs=2)}  # two cores


def test_the_suite_has_at_least_thirty_cases():
    assert len(hostile_suite.CASES) >= 30
    assert len({case.name for case in hostile_suite.CASES}) == len(hostile_suite.CASES)


@pytest.mark.parametrize("name", NAMES)
def test_hostile_case(outcomes, name):
    if name not in outcomes and not hostile_suite.ISOLATED:
        pytest.skip("needs bubblewrap's namespaces to be safe")
    outcome = outcomes[name]
    assert outcome.passed, outcome.problems()
    if isinstance(outcome.case, hostile_suite.Case):
        assert outcome.recovery_s is not None  # a good exploration ran after this case's group, and worked


def test_the_outside_file_was_cleaned_up(outcomes):
    assert not hostile_suite.OUTSIDE_FILE.exists()


def test_the_outcomes_as_json_say_what_the_report_says(outcomes):
    """`sweep hostile --json`: one document per outcome, passed exactly when the report's row says yes."""
    import json

    rows = [json.loads(json.dumps(hostile_suite.outcome_json(o))) for o in outcomes.values()]
    assert [row["case"] for row in rows] == list(outcomes)
    assert all(row["passed"] == (not row["problems"]) == outcomes[row["case"]].passed for row in rows)
    report = hostile_suite.report(list(outcomes.values()))
    assert report.count("| yes |") == sum(row["passed"] for row in rows)
