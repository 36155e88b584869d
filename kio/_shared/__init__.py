"""The client bodies every driver shares: each public method written once
(ClientOps, ProducerOps, ConsumerOps, ShareOps, AdminOps and its mixins), the
type aliases, TLS set-up and the pieces of waiting that do no I/O."""
