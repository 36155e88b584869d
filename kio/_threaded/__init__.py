"""The threading driver: a network thread per client (ThreadDriver) over a
selectors loop (SocketLoop); kio.producer, kio.consumer, kio.share_consumer and
kio.admin are its public faces."""
