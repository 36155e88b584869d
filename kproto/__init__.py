"""kproto: the sans-IO Kafka protocol core.

Nothing in this package opens a socket, starts a thread, sleeps or reads the
clock: callers feed it bytes, events and the current time, and it answers with
bytes to write, deadlines and results (see kproto.connection).
"""
__version__ = "0.1.0"
