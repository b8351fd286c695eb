"""The daemon's persistent state: one SQLite file (see db.py for its guarantees).

Only mmd opens it; clients reach sessions, events and consents over RPC.
"""

from .db import (
    SHELL_CONTROL,
    Ambiguous,
    CheckpointRow,
    ConsentRow,
    NotFound,
    SessionRow,
    Store,
    StoreError,
    command_matches,
)

__all__ = [
    "SHELL_CONTROL",
    "Ambiguous",
    "CheckpointRow",
    "ConsentRow",
    "NotFound",
    "SessionRow",
    "Store",
    "StoreError",
    "command_matches",
]
