# Growable C byte buffers, shared by the wire Writer and the record batch
# builder. Header-only (inline) so neither pays a call for it.
from cpython.mem cimport PyMem_Realloc


cdef inline int grow_buffer(unsigned char** buf, Py_ssize_t* cap, Py_ssize_t need) except -1:
    """Make *buf hold at least `need` bytes, doubling its capacity as needed."""
    cdef Py_ssize_t newcap
    cdef unsigned char* nb
    if need <= cap[0]:
        return 0
    newcap = cap[0] * 2
    while newcap < need:
        newcap *= 2
    nb = <unsigned char*>PyMem_Realloc(buf[0], newcap)
    if nb == NULL:
        raise MemoryError()
    buf[0] = nb
    cap[0] = newcap
    return 0
