"""The bridge between mu's turn files and a real coding agent (the package mu.harness.bridge).

Standard library only, and nothing of mu's own: the bridge runs on the
host, where mu itself may not be installed (docs/harnesses.md).
"""
