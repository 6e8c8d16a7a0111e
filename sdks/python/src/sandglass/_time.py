"""Times between the SDK and the API: every time the API answers becomes an aware UTC datetime here, and every time a
caller gives (a datetime, or an ISO 8601 string) goes to the API as ISO 8601 UTC; one place, so they all agree."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional, Union

from .errors import error_of

Time = Union[datetime, str]


def parse_time(value: str) -> datetime:
    """An API time (`2026-12-02T13:00:00.123Z`) as an aware datetime in UTC; a string without a zone is UTC too."""
    # Before Python 3.11, fromisoformat takes neither "Z" nor fractions of other than 3 or 6 digits.
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def parse_optional_time(value: Optional[str]) -> Optional[datetime]:
    return None if value is None else parse_time(value)


def to_datetime(at: Time, field: str) -> datetime:
    """A caller's time as an aware datetime: a naive datetime or a string without a zone is local time, as
    datetime.timestamp() reads it (and as the TypeScript SDK's `new Date(s)` does); invalid_argument naming `field`
    for anything else."""
    if isinstance(at, datetime):
        return datetime.fromtimestamp(at.timestamp(), timezone.utc)
    if isinstance(at, str):
        try:
            parsed = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return datetime.fromtimestamp(parsed.timestamp(), timezone.utc)
    raise error_of(
        "invalid_argument",
        f"{field}: '{at}' is not a time; give a datetime or an ISO 8601 string such as 2025-06-01T12:00:00Z",
        details={"field": field},
    )


def iso_time(at: Time, field: str) -> str:
    """A caller's time as the API takes it: ISO 8601 in UTC with milliseconds and a Z."""
    return to_datetime(at, field).isoformat(timespec="milliseconds").replace("+00:00", "Z")
