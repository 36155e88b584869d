"""kproto: the sans-IO Kafka protocol core."""
