"""The platform side of the sync client against real VMs: event paging, snapshot cadence, API keys, approvals, the
signed audit export and its offline verification, templates from a snapshot; errors of the TypeScript SDK's families."""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List

import pytest

from sandglass import (
    ApiKeys,
    AuditExportFailure,
    AuditExportOk,
    AuthenticationError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Sandbox,
    Secrets,
    Template,
    audit_key_id,
    verify_audit_export,
)


def test_events_come_in_every_page_and_filter_by_family(sbx: Sandbox) -> None:
    # Each stdin write is one command.input event: 1005 of them need two pages of the control plane's 1000.
    h = sbx.commands.run("cat > /dev/null", background=True, stdin=True)
    for _ in range(1005):
        sbx.commands.send_stdin(h.id, b"x")
    h.close_stdin()
    h.wait()
    everything = sbx.events()
    inputs = sbx.events(types=["command.input"])
    assert len(everything) > 1005 and len(inputs) >= 1005
    assert all(e["type"] == "command.input" for e in inputs)
    seqs = [e["seq"] for e in everything]
    assert seqs == sorted(set(seqs))
    assert [e["seq"] for e in sbx.events(after_seq=seqs[-3])] == seqs[-2:]
    assert {e["type"].split(".")[0] for e in sbx.events(types=["command"])} == {"command"}


def test_snapshot_cadence_is_answered_with_the_timeline_and_set() -> None:
    with Sandbox.create(timeout_s=600, snapshot_interval_s=3600) as sbx:
        assert sbx.timeline_with_cadence()["cadence"]["intervalS"] == 3600
        assert sbx.set_snapshot_interval(1800)["snapshotIntervalS"] == 1800
        both = sbx.timeline_with_cadence()
        assert both["cadence"]["intervalS"] == 1800 and both["cadence"]["behind"] is False
        assert isinstance(both["snapshots"], list)
        with pytest.raises(InvalidArgumentError) as e:
            sbx.set_snapshot_interval(1)
        assert e.value.code == "invalid_argument" and e.value.details["field"] == "snapshotIntervalS"
        assert sbx.timeline_with_cadence()["cadence"]["intervalS"] == 1800


def test_api_keys_are_shown_once_listed_without_the_key_and_revoked() -> None:
    created = ApiKeys.create(role="member", name="py-sdk-member")
    key = created["key"]
    listed = [k for k in ApiKeys.list() if k["id"] == created["id"]]
    assert len(listed) == 1 and listed[0]["name"] == "py-sdk-member" and key not in json.dumps(listed)
    # The new key works on its own, then is refused with the catalogue's code from the next request on.
    assert isinstance(Sandbox.list(api_key=key), list)
    assert ApiKeys.revoke(created["id"])["revokedAt"]
    with pytest.raises(AuthenticationError) as e:
        Sandbox.list(api_key=key)
    assert e.value.code == "api_key_revoked" and e.value.status == 401
    # A member key may not mint keys; a bad expiry and an unknown id are refused with what is wrong.
    member = ApiKeys.create(role="member", name="py-sdk-member-2")
    try:
        with pytest.raises(PermissionDeniedError) as denied:
            ApiKeys.create(api_key=member["key"])
        assert denied.value.code == "permission_denied"
    finally:
        ApiKeys.revoke(member["id"])
    with pytest.raises(InvalidArgumentError) as bad:
        ApiKeys.create(expires_in_s=0)
    assert bad.value.details["field"] == "expiresInS"
    with pytest.raises(NotFoundError) as missing:
        ApiKeys.revoke("key_doesnotexist")
    assert missing.value.code == "api_key_not_found"


@pytest.fixture(scope="module")
def upstream() -> str:
    target = os.environ.get("SANDGLASS_TEST_UPSTREAM")
    if not target:
        pytest.fail("SANDGLASS_TEST_UPSTREAM is not set: run these through tests/python-sdk.test.ts")
    return target


def test_a_secret_that_needs_approval_is_held_until_approved_or_denied(upstream: str) -> None:
    Secrets.set("PY_JIT_TOKEN", "py-jit-value", hosts=[upstream], header="x-jit", format="Token {value}", approval="required")
    try:
        with Sandbox.create(timeout_s=600, snapshot_interval_s=3600, network={"allow": [upstream]}, secrets=["PY_JIT_TOKEN"]) as sbx:
            call = f"curl -sS -m 60 https://{upstream}/echo?jit"
            seen: List[Dict[str, Any]] = []
            errors: List[BaseException] = []

            def approve(request: Dict[str, Any]) -> None:
                seen.append(request)
                sbx.approve(request["requestId"])

            stop = sbx.on_approval_request(approve, interval_s=0.2, on_error=errors.append)
            try:
                approved = sbx.commands.run(call, timeout_ms=120_000)
            finally:
                stop()
            assert errors == []
            assert [r["secret"] for r in seen] == ["PY_JIT_TOKEN"]
            assert json.loads(approved.stdout)["url"] == "/echo?jit"
            # Deny, by id from the class as a reviewer elsewhere would: the guest's client gets the catalogue's code.
            denied = threading.Event()

            def deny(request: Dict[str, Any]) -> None:
                Sandbox.deny(request["requestId"], sandbox_id=sbx.id)
                denied.set()

            stop = sbx.on_approval_request(deny, interval_s=0.2, on_error=errors.append)
            try:
                r = sbx.commands.run(call + "; true", timeout_ms=120_000)
            finally:
                stop()
            assert denied.is_set() and "egress_approval_denied" in r.stdout + r.stderr
            assert "secret.approval_requested" in [e["type"] for e in sbx.events(types=["secret"])]
            with pytest.raises(NotFoundError) as e:
                sbx.approve("apr_" + "a" * 20)
            assert e.value.code == "approval_not_found"
    finally:
        Secrets.remove("PY_JIT_TOKEN")


def test_the_audit_export_verifies_offline_and_each_tampering_is_told_apart(sbx: Sandbox) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    sbx.commands.run("echo audited")
    key = Sandbox.audit_public_key()
    assert key["algorithm"] == "ed25519" and audit_key_id(key["publicKeyPem"]) == key["keyId"]
    text = sbx.export_audit()
    ok = verify_audit_export(text, key["publicKeyPem"])
    assert isinstance(ok, AuditExportOk), ok
    assert ok.sandbox_id == sbx.id and ok.count == len(text.splitlines()) - 2 and ok.key_id == key["keyId"]

    lines = text.splitlines()
    event = json.loads(lines[2])
    event["type"] = "command.edited"
    edited = "\n".join(lines[:2] + [json.dumps(event)] + lines[3:])
    swapped = "\n".join(lines[:1] + [lines[2], lines[1]] + lines[3:])
    cut = "\n".join(lines[:-2] + lines[-1:])
    header = json.loads(lines[0])
    header["tenantId"] = "ten_other"
    other = Ed25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    trailer = json.loads(lines[-1])
    trailer["signature"] = trailer["signature"][::-1]
    head_rewritten = dict(json.loads(lines[-1]), headHash="f" * 64)
    cases = {
        "header": verify_audit_export("\n".join(['{"format":"other"}'] + lines[1:]), key["publicKeyPem"]),
        "event": verify_audit_export("\n".join(lines[:1] + ['{"id":"evt_x"}'] + lines[2:]), key["publicKeyPem"]),
        "head": verify_audit_export("\n".join(lines[:-1] + [json.dumps(head_rewritten)]), key["publicKeyPem"]),
        "hash": verify_audit_export(edited, key["publicKeyPem"]),
        "link": verify_audit_export(swapped, key["publicKeyPem"]),
        "count": verify_audit_export(cut, key["publicKeyPem"]),
        "trailer": verify_audit_export("\n".join(lines[:-1]), key["publicKeyPem"]),
        "sandbox": verify_audit_export("\n".join([json.dumps(header)] + lines[1:]), key["publicKeyPem"]),
        "key": verify_audit_export(text, other),
        "signature": verify_audit_export("\n".join(lines[:-1] + [json.dumps(trailer)]), key["publicKeyPem"]),
    }
    for check, verdict in cases.items():
        assert isinstance(verdict, AuditExportFailure) and verdict.check == check, (check, verdict)
    unsigned = verify_audit_export(text, None)
    assert isinstance(unsigned, AuditExportFailure) and unsigned.check == "key"


def test_a_template_from_a_snapshot_serves_creates_and_is_deleted() -> None:
    name = "py-sdk-template"
    with Sandbox.create(timeout_s=600) as src:
        src.files.write("/root/baked.txt", "baked in")
        snap = src.snapshot()
        version = Template.from_snapshot(name, snap["id"], envs={"BAKED": "yes"})
    try:
        assert version["version"] == 1
        assert name in [t["name"] for t in Template.list()]
        assert Template.exists(name) and Template.get(name)["versions"][0]["version"] == 1
        with Sandbox.create(name, timeout_s=600) as made:
            assert made.files.read("/root/baked.txt") == "baked in"
            assert made.commands.run("echo $BAKED").stdout == "yes\n"
        with pytest.raises(NotFoundError) as no_builds:
            Template.logs(name)
        assert no_builds.value.code == "not_found" and no_builds.value.details["field"] == "name"
    finally:
        Template.delete(name)
    assert not Template.exists(name)
    with pytest.raises(InvalidArgumentError) as bad:
        Template.from_snapshot("Not A Name", snap["id"])
    assert bad.value.details["field"] == "name"


def test_a_snapshot_is_named_then_deleted(sbx: Sandbox) -> None:
    snap = sbx.snapshot()
    assert Sandbox.name_snapshot(snap["id"], "py-named")["name"] == "py-named"
    assert Sandbox.name_snapshot(snap["id"], None).get("name") is None
    Sandbox.delete_snapshot(snap["id"])
    assert snap["id"] not in [s["id"] for s in sbx.timeline()]
    with pytest.raises(NotFoundError) as e:
        Sandbox.delete_snapshot(snap["id"])
    assert e.value.code == "snapshot_not_found"
