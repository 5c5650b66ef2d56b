"""mu-plugin-ssh: remote hosts over the system's OpenSSH client.

A link (scripts, fetch and push with git over ssh, the `reach` checks), a
job seam (an agent's command in a tmux session on the host) and a channel
(examples/mu-demo-agent's turn files, read and written over ssh) for hosts
reached with `ssh`: a profile's host name is an SSH destination, as the
user's ssh configuration (or the `-F <ssh_config>` in the registered argv)
knows it.  `bin/mu-plugin-ssh` runs `mu.plugins.ssh.main`; man page
mu-plugin-ssh(1) and docs/ssh.md say what a user relies on.

The package imports only `mu.sdk` and the standard library
(tests/test_layers.py keeps it so): it is a plugin like any other, shipped
with mu.
"""
