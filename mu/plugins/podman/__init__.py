"""mu-plugin-podman: hosts that are containers, driven through the podman CLI.

A provider (the host seam: a container per acquire, labelled with its key,
with a deadline the plugin enforces), a link (scripts in the container,
fetch and push with real git whose transport runs in it), a job seam (an agent's command in tmux inside the container) and a channel
(examples/mu-demo-agent's turn files, read and written in the container).
`--engine docker` drives the docker CLI the same way.

The link, job and channel are the ones mu-plugin-ssh uses too
(`mu.plugins.shellhost`): they run POSIX sh programs on a host through a
connection, and this package's connection (`engine.Box`) is the container's exec server
(`execd`, its first process) reached by a client of the plugin's own
(`execc`), where ssh's is a ControlMaster; `podman exec -i` for an image
without python3.  What is the provider's own: the engine's argv
(`engine`), the host seam (`host`), the exec server and its client, the
view, the programs a job needs copied into the box, and the reach checks
(`main`).
`bin/mu-plugin-podman` runs `mu.plugins.podman.main`; man page
mu-plugin-podman(1) and docs/containers.md say what a user relies on.

The package imports only `mu.sdk`, `mu.plugins` and the standard library
(tests/test_layers.py keeps it so).
"""
