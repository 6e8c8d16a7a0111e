"""Metrics, pause at the timeout with resume on request, and the sandbox's description as Python values, against real
VMs; a bad on_timeout, auto_resume or time is refused naming it, and creates nothing."""
from __future__ import annotations

import http.client
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import List
from urllib.parse import urlsplit

import pytest

from sandglass import InvalidArgumentError, Sandbox, SandboxInfo, SandboxMetric


def _until(what: str, check, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def test_get_info_reports_on_timeout_auto_resume_and_times_as_datetimes(sbx: Sandbox) -> None:
    info = sbx.get_info()
    assert isinstance(info, SandboxInfo)
    assert (info.id, info.state, info.on_timeout, info.auto_resume, info.on_timeout_keep_memory) == (sbx.id, "running", "kill", False, True)
    assert info.created_at.tzinfo == timezone.utc and info.expires_at > info.created_at
    assert info.paused_at is None and info.timeout_s == 600
    # The API's keys still read as the dict this was.
    assert info["state"] == "running" and info["onTimeout"] == "kill" and "access" not in info
    assert "access" not in info.to_dict()
    moved = sbx.set_timeout(600)
    assert isinstance(moved, SandboxInfo) and moved.expires_at >= info.expires_at and moved["id"] == sbx.id
    listed = next(s for s in Sandbox.list() if s.id == sbx.id)
    assert isinstance(listed.created_at, datetime) and listed["id"] == sbx.id


def test_metrics_are_samples_of_the_guest_with_datetimes(sbx: Sandbox) -> None:
    samples: List[SandboxMetric] = []

    def sampled() -> bool:
        samples[:] = sbx.metrics()
        return bool(samples)

    # The gateway samples every few seconds: the first may not be there yet.
    _until("a metrics sample", sampled)
    first = samples[0]
    assert first.timestamp.tzinfo == timezone.utc
    assert first.cpu_count >= 1 and 0 <= first.cpu_used_pct <= 100
    assert 0 < first.mem_used_bytes <= first.mem_total_bytes and first.mem_cache_bytes >= 0
    assert 0 < first.disk_used_bytes <= first.disk_total_bytes
    assert sbx.metrics(start=datetime.now(timezone.utc) + timedelta(hours=1)) == []
    # At or before the first sample's own time: that one sample (a string works as a datetime does).
    assert [m.timestamp for m in sbx.metrics(end=first.timestamp)] == [first.timestamp]
    assert [m.timestamp for m in sbx.metrics(end=first.timestamp.isoformat())] == [first.timestamp]
    with pytest.raises(InvalidArgumentError) as bad:
        sbx.metrics(start="yesterday")
    assert bad.value.details["field"] == "start"


def test_the_timeout_pauses_it_and_a_request_with_its_token_resumes_it() -> None:
    # A timeout long enough to set it up under any load; once its server listens, a short one.
    sbx = Sandbox.create(timeout_s=600, on_timeout="pause", auto_resume=True, snapshot_interval_s=3600)
    try:
        info = sbx.get_info()
        assert (info.on_timeout, info.auto_resume) == ("pause", True)
        sbx.files.write("/tmp/www/hi.txt", f"hello from {sbx.id}")
        sbx.commands.run("cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True, timeout_ms=0)
        _until("the guest server", lambda: any(p["port"] == 8000 for p in sbx.ports.list()))
        # The grant the create answered with; a request carrying it is what may resume the sandbox.
        access = sbx.info["access"]
        assert sbx.set_timeout(20).on_timeout == "pause"
        _until("the timeout to pause it", lambda: sbx.get_info().state == "paused")
        paused = sbx.get_info()
        assert paused.paused_at is not None and paused.paused_at >= paused.created_at
        assert [e["data"].get("reason") for e in sbx.events() if e["type"] == "sandbox.paused"] == ["timeout"]
        gateway = urlsplit(access["gatewayUrl"])
        conn = http.client.HTTPConnection(gateway.hostname or "127.0.0.1", gateway.port, timeout=120)
        try:
            conn.request("GET", f"/v1/sandboxes/{sbx.id}/ports/8000/hi.txt", headers={"x-sandglass-access-token": access["token"]})
            res = conn.getresponse()
            assert (res.status, res.read().decode()) == (200, f"hello from {sbx.id}")
        finally:
            conn.close()
        back = sbx.get_info()
        assert back.state == "running" and back.paused_at is None and back.on_timeout == "pause"
    finally:
        Sandbox.kill(sbx.id)


def test_bad_lifecycle_options_are_refused_naming_them_and_create_nothing() -> None:
    probe = f"py-bad-{uuid.uuid4().hex[:8]}"
    for kw, field in (
        ({"on_timeout": "sleep"}, "on_timeout"),
        ({"auto_resume": "yes"}, "auto_resume"),
        ({"snapshot_best_effort": 1}, "snapshot_best_effort"),
        ({"on_timeout_keep_memory": "no"}, "on_timeout_keep_memory"),
        # Checked by the server: a disk-only pause is a pause.
        ({"on_timeout_keep_memory": False}, "onTimeoutKeepMemory"),
    ):
        with pytest.raises(InvalidArgumentError) as e:
            Sandbox.create(metadata={"probe": probe}, **kw)
        assert e.value.code == "invalid_argument" and e.value.details["field"] == field and field in str(e.value)
    with pytest.raises(InvalidArgumentError) as at:
        Sandbox.resume("sbx_doesnotexist0000000000", at="not a time")
    assert at.value.details["field"] == "at"
    with pytest.raises(InvalidArgumentError) as source:
        Sandbox.fork("sbx_doesnotexist0000000000@not a time")
    assert source.value.details["field"] == "from"
    assert [s for s in Sandbox.list() if s.metadata.get("probe") == probe] == []
