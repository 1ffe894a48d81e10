"""A pytest plugin for the device runs: each failure's report is appended to $OUT/failures.txt as it happens, so a
run that a call's time limit stops before pytest's summary still names its failures with their messages.
Load it with `-p stream_failures` with this folder on PYTHONPATH (under xdist it runs in the controller, which
receives every worker's reports)."""
import os


def pytest_runtest_logreport(report):
    if report.failed:
        with open(os.path.join(os.environ.get("OUT", "."), "failures.txt"), "a") as f:
            f.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-8000:]}\n\n")
