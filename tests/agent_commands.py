"""Shell command lines for test agents that must pass a spawn's readiness.

A spawn succeeds only once the agent itself wrote its turn record (docs
/DECISIONS.md, "Readiness is the agent's own word").  A test whose subject
is not the channel runs a plain shell command: `ready(cmd)` prefixes it
with the least a program does to speak the demo channel, writing an idle
turn.json in $MU_DEMO_AGENT_DIR (the job folder the local and SSH
providers give every job), whole, by a rename.
"""

TURN = '{"state":"idle","since":1,"runs":0,"incarnation":1}'
SPEAK = ("printf '%s' '" + TURN + "' >\"$MU_DEMO_AGENT_DIR/.turn\" && "
         "mv \"$MU_DEMO_AGENT_DIR/.turn\" \"$MU_DEMO_AGENT_DIR/turn.json\"; ")


def ready(command: str) -> str:
    """`command`, after the agent says it is ready."""
    return SPEAK + command
