"""app/worker.py diagnose(): a worker that an uncaught exception ended is explained by whose code raised it."""
from app.worker import Finished, diagnose
from engine.tools.sandbox import SandboxResult


def _ended(stderr: str) -> Finished:
    return Finished(SandboxResult(returncode=1, stdout="", stderr=stderr, wall_s=1.0, peak_rss_mb=100.0), {},
                    completed=False, workdir="/tmp/glassbox-run-x")


OURS = '''Traceback (most recent call last):
  File "/srv/glassbox/app/worker_main.py", line 80, in <module>
    main()
  File "/srv/glassbox/engine/pipeline.py", line 300, in explore
    record = stage.fn(value, options)
  File "/srv/glassbox/engine/schedule/fusion.py", line 220, in _merge
    raise AssertionError("two groups of one node")
AssertionError: two groups of one node
'''

THEIRS = '''Traceback (most recent call last):
  File "/srv/glassbox/app/worker_main.py", line 80, in <module>
    main()
  File "/tmp/glassbox-run-x/pasted.py", line 3, in model
    return x.view(7)
RuntimeError: shape '[7]' is invalid for input of size 3
'''


def test_a_crash_in_glassbox_is_said_as_ours_not_the_models():
    problem = diagnose(_ended(OURS), model_name="pasted.py")
    assert problem.title == "Glassbox's worker crashed"
    assert "AssertionError: two groups of one node" in problem.message and "fusion.py" in problem.message
    assert "not in your model" in problem.message and "os._exit" not in problem.message
    assert problem.lineno is None


def test_an_exception_in_the_model_names_its_line():
    problem = diagnose(_ended(THEIRS), model_name="pasted.py")
    assert problem.title == "There is a problem in the model code" and problem.lineno == 3
    assert "RuntimeError: shape '[7]' is invalid" in problem.message


def test_a_process_that_ends_without_a_traceback_is_still_the_models_exit():
    problem = diagnose(_ended("some output\n"), model_name="pasted.py")
    assert problem.title == "The model's process ended early" and "os._exit()" in problem.message


def test_a_traceback_followed_by_other_output_is_not_taken_for_the_end():
    handled = OURS + "W1207 00:17:06.141000 3394 torch/_dynamo/convert_frame.py:1379] a warning after it\n"
    problem = diagnose(_ended(handled), model_name="pasted.py")
    assert problem.title == "The model's process ended early"
