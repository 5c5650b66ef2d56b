"""mu-plugin-kubernetes: hosts that are pods, driven through kubectl.

A provider (the host seam: a pod per acquire, labelled with its key, with
`activeDeadlineSeconds` from the deadline), a link (scripts in the pod,
fetch and push with real git whose transport is `kubectl exec -i`), a job
seam (an agent's command in tmux inside the pod) and a channel
(examples/mu-demo-agent's turn files, read and written in the pod).

The link, job and channel are the ones mu-plugin-ssh and mu-plugin-podman
use (`mu.plugins.shellhost`): they run POSIX sh programs on a host through
a connection, and this package's connection (`kube.Pod`) is `kubectl exec
-i <pod> -- sh -c ...`, a child of the plugin in its process group.  What
is the provider's own: kubectl's argv (`kube`), the host seam (`host`),
the view (`kubectl exec -it ... tmux attach`) and the reach checks
(`main`).  `bin/mu-plugin-kubernetes` runs `mu.plugins.kubernetes.main`;
man page mu-plugin-kubernetes(1) and docs/kubernetes.md say what a user
relies on.

The package imports only `mu.sdk`, `mu.plugins` and the standard library
(tests/test_layers.py keeps it so).
"""
