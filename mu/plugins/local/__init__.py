"""mu-plugin-local: a provider whose hosts are folders on this machine.

The host, link, job and channel seams for hosts that are folders under a
root, jobs that are processes here, and a channel that drives
examples/mu-demo-agent through its turn files.  `examples/mu-plugin-local`
is the launcher: it runs `mu.plugins.local.main` from a checkout without
installing mu.  docs/local-provider.md says what a user relies on;
mu-plugin-protocol(7) is the contract.

One module per job: main.py (argv, the plugin object, the helper modes),
host.py, link.py, job.py and channel.py (one seam each), processes.py (a
job's wrapper, launcher, view and stop), turns.py (the demo agent's turn
files, read), layout.py (where things live under the root, and their
names), fields.py (a call's params, checked) and files.py (records
replaced whole).

The package imports only `mu.sdk` and the standard library
(tests/test_layers.py keeps it so): an example for plugin authors, built on
mu.sdk like any other plugin.
"""
