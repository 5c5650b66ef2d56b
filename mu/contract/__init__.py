"""The contract suite: does a plugin keep protocol v1?  (`mu plugin test`)

The suite runs one plugin, registered or not, through every check that
applies to the seams it declares, and reports each as ok, FAIL (what was
expected, what came, and the protocol section) or skip (and why).  It is
the protocol's promised test of a plugin ("Process": it reports a process
started outside the plugin's group; "Secrets": it runs the plugin with
`MU_PLUGIN_CANARY=<random>` and fails it if the canary appears anywhere).

What a caller may rely on:

- `run(name, argv, ...)` returns a `Report` whose `exit_code` is 0 when
  nothing failed, 1 when a check failed, 4 when the plugin cannot even be
  loaded (the trust checks, or the handshake and its load rules);
- every check has a deadline, so a run ends in bounded time whatever the
  plugin does; against a plugin that keeps the protocol it takes a few
  seconds;
- when it returns (or raises), every process it started is gone: the
  plugin's, what the plugin started (the suite may kill what it proved
  descends from the plugin it started), and its own helpers; what it made
  through the plugin's seams (a host, a job, files on the host) was
  released, best effort, through the same seams.

The checks live with the rule they test: `handshake` (loading),
`lifecycle` (an unknown method, cancel, the stops), `transport`, `leaks`
(the canary and mu's local-only variables), and one module per seam
(`host`, `link`, `job`, `channel`), each registering its checks with
`mu.contract.registry.check`.  `runner` runs them; `session` holds what they
share; `rawrun` (a plugin on raw pipes) and `watcher` (the process watch) are
its instruments.
"""

from __future__ import annotations

from mu.contract.registry import Check, Fail, Skip, all_checks, check
from mu.contract.report import Outcome, Report
from mu.contract.runner import run

__all__ = ["Check", "Fail", "Outcome", "Report", "Skip", "all_checks", "check", "run"]
