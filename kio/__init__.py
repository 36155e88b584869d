"""kio: I/O drivers for the kproto sans-IO Kafka core."""
