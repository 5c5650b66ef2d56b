"""The effects engine: every side effect through a plugin safe to repeat.

`engine` performs one effect (intent record, call, outcome, in that order)
and holds the `Resolver` for a leftover intent; `resolve` is the table of
the protocol's resolution rules, one per effect method.  Seam-agnostic: a
seam says what to record, never how to resolve.
"""
