"""The batch builders' buffer pool (kproto/records/_batch.pyx): the buffer a
builder opens with (batch.size + 256 bytes) goes back to a per-capacity pool
when the builder is drained (``shrink_to_fit``) or dropped, and the next
builder of that capacity takes it instead of a malloc - Java's BufferPool.
What a builder writes must not depend on whether its buffer was reused, and
the pool must stay within its byte bound."""
import pytest

from kproto.records import BatchBuilder, read_batches
from kproto.records._batch import buffer_pool_stats, set_buffer_pool_limit

SIZE = 16384
CAP = SIZE + 256          # what a builder of batch.size SIZE opens with


@pytest.fixture
def pool():
    """An empty pool with the default bound, put back as it was afterwards."""
    old = set_buffer_pool_limit(0)         # frees every pooled buffer
    set_buffer_pool_limit(old)
    yield old
    set_buffer_pool_limit(0)
    set_buffer_pool_limit(old)


def _pooled(cap=CAP):
    return buffer_pool_stats()[0].get(cap, 0)


def _fill(builder, n, tag):
    for i in range(n):
        assert builder.append(1_700_000_000_000 + i, b"key-%d" % i, tag * (40 + i))
    builder.set_producer_state(7, 1, 3, False)
    return builder


def test_a_dropped_builders_buffer_serves_the_next_builder(pool):
    b = _fill(BatchBuilder(0, SIZE), 3, b"a")
    assert _pooled() == 0
    del b
    assert _pooled() == 1 and buffer_pool_stats()[1] == CAP
    c = BatchBuilder(0, SIZE)
    assert _pooled() == 0 and buffer_pool_stats()[1] == 0, "the new builder took the pooled buffer"
    other = BatchBuilder(0, 1000)          # another capacity: not from this class
    assert _pooled() == 0
    del c, other


def test_a_drained_builder_gives_its_large_buffer_back_and_keeps_its_records(pool):
    b = _fill(BatchBuilder(0, SIZE), 2, b"x")
    before = b.build()
    held = b.shrink_to_fit()
    assert held == b.size_in_bytes() < CAP // 2
    assert _pooled() == 1, "the buffer it opened with is pooled, not freed"
    assert b.build() == before
    assert [r.value for batch in read_batches(before) for r in batch.records()] == [b"x" * 40, b"x" * 41]


def test_what_a_builder_writes_does_not_depend_on_a_reused_buffer(pool):
    """Twin: the same records through builders on reused (dirty) buffers and
    through builders on fresh buffers (the pool off) give the same bytes."""
    def batches():
        out = []
        for k in range(6):
            b = _fill(BatchBuilder(0, SIZE), 1 + k, b"%d" % k)
            out.append(b.build())
            b.shrink_to_fit()
            del b
        return out
    for _ in range(3):                     # dirty buffers in the pool first
        dirty = _fill(BatchBuilder(0, SIZE), 50, b"\xff")
        del dirty
    assert _pooled() >= 1
    reused = batches()
    set_buffer_pool_limit(0)
    fresh = batches()
    assert _pooled() == 0
    assert reused == fresh


def test_the_pool_keeps_no_more_than_its_bound(pool):
    set_buffer_pool_limit(3 * CAP)
    builders = [BatchBuilder(0, SIZE) for _ in range(10)]
    del builders
    classes, pooled_bytes, limit = buffer_pool_stats()
    assert classes[CAP] == 3 and pooled_bytes == 3 * CAP and limit == 3 * CAP
    assert set_buffer_pool_limit(CAP) == 3 * CAP
    assert buffer_pool_stats()[1] == CAP, "lowering the bound frees what is beyond it"
    with pytest.raises(ValueError, match="the buffer pool's limit is a number of bytes, 0 or more, not -1"):
        set_buffer_pool_limit(-1)
