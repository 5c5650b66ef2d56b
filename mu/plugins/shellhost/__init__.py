"""A host reached by a command that runs sh: the seams mu-plugin-ssh,
mu-plugin-podman and mu-plugin-kubernetes share.

The link (`link`: exec, fetch and push with git, the reach checks), the
job (`job`: an agent's command in a tmux session on the host) and the
channel (`channel`: examples/mu-demo-agent's turn files) do all their work
on the host with POSIX sh programs (`remote`), run through a connection
(`connection.Connection`).  They know nothing of how that connection is
made: ssh with a ControlMaster (`mu.plugins.ssh.control`), `podman exec`
(`mu.plugins.podman.engine`) or `kubectl exec` (`mu.plugins.kubernetes.kube`).
The two whose hosts are boxes they make share `boxes`: the acquire's
first checks, the check that a box found by its key's label is that
key's, and the connection's sessions and `op` over an exec command.

A plugin mixes `link.LinkSeam`, `job.JobSeam` and `channel.ChannelSeam`
into its class and supplies what `connection.Host` lists: its options
(instance and work folder), its connections by host, the connection for a
call, and a job's view.

The words these programs leave on a host (`MU_SSH_RUN`, `MU_SSH_JOB`, the
`ssh-job-` tokens, the `mu-ssh` trailer) keep the spelling they were first
written with, whichever provider runs them: a job outlives the plugin
version that started it, and a later one must still find it.

The package imports only `mu.sdk`, `mu.plugins` and the standard library
(tests/test_layers.py keeps it so).
"""
