"""Types of the Cython module kproto/consumer/_fetch_request.pyx for type checkers."""
from typing import Any, Dict, List, Optional, Tuple

FIRST_VERSION: int
LAST_VERSION: int


def fetch_request_body(version: int, body: Dict[str, Any], marks: Optional[List[int]] = None) -> Optional[bytes]: ...


class FetchFrame:
    version: int
    data: bytes

    @staticmethod
    def write(version: int, body: Dict[str, Any]) -> Tuple[Optional[bytes], Optional["FetchFrame"]]: ...

    def patched(self, version: int, body: Dict[str, Any]) -> Optional[bytes]: ...
