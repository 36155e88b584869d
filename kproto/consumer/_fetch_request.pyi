"""Types of the Cython module kproto/consumer/_fetch_request.pyx for type checkers."""
from typing import Any, Dict, Optional

FIRST_VERSION: int
LAST_VERSION: int


def fetch_request_body(version: int, body: Dict[str, Any]) -> Optional[bytes]: ...
