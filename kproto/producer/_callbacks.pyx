# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, binding=False
"""The on_delivery callbacks of a completed batch, called in C.

A batch keeps the callbacks of its attached records as a flat list of
(callback, offset delta, timestamp) triples (``ProducerBatch.callbacks``);
completing the batch calls each with ``(error, RecordMetadata)``, in record
order, merged with the handles told one by one (``parts``). Interpreted,
the loop around each call cost the network thread more than the call
itself; here it is a C loop, and each RecordMetadata tuple is made without
a Python call. Same order, same arguments, same error handling as the
Python version it replaces (``kproto.producer.core``): a callback that
raises is logged and the others still run.
"""
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject, newfunc
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int64_t

__all__ = ["run_callbacks"]


cdef inline object _part_delta(object part):
    return <object>PyTuple_GET_ITEM(part, 1) if type(part) is tuple else part._delta


cdef inline void _tell(object part, object topic, object partition, object base, object lat,
                       object err) except *:
    if type(part) is tuple:
        (<object>PyTuple_GET_ITEM(part, 0))._complete(
            topic, partition, base, <object>PyTuple_GET_ITEM(part, 1), <object>PyTuple_GET_ITEM(part, 2),
            lat, err)
    else:
        part._complete(topic, partition, base, part._delta, 1, lat, err)


def run_callbacks(r, cbs, type metadata_type, log):
    """Call the on_delivery callbacks ``cbs`` of BatchResult ``r`` and complete
    its told handles (``r.parts``), merged in record order; ``metadata_type``
    is RecordMetadata (a tuple subclass), ``log`` where a raising callback is
    reported."""
    cdef object topic = r.topic, partition = r.partition, base = r.base_offset
    cdef object lat = r.log_append_time, err = r.error
    cdef list parts = r.parts if type(r.parts) is list else list(r.parts)
    cdef list triples = cbs if type(cbs) is list else list(cbs)
    cdef Py_ssize_t p = 0, np = PyList_GET_SIZE(parts), i, n = PyList_GET_SIZE(triples)
    cdef int64_t base_offset = base, append_time = lat
    cdef object callback, delta, md, part
    cdef tuple fields
    cdef newfunc tuple_new = (<PyTypeObject*>tuple).tp_new
    for i in range(0, n - 2, 3):
        callback = <object>PyList_GET_ITEM(triples, i)
        delta = <object>PyList_GET_ITEM(triples, i + 1)
        while p < np:                   # told handles of earlier records first
            part = <object>PyList_GET_ITEM(parts, p)
            if _part_delta(part) > delta:
                break
            _tell(part, topic, partition, base, lat, err)
            p += 1
        if err is None:
            # RecordMetadata(topic, partition, offset, timestamp), without its __new__'s frame
            fields = (topic, partition, base_offset + <int64_t>delta if base_offset >= 0 else -1,
                      lat if append_time >= 0 else <object>PyList_GET_ITEM(triples, i + 2))
            fields = (fields,)              # tuple.__new__'s arguments: the iterable
            md = tuple_new(metadata_type, <PyObject*>fields, NULL)
        else:
            md = None
        try:
            callback(err, md)
        except Exception:  # noqa: BLE001 - a user callback must not stop the others (or the driver)
            log.exception("on_delivery callback %r raised", callback)
    while p < np:
        _tell(<object>PyList_GET_ITEM(parts, p), topic, partition, base, lat, err)
        p += 1
