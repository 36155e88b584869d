# C-level declaration of the Produce request writer, for other typed modules.
cpdef bytes produce_request_body(int version, object transactional_id, int acks, int timeout_ms,
                                 dict topics, dict topic_ids)
