"""What plugin protocol version 1 says, written once.

Standard library only, so that `mu.sdk` (and plugins built on it) may
import it without pulling in mu's runtime.
"""
