"""Types of the Cython module kproto/consumer/_fetch.pyx for type checkers."""
from typing import Any, Dict, List, Optional, Set, Tuple

MIN_VERSION: int
MAX_VERSION: int


class FetchAnswer:
    version: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    node_endpoints: List[dict]

    def __len__(self) -> int: ...
    def as_dict(self) -> dict: ...


class PartitionState:
    position: Optional[int]
    leader_epoch: int
    paused: bool
    reset_to: Optional[str]
    high_watermark: Optional[int]
    last_stable_offset: Optional[int]
    log_start_offset: Optional[int]
    preferred_read_replica: Optional[int]
    fetch_entry: Optional[dict]

    def __init__(self) -> None: ...


class Buffered:
    tp: Any
    batches: List[Any]
    next_batch: int
    record_iter: Any
    current: Any
    aborted: Optional[List[Tuple[int, int]]]
    aborted_pids: Optional[Set[int]]
    state: Any

    def __init__(self, tp: Any, batches: List[Any], aborted: Optional[List[dict]]) -> None: ...


def decode_fetch_response(version: int, payload: Any) -> Tuple[int, FetchAnswer]: ...
def apply_fetch_answer(fetcher: Any, request: Any, answer: FetchAnswer, states: dict, read_committed: bool,
                       check_crcs: bool, buffered: Any, dirty: set) -> None: ...
def take_records(fetcher: Any, tp: Any, fetch_offset: int, records: Any, aborted: Optional[list]) -> None: ...
def drain_columns(fetcher: Any, limit: int) -> Dict[Any, tuple]: ...
def select_fetchable(states: dict, buffered: set, leaders_of_topic: Any,
                     in_flight: set) -> Tuple[Dict[int, list], bool]: ...
def fetch_partitions(tps: list, max_bytes: int, known_offsets: Optional[dict] = None,
                     known_epochs: Optional[dict] = None
                     ) -> Tuple[Dict[str, list], dict, Dict[str, Dict[int, Any]], Optional[dict], int]: ...
