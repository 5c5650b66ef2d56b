"""A pytest plugin: each failed test named on a line of its own the moment
its report comes in, so a run cut short (Ctrl-C, a CI job's timeout, a
killed machine) has already said what failed.  `-rf` names failures only
in the summary at the run's end, and `-v` names every test, passed ones
too.  Under pytest-xdist the reports reach the controlling process, which
prints them; a worker prints nothing.  tests/conftest.py loads it for
every run of the suite; `-p live_failures` loads it anywhere else.
"""

from __future__ import annotations

import pytest


class FailuresAsTheyHappen:
    def __init__(self, reporter: object) -> None:
        self.reporter = reporter

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        word = "FAILED" if report.when == "call" else f"ERROR at {report.when}"
        self.reporter.write_line(f"{word} {report.nodeid}", red=True, bold=True)  # type: ignore[attr-defined]


@pytest.hookimpl(trylast=True)  # after the terminal reporter is made
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    on_a_worker = hasattr(config, "workerinput")
    if reporter is not None and not on_a_worker and not config.pluginmanager.has_plugin("mu-live-failures"):
        config.pluginmanager.register(FailuresAsTheyHappen(reporter), "mu-live-failures")
