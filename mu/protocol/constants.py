"""The protocol's fixed numbers and names (mu-plugin-protocol(7)).

Every module that enforces one of these takes it from here, so mu, its
SDK and its contract suite cannot drift apart.
"""

#: protocol "Handshake": the versions mu offers in `initialize`, and the
#: one the SDK speaks.
PROTOCOL_MIN = 1
PROTOCOL_MAX = 1
PROTOCOL_RANGE = {"min": PROTOCOL_MIN, "max": PROTOCOL_MAX}

#: protocol "Transport": a message is one JSON object on one line of at
#: most 1 MiB.  The message is the JSON text; the newline that ends the
#: line is the separator and does not count.
MAX_MESSAGE_BYTES = 1 << 20

#: protocol "Transport": stderr's first line may appear in an error, cut
#: to this many characters.
STDERR_KEEP_CHARS = 400

#: protocol "Registration and trust": the executable's basename is the
#: prefix followed by the registered name.
EXECUTABLE_PREFIX = "mu-plugin-"

#: How deep a JSON value mu reads may nest: a plugin's line (its arrays
#: and objects within each other, the message object itself counted) and
#: JSON a person gives mu (`mu plugin call`'s <params-json>).  No message
#: of the protocol comes near it; past it, a reader that walks the value
#: (the trace, the record, the output) would run out of stack, so the value
#: is refused where it is read, with this number in the message.
MAX_JSON_DEPTH = 100
