"""SHA-256 hex digests without `hashlib`'s start.

`import hashlib` loads OpenSSL, a few milliseconds of every process that
imports it, and mu's plugins name their hosts, jobs and sockets by a
digest first thing.  CPython ships its own SHA-256 as a small built-in
module (`_sha256`, `_sha2` from 3.12), which gives the same digest; this
module uses it, and `hashlib` where it is missing.

What a caller may rely on: `sha256_hex(data)` is
`hashlib.sha256(data).hexdigest()`; text is encoded as UTF-8 with lone
surrogates kept (``surrogatepass``), so any str has a digest.
"""

from __future__ import annotations

try:
    from _sha2 import sha256 as _sha256  # CPython 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _sha256  # CPython 3.11 and earlier
    except ImportError:
        from hashlib import sha256 as _sha256

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Union


def sha256_hex(data: Union[str, bytes]) -> str:
    """The SHA-256 of `data` (a str is taken as its UTF-8), in hex."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return _sha256(data).hexdigest()
