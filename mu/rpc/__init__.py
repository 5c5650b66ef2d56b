"""The wire: framing (lines and JSON), envelopes, and the id bookkeeping of
calls in flight.  Nothing here starts a thread or touches a pipe, so the
protocol core is tested without processes."""
