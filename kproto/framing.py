"""Size-prefixed framing (re-export of the compiled :mod:`kproto._framing`).

See :class:`FrameDecoder` for the incremental decoder and :func:`frame` for
adding the 4-byte prefix.
"""
from kproto._framing import DEFAULT_MAX_FRAME_SIZE, ZERO_COPY_MIN, FrameDecoder, frame
from kproto.errors import FrameError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "ZERO_COPY_MIN", "FrameDecoder", "FrameError", "frame"]
