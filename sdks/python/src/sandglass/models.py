"""What the SDK answers about a sandbox, as Python values: snake_case attributes and aware UTC datetimes (through
_time.parse_time), like E2B's SandboxInfo and SandboxMetrics; the API's own JSON stays readable by its keys."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, Iterator, List, Optional

from ._time import parse_optional_time, parse_time


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the control plane reports it. `info["createdAt"]` (the API's key) still answers the wire value, so
    code written against the dict this used to be keeps working; the attributes are the typed view."""

    id: str
    tenant_id: str
    template: str
    state: str
    memory_mib: int
    vcpus: int
    timeout_s: int
    metadata: Dict[str, str]
    created_at: datetime
    expires_at: datetime
    started_at: Optional[datetime]
    ended_at: Optional[datetime]
    paused_at: Optional[datetime]
    snapshot_interval_s: int
    source_snapshot_id: Optional[str]
    disk_mib: Optional[int]
    network: Optional[Dict[str, List[str]]]
    secrets: List[str]
    # "kill" or "pause": what its timeout does.
    on_timeout: str
    # Whether a request with its credential to a port or its daemon resumes it while paused.
    auto_resume: bool
    end_reason: Optional[str] = None
    failure_reason: Optional[str] = None
    gateway_id: Optional[str] = None
    # False: a pause at its timeout keeps the disk alone (its resume is a cold boot).
    on_timeout_keep_memory: bool = True
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, info: Dict[str, Any]) -> "SandboxInfo":
        # The access grant is a credential: it has no place in a description of the sandbox.
        raw = {k: v for k, v in info.items() if k != "access"}
        return cls(
            id=raw["id"],
            tenant_id=raw["tenantId"],
            template=raw["template"],
            state=raw["state"],
            memory_mib=raw["memoryMib"],
            vcpus=raw["vcpus"],
            timeout_s=raw["timeoutS"],
            metadata=dict(raw.get("metadata") or {}),
            created_at=parse_time(raw["createdAt"]),
            expires_at=parse_time(raw["expiresAt"]),
            started_at=parse_optional_time(raw.get("startedAt")),
            ended_at=parse_optional_time(raw.get("endedAt")),
            paused_at=parse_optional_time(raw.get("pausedAt")),
            snapshot_interval_s=raw["snapshotIntervalS"],
            source_snapshot_id=raw.get("sourceSnapshotId"),
            disk_mib=raw.get("diskMib"),
            network=raw.get("network"),
            secrets=list(raw.get("secrets") or []),
            on_timeout=raw.get("onTimeout", "kill"),
            auto_resume=bool(raw.get("autoResume", False)),
            end_reason=raw.get("endReason"),
            failure_reason=raw.get("failureReason"),
            gateway_id=raw.get("gatewayId"),
            on_timeout_keep_memory=bool(raw.get("onTimeoutKeepMemory", True)),
            raw=raw,
        )

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        """The API's JSON of the sandbox (camelCase keys, ISO times), as json.dumps takes it."""
        return dict(self.raw)


@dataclass(frozen=True)
class SandboxMetric:
    """One sample of a running sandbox's CPU, memory and disk, the guest's own figures (GET …/metrics)."""

    timestamp: datetime
    cpu_count: int
    # Of all its CPUs together, since the sample before.
    cpu_used_pct: float
    # MemTotal − MemAvailable.
    mem_used_bytes: int
    mem_total_bytes: int
    # The page cache.
    mem_cache_bytes: int
    # Of the root filesystem.
    disk_used_bytes: int
    disk_total_bytes: int

    @classmethod
    def from_api(cls, m: Dict[str, Any]) -> "SandboxMetric":
        return cls(
            timestamp=parse_time(m["timestamp"]),
            cpu_count=m["cpuCount"],
            cpu_used_pct=float(m["cpuUsedPct"]),
            mem_used_bytes=m["memUsedBytes"],
            mem_total_bytes=m["memTotalBytes"],
            mem_cache_bytes=m["memCacheBytes"],
            disk_used_bytes=m["diskUsedBytes"],
            disk_total_bytes=m["diskTotalBytes"],
        )
