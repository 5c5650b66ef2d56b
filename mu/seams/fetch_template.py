"""A profile's `--fetch` template: its placeholders, its check, its filling in.

Both `host add` (mu.seams.host, which checks a template before it records
it) and the link (mu.seams.link, which runs it) use it; it sits below
both and imports nothing of mu, so the link can import the host module
and never the reverse.
"""

from __future__ import annotations

FETCH_PLACEHOLDERS = ("{host}", "{remoteCwd}", "{localRepo}")


def render_fetch(template: str, *, host: str, remote_cwd: str, local_repo: str) -> str:
    """A profile's `--fetch` template with its placeholders filled in, each
    value shell-quoted."""
    import shlex  # here, as `re` below: the link imports this module for every call, a fetch uses it

    return (
        template.replace("{host}", shlex.quote(host))
        .replace("{remoteCwd}", shlex.quote(remote_cwd))
        .replace("{localRepo}", shlex.quote(local_repo))
    )


def check_template(template: str) -> str:
    """What is wrong with a `--fetch` template, or "".  A shell's own
    `${NAME}` is left alone; any other `{word}` must be a placeholder."""
    if "{remoteCwd}" not in template:
        return "it never names {remoteCwd}, the folder to fetch from"
    import re

    unknown = [m for m in re.findall(r"(?<!\$)\{[A-Za-z_]+\}", template) if m not in FETCH_PLACEHOLDERS]
    if unknown:
        return f"{unknown[0]} is not a placeholder mu knows (known: " + ", ".join(FETCH_PLACEHOLDERS) + ")"
    return ""
