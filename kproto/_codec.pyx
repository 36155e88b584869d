# cython: language_level=3, boundscheck=False, wraparound=False
"""Schema-driven message codec engine.

Why this exists: every Kafka request and response body (and the headers, and the
consumer protocol's embedded structs) is described by a generated table in
:mod:`kproto.schema`. Instead of hand-written code per message and version, this
module compiles (schema, version) once into a *plan* -- nested tuples of
:class:`FieldPlan` objects whose C attributes say exactly which wire form to use
(classic or compact, nullable or not, tagged or not) -- and then runs a small
interpreter over the plan. Plans are cached, so at run time there is no string
parsing or version arithmetic: only a switch on small ints.

Values are plain dicts keyed by the snake_case field names; arrays are lists;
nested structs are dicts. ``decode`` returns every field of the schema, with
fields that do not exist in the version (and tagged fields that were not sent)
set to their defaults, so callers see one shape across versions. ``encode``
takes defaults for missing keys and ignores fields the version does not have.

Errors: encoding a wrong value raises :class:`EncodeError` naming the message,
version and field path; decoding bad input raises only :class:`DecodeError`
(the wire primitives bound every length by the bytes actually present, and
array lengths and tagged-field counts by Kafka's limits, MAX_ARRAY_ELEMENTS and
MAX_TAGGED_FIELDS in _wire.pxd, before anything is allocated).
"""
from cpython.long cimport PyLong_Check
from cpython.float cimport PyFloat_Check
from cpython.number cimport PyNumber_Index
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uint32_t

from kproto._wire cimport Writer, Reader

import uuid as _uuid
from collections.abc import Mapping

from kproto.errors import DecodeError, EncodeError

# -- field kinds (the interpreter dispatches on these) -------------------------

cdef enum:
    K_INT8 = 0
    K_INT16
    K_INT32
    K_INT64
    K_UINT16
    K_UINT32
    K_FLOAT64
    K_BOOL
    K_UUID
    K_STRING        # classic, non-nullable
    K_NSTRING       # classic, nullable
    K_CSTRING       # compact, non-nullable
    K_CNSTRING      # compact, nullable
    K_BYTES
    K_NBYTES
    K_CBYTES
    K_CNBYTES
    K_RECORDS       # classic int32 length (null allowed on the wire), decoded as a memoryview
    K_CRECORDS      # compact
    K_STRUCT
    K_ARRAY

cdef object ZERO_UUID = _uuid.UUID(int=0)
cdef object _MISSING = object()   # a key absent from a value being encoded
cdef object _UNSET = object()     # a decode template slot still to be filled

_INT_TYPES = {"int8": K_INT8, "int16": K_INT16, "int32": K_INT32, "int64": K_INT64,
              "uint16": K_UINT16, "uint32": K_UINT32}
_FIXED_TYPES = dict(_INT_TYPES, float64=K_FLOAT64, bool=K_BOOL, uuid=K_UUID)
PRIMITIVE_TYPES = frozenset(list(_FIXED_TYPES) + ["string", "bytes", "records"])

# Python-visible names of the kinds (introspection and tests).
KIND_NAMES = ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool",
              "uuid", "string", "nullable_string", "compact_string",
              "compact_nullable_string", "bytes", "nullable_bytes", "compact_bytes",
              "compact_nullable_bytes", "records", "compact_records", "struct", "array")


class _EncodeFail(EncodeError):
    """An encode error on its way up, collecting the field path."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason
        self.segs = []


class _DecodeFail(DecodeError):
    """A decode error on its way up, collecting the field path."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason
        self.segs = []


cdef object _enc_annotate(object exc, object seg):
    if not isinstance(exc, _EncodeFail):
        exc = _EncodeFail(str(exc))
    exc.segs.append(seg)
    return exc


cdef object _dec_annotate(object exc, object seg):
    if not isinstance(exc, _DecodeFail):
        exc = _DecodeFail(str(exc))
    exc.segs.append(seg)
    return exc


cdef str _format_path(list segs):
    cdef str out = ""
    cdef object seg
    for seg in reversed(segs):
        if seg.startswith("["):
            out += seg
        elif out:
            out += "." + seg
        else:
            out = seg
    return out


cdef inline bint _in_range(object rng, int version):
    if rng is None:
        return False
    lo, hi = rng
    return lo <= version and (hi is None or version <= hi)


cdef str _format_range(object rng):
    if rng is None:
        return "none"
    lo, hi = rng
    return f"{lo}+" if hi is None else (f"{lo}" if lo == hi else f"{lo}-{hi}")


# -- plans -----------------------------------------------------------------------

cdef class FieldPlan:
    """One field of a struct, compiled for one version."""
    cdef readonly str name
    cdef readonly str type          # the schema type, e.g. "int32", "[]string", "[]Topic"
    cdef readonly bint present      # the field exists in this version
    cdef readonly bint tagged       # ... as a tagged field
    cdef readonly int tag
    cdef readonly bint nullable     # null is allowed in this version
    cdef readonly bint compact      # compact (flexible) encoding of lengths
    cdef readonly int kind          # K_* of the field (K_ARRAY for arrays)
    cdef readonly int elem          # K_* of the elements of an array
    cdef readonly StructPlan sub    # struct (or struct element) plan, else None
    cdef object default_            # immutable default (when not mutable)
    cdef bint mutable               # default is a new list / struct dict each time
    cdef readonly str versions      # the schema's version range, for error messages
    cdef object enc_default         # shared value encoded for a missing key
    cdef bytes default_bytes        # encoding of the default (tagged fields)

    cdef object fresh_default(self):
        if not self.mutable:
            return self.default_
        if self.kind == K_ARRAY:
            return []
        return self.sub.make_default()

    @property
    def default(self):
        """The field's default value (a new object for lists and structs)."""
        return self.fresh_default()

    @property
    def kind_name(self):
        return KIND_NAMES[self.kind]

    @property
    def elem_name(self):
        return KIND_NAMES[self.elem] if self.kind == K_ARRAY else None

    def __repr__(self):
        return (f"FieldPlan({self.name!r}, {self.type!r}, present={self.present}, "
                f"tagged={self.tagged}, nullable={self.nullable}, kind={self.kind_name})")


cdef class StructPlan:
    """A struct (or a whole message body) compiled for one version."""
    cdef readonly str name
    cdef readonly int version
    cdef readonly bint flexible
    cdef readonly str label         # "Produce v9 request", used in error messages
    cdef readonly tuple fields      # every FieldPlan, in schema order (present or not)
    cdef tuple regular              # present, untagged, in wire order
    cdef readonly tuple tagged      # present and tagged, by ascending tag
    cdef dict tagmap                # tag -> FieldPlan
    cdef dict template              # decode's starting dict: every field in order, with
                                    # the defaults of the fields not always read
    cdef tuple fresh                # fields not always read whose default is mutable
    cdef dict full_template         # every field's immutable default (None placeholders)
    cdef tuple all_mutable          # every field whose default is mutable
    cdef frozenset names            # every field's name, in any version: other keys are typos
    cdef tuple absent               # fields not in this version that may not be dropped
                                    # silently (not "ignorable" in the schema)

    cpdef dict make_default(self):
        """A new dict holding every field's default."""
        cdef dict d = self.full_template.copy()
        cdef FieldPlan fp
        for fp in self.all_mutable:
            d[fp.name] = fp.fresh_default()
        return d

    def __repr__(self):
        return f"StructPlan({self.name!r}, v{self.version}, flexible={self.flexible})"


cdef int _scalar_kind(str t, bint nullable, bint compact) except -1:
    k = _FIXED_TYPES.get(t)
    if k is not None:
        return k
    if t == "string":
        return (K_CNSTRING if nullable else K_CSTRING) if compact else (
            K_NSTRING if nullable else K_STRING)
    if t == "bytes":
        return (K_CNBYTES if nullable else K_CBYTES) if compact else (
            K_NBYTES if nullable else K_BYTES)
    if t == "records":
        return K_CRECORDS if compact else K_RECORDS
    raise ValueError(f"unknown primitive type {t!r}")


cdef object _type_default(str t):
    if t in _INT_TYPES:
        return 0
    if t == "float64":
        return 0.0
    if t == "bool":
        return False
    if t == "string":
        return ""
    if t == "bytes":
        return b""
    if t == "records":
        return None
    if t == "uuid":
        return ZERO_UUID
    raise ValueError(f"unknown primitive type {t!r}")


cdef StructPlan _compile_struct(str name, list fields, int version, bint flexible):
    cdef StructPlan sp = StructPlan.__new__(StructPlan)
    cdef FieldPlan fp
    cdef list allf = [], regular = [], tagged = [], fresh = [], all_mutable = []
    cdef dict template = {}, full_template = {}
    sp.name = name
    sp.version = version
    sp.flexible = flexible
    sp.label = name
    for f in fields:
        fp = FieldPlan.__new__(FieldPlan)
        fp.name = f["name"]
        fp.type = f["type"]
        fp.present = _in_range(f["versions"], version)
        fp.versions = _format_range(f["versions"])
        fp.tagged = fp.present and flexible and _in_range(f.get("tagged"), version)
        fp.tag = f.get("tag", -1)
        fp.nullable = fp.present and _in_range(f.get("nullable"), version)
        if "flexible" in f:
            fp.compact = f["flexible"] is not None and version >= f["flexible"]
        else:
            fp.compact = flexible
        t = fp.type
        is_array = t.startswith("[]")
        elem = t[2:] if is_array else t
        fp.sub = None
        if elem not in PRIMITIVE_TYPES:
            if "fields" not in f:
                raise ValueError(f"{name}.{fp.name}: struct type {elem} has no fields")
            fp.sub = _compile_struct(elem, f["fields"], version, flexible)
        if is_array:
            fp.kind = K_ARRAY
            fp.elem = K_STRUCT if fp.sub is not None else _scalar_kind(elem, False, fp.compact)
        elif fp.sub is not None:
            fp.kind = K_STRUCT
            fp.elem = -1
        else:
            fp.kind = _scalar_kind(elem, fp.nullable, fp.compact)
            fp.elem = -1
        if "default" in f:
            fp.default_ = f["default"]
            fp.mutable = False
        elif fp.kind == K_ARRAY or fp.kind == K_STRUCT:
            fp.default_ = None
            fp.mutable = True
        else:
            fp.default_ = _type_default(elem)
            fp.mutable = False
        fp.enc_default = fp.fresh_default()
        fp.default_bytes = None
        allf.append(fp)
        # Templates keep the schema's field order; placeholders are replaced.
        full_template[fp.name] = None if fp.mutable else fp.default_
        if fp.mutable:
            all_mutable.append(fp)
        if fp.present and not fp.tagged:
            regular.append(fp)
            template[fp.name] = None
        else:
            if fp.tagged:
                tagged.append(fp)
            if fp.mutable:
                fresh.append(fp)
                template[fp.name] = _UNSET
            else:
                template[fp.name] = fp.default_
    tagged.sort(key=lambda x: x.tag)
    sp.fields = tuple(allf)
    sp.regular = tuple(regular)
    sp.tagged = tuple(tagged)
    sp.tagmap = {}
    for fp in tagged:
        if fp.tag in sp.tagmap:
            raise ValueError(f"{name}: tag {fp.tag} used twice in v{version}")
        sp.tagmap[fp.tag] = fp
        # The encoding of the default: a tagged field is only written when its
        # encoding differs from this.
        w = Writer()
        try:
            _enc_field(fp, fp.enc_default, w)
            fp.default_bytes = w.getvalue()
        except (EncodeError, TypeError, OverflowError, ValueError):
            fp.default_bytes = None
    sp.template = template
    sp.names = frozenset(full_template)
    sp.absent = tuple([fp for fp, f in zip(allf, fields)
                       if not fp.present and not f.get("ignorable")])
    sp.fresh = tuple(fresh)
    sp.full_template = full_template
    sp.all_mutable = tuple(all_mutable)
    return sp


cdef dict _PLANS = {}


cpdef StructPlan get_plan(dict schema, int version):
    """The compiled plan of a schema table (see kproto.schema) for one version.

    Plans are cached: compiling happens once per (schema, version)."""
    key = (id(schema), version)
    entry = _PLANS.get(key)
    if entry is not None and entry[0] is schema:
        return <StructPlan>entry[1]
    lo, hi = schema["valid"]
    if version < lo or version > hi:
        raise ValueError(f"{schema['name']} has no version {version} (valid: v{lo}-v{hi})")
    flex_from = schema.get("flexible")
    cdef bint flexible = flex_from is not None and version >= flex_from
    cdef StructPlan sp = _compile_struct(schema["name"], schema["fields"], version, flexible)
    name = schema["name"]
    kind = schema.get("type")
    if kind in ("request", "response") and name.endswith(kind.capitalize()):
        sp.label = f"{name[:-len(kind)]} v{version} {kind}"
    else:
        sp.label = f"{name} v{version}"
    _PLANS[key] = (schema, sp)
    return sp


# -- encoding --------------------------------------------------------------------

cdef object _as_int(object v):
    if PyLong_Check(v):
        return v
    if v is None:
        raise _EncodeFail("null is not allowed here")
    if PyFloat_Check(v):
        raise _EncodeFail(f"expected an int, got float {v!r}")
    return PyNumber_Index(v)   # numpy ints and the like; TypeError otherwise


cdef int _enc_scalar(int k, object v, Writer w) except -1:
    if k == K_INT32:
        w.write_int32(_as_int(v))
    elif k == K_INT16:
        w.write_int16(_as_int(v))
    elif k == K_INT64:
        w.write_int64(_as_int(v))
    elif k == K_INT8:
        w.write_int8(_as_int(v))
    elif k == K_UINT16:
        w.write_uint16(_as_int(v))
    elif k == K_UINT32:
        w.write_uint32(_as_int(v))
    elif k == K_BOOL:
        if not PyLong_Check(v):   # bool is an int subclass
            raise _EncodeFail(f"expected a bool, got {type(v).__name__}")
        if v is not True and v is not False and v != 0 and v != 1:
            raise _EncodeFail(f"expected a bool, got {v!r}")
        w.write_bool(v)
    elif k == K_FLOAT64:
        if not (PyFloat_Check(v) or PyLong_Check(v)):
            raise _EncodeFail(f"expected a float, got {type(v).__name__}")
        w.write_float64(v)
    elif k == K_STRING:
        if v is None:
            raise _EncodeFail("null is not allowed here")
        w.write_string(v)
    elif k == K_CSTRING:
        if v is None:
            raise _EncodeFail("null is not allowed here")
        w.write_compact_string(v)
    elif k == K_NSTRING:
        w.write_nullable_string(v)
    elif k == K_CNSTRING:
        w.write_compact_nullable_string(v)
    elif k == K_BYTES:
        if v is None:
            raise _EncodeFail("null is not allowed here")
        w.write_bytes(v)
    elif k == K_CBYTES:
        if v is None:
            raise _EncodeFail("null is not allowed here")
        w.write_compact_bytes(v)
    elif k == K_NBYTES or k == K_RECORDS:
        w.write_nullable_bytes(v)
    elif k == K_CNBYTES or k == K_CRECORDS:
        w.write_compact_nullable_bytes(v)
    elif k == K_UUID:
        if v is None:
            raise _EncodeFail("null is not allowed here")
        w.write_uuid(v)
    else:
        raise _EncodeFail(f"internal error: kind {k} is not a scalar")
    return 0


cdef int _enc_field(FieldPlan fp, object v, Writer w, bint lenient=False) except -1:
    cdef int k = fp.kind
    cdef Py_ssize_t i = 0, n
    cdef object item
    if v is None:
        if not fp.nullable:
            raise _EncodeFail("null is not allowed (the field is not nullable in this version)")
        if k == K_ARRAY:
            if fp.compact:
                w.write_compact_array_len(-1)
            else:
                w.write_array_len(-1)
            return 0
        if k == K_STRUCT:
            w.write_int8(-1)
            return 0
        if k == K_UUID:
            w.write_uuid(ZERO_UUID)
            return 0
        # nullable strings, bytes and records write their own null form
    if k < K_STRUCT:
        return _enc_scalar(k, v, w)
    if k == K_STRUCT:
        if fp.nullable:
            w.write_int8(1)
        _enc_struct(fp.sub, v, w, lenient)
        return 0
    # K_ARRAY
    if not isinstance(v, (list, tuple)):
        raise _EncodeFail(f"expected a list, got {type(v).__name__}")
    n = len(v)
    if fp.compact:
        w.write_compact_array_len(n)
    else:
        w.write_array_len(n)
    try:
        if fp.elem == K_STRUCT:
            for i in range(n):
                _enc_struct(fp.sub, v[i], w, lenient)
        else:
            for i in range(n):
                _enc_scalar(fp.elem, v[i], w)
    except (EncodeError, TypeError, OverflowError, ValueError) as exc:
        raise _enc_annotate(exc, f"[{i}]")
    return 0


cdef int _enc_tagged(StructPlan sp, dict value, Writer w, bint lenient) except -1:
    cdef FieldPlan fp
    cdef list items = None
    cdef Writer tw
    cdef bytes data
    for fp in sp.tagged:
        v = value.get(fp.name, _MISSING)
        if v is _MISSING:
            continue
        try:
            if v is fp.enc_default or v == fp.enc_default:
                continue
        except Exception:
            pass
        tw = Writer()
        try:
            _enc_field(fp, v, tw, lenient)
        except (EncodeError, TypeError, OverflowError, ValueError) as exc:
            raise _enc_annotate(exc, fp.name)
        data = tw.getvalue()
        if data == fp.default_bytes:
            continue
        if items is None:
            items = []
        items.append((fp.tag, data))
    if items is None:
        w.write_uvarint(0)
        return 0
    w.write_uvarint(len(items))
    for tag, data in items:
        w.write_uvarint(tag)
        w.write_uvarint(len(data))
        w.write_raw(data)
    return 0


cdef bint _is_default(FieldPlan fp, object v):
    """Whether v is what the schema would have put in the field: None, the
    default, or an empty list/struct for the mutable ones."""
    if v is None:
        return True
    try:
        if v == fp.enc_default:
            return True
    except Exception:
        return False
    if fp.mutable and (fp.kind == K_ARRAY or fp.kind == K_STRUCT):
        return not v
    return False


cdef int _check_keys(StructPlan sp, dict d, bint lenient) except -1:
    """A key that names no field of this struct in any version is a typo: say
    so rather than sending the field's default. A field this version does not
    have may be given only at its default (or when the schema marks it
    ignorable), as the Java client's generated messages require: otherwise a
    body meant for another version would be sent without what it says."""
    cdef FieldPlan fp
    for key in d:
        if key not in sp.names:
            known = ", ".join(fp.name for fp in sp.fields)
            raise _EncodeFail(f"unknown field {key!r} in {sp.name} (its fields: {known})")
    if lenient:
        return 0
    for fp in sp.absent:
        v = d.get(fp.name, _MISSING)
        if v is not _MISSING and not _is_default(fp, v):
            raise _EncodeFail(f"field {fp.name!r} of {sp.name} is only in versions "
                              f"{fp.versions}, not in v{sp.version}: it would be dropped")
    return 0


cdef int _enc_struct(StructPlan sp, object value, Writer w, bint lenient) except -1:
    cdef dict d
    cdef FieldPlan fp = None
    if type(value) is dict:
        d = <dict>value
    elif value is None:
        raise _EncodeFail("null is not allowed here")
    elif isinstance(value, Mapping):
        d = dict(value)
    else:
        raise _EncodeFail(f"expected a dict for {sp.name}, got {type(value).__name__}")
    cdef Py_ssize_t found = 0
    try:
        for fp in sp.regular:
            v = d.get(fp.name, _MISSING)
            if v is _MISSING:
                v = fp.enc_default
            else:
                found += 1
            _enc_field(fp, v, w, lenient)
    except (EncodeError, TypeError, OverflowError, ValueError) as exc:
        raise _enc_annotate(exc, fp.name)
    if found != len(d):
        # Keys this version does not write: typos, or other versions' fields.
        for fp in sp.tagged:
            if fp.name in d:
                found += 1
        if found != len(d):
            _check_keys(sp, d, lenient)
    if sp.flexible:
        _enc_tagged(sp, d, w, lenient)
    return 0


cpdef encode(StructPlan plan, object value, Writer w, bint other_versions=False):
    """Append the encoding of value (a dict) in plan's version to w.

    A key that is no field of the struct raises EncodeError. So does a field
    the version lacks given a value other than its default, unless
    ``other_versions`` (used for responses, which a test broker builds once for
    every version) or the schema marks the field ignorable."""
    try:
        _enc_struct(plan, value, w, other_versions)
    except _EncodeFail as exc:
        path = _format_path(exc.segs)
        where = f" field {path}:" if path else ""
        raise EncodeError(f"{plan.label}:{where} {exc.reason}") from None
    except (TypeError, OverflowError, ValueError) as exc:
        raise EncodeError(f"{plan.label}: {exc}") from None


# -- decoding --------------------------------------------------------------------

cdef object _dec_scalar(int k, Reader r):
    if k == K_INT32:
        return r.read_int32()
    elif k == K_INT16:
        return r.read_int16()
    elif k == K_INT64:
        return r.read_int64()
    elif k == K_CSTRING:
        return r.read_compact_string()
    elif k == K_STRING:
        return r.read_string()
    elif k == K_CNSTRING:
        return r.read_compact_nullable_string()
    elif k == K_NSTRING:
        return r.read_nullable_string()
    elif k == K_INT8:
        return r.read_int8()
    elif k == K_BOOL:
        return r.read_bool()
    elif k == K_UUID:
        return r.read_uuid()
    elif k == K_UINT16:
        return r.read_uint16()
    elif k == K_UINT32:
        return r.read_uint32()
    elif k == K_FLOAT64:
        return r.read_float64()
    elif k == K_BYTES:
        return r.read_bytes()
    elif k == K_NBYTES:
        return r.read_nullable_bytes()
    elif k == K_CBYTES:
        return r.read_compact_bytes()
    elif k == K_CNBYTES:
        return r.read_compact_nullable_bytes()
    elif k == K_RECORDS:
        return r.read_nullable_bytes_view()
    elif k == K_CRECORDS:
        return r.read_compact_nullable_bytes_view()
    raise DecodeError(f"internal error: kind {k} is not a scalar")


cdef object _dec_field(FieldPlan fp, Reader r):
    cdef int k = fp.kind
    cdef Py_ssize_t n, i = 0, j
    cdef Py_ssize_t start
    cdef list out
    cdef object item
    if k < K_STRUCT:
        item = _dec_scalar(k, r)
        if item is None and not fp.nullable:
            raise DecodeError("null where the field is not nullable")
        return item
    if k == K_STRUCT:
        if fp.nullable and r.read_int8() < 0:
            return None
        return _dec_struct(fp.sub, r)
    # K_ARRAY
    start = r.pos
    n = r.read_compact_array_len() if fp.compact else r.read_array_len()
    if n < 0:
        if fp.nullable:
            return None
        raise DecodeError(f"null array at offset {start} where the field is not nullable")
    out = PyList_New(n)
    try:
        if fp.elem == K_STRUCT:
            for i in range(n):
                item = _dec_struct(fp.sub, r)
                Py_INCREF(item)
                PyList_SET_ITEM(out, i, item)
        else:
            for i in range(n):
                item = _dec_scalar(fp.elem, r)
                Py_INCREF(item)
                PyList_SET_ITEM(out, i, item)
    except DecodeError as exc:
        # the unfilled slots of out are NULL; fill them before out is freed
        for j in range(i, n):
            Py_INCREF(None)
            PyList_SET_ITEM(out, j, None)
        raise _dec_annotate(exc, f"[{i}]")
    return out


cdef int _dec_tagged(StructPlan sp, Reader r, dict d) except -1:
    cdef uint32_t count, i, tag, size
    cdef Py_ssize_t start, saved_end
    cdef FieldPlan fp
    count = r.read_tagged_count()
    for i in range(count):
        tag = r.read_uvarint32()
        size = r.read_uvarint32()
        r.need(size, b"tagged field")
        entry = sp.tagmap.get(tag) if sp.tagmap else None
        if entry is None:
            r.pos += size          # unknown tag: skip it
            continue
        fp = <FieldPlan>entry
        start = r.pos
        saved_end = r.end
        r.end = start + size
        try:
            v = _dec_field(fp, r)
        except DecodeError as exc:
            raise _dec_annotate(exc, fp.name)
        finally:
            r.end = saved_end
        if r.pos != start + size:
            raise _dec_annotate(DecodeError(
                f"tagged field {tag} declares {size} bytes but its value takes {r.pos - start}"),
                fp.name)
        d[fp.name] = v
    return 0


cdef dict _dec_struct(StructPlan sp, Reader r):
    cdef dict d = sp.template.copy()
    cdef FieldPlan fp = None
    try:
        for fp in sp.regular:
            d[fp.name] = _dec_field(fp, r)
    except DecodeError as exc:
        raise _dec_annotate(exc, fp.name)
    if sp.flexible:
        _dec_tagged(sp, r, d)
    for fp in sp.fresh:
        if d[fp.name] is _UNSET:
            d[fp.name] = fp.fresh_default()
    return d


cpdef dict decode(StructPlan plan, Reader r):
    """Decode one value of plan's version from r (advancing r.pos).

    Raises DecodeError naming the message, version and field path."""
    try:
        return _dec_struct(plan, r)
    except _DecodeFail as exc:
        path = _format_path(exc.segs)
        where = f" (at {path})" if path else ""
        raise DecodeError(f"{plan.label}: {exc.reason}{where}") from None
    except DecodeError as exc:
        raise DecodeError(f"{plan.label}: {exc}") from None


def default_value(StructPlan plan):
    """Every field of plan's struct at its default, as a new dict."""
    return plan.make_default()
