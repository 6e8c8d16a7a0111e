"""Offline verification of an audit export (spec/audit-export.md), as packages/sdk/src/audit-export.ts does it: hashes,
the sandbox's chain, the count and the Ed25519 signature (through Debian's python3-cryptography, loaded only to check a
signature)."""
from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

AUDIT_EXPORT_FORMAT = "sandglass-audit/1"
# The sandboxPrevHash of a sandbox's first event.
_GENESIS_HASH = "0" * 64


@dataclass(frozen=True)
class AuditExportOk:
    sandbox_id: str
    tenant_id: str
    exported_at: str
    count: int
    head_hash: str
    key_id: str
    # Leading events written before the sandbox chain existed: their hashes are checked, their order only by the count.
    unlinked_count: int
    ok: bool = True


@dataclass(frozen=True)
class AuditExportFailure:
    """line: the 1-based line where `check` failed: header, trailer, sandbox, event, hash, link, count, head, key or
    signature, one name per kind of tampering (the TypeScript SDK's AuditExportCheck)."""

    line: int
    check: str
    problem: str
    ok: bool = False


AuditExportVerdict = Union[AuditExportOk, AuditExportFailure]


def _number(v: float) -> str:
    # JSON.stringify's form of a number, which the hash was computed over: integral values without ".0", exponents unpadded.
    if v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(v))


def _canonical(value: Any) -> str:
    """JSON with object keys sorted at every depth: the hashed form."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_canonical(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    if isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value):
            return "null"
        return _number(value)
    return json.dumps(value, ensure_ascii=False)


def _event_hash(e: Dict[str, Any]) -> str:
    fields = {k: e[k] for k in ("id", "type", "tenantId", "sandboxId", "at", "data", "prevHash", "sandboxPrevHash") if k in e}
    return hashlib.sha256((e["prevHash"] + _canonical(fields)).encode("utf-8")).hexdigest()


def _object(line: Optional[str]) -> Optional[Dict[str, Any]]:
    if line is None:
        return None
    try:
        v = json.loads(line)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_event(e: Dict[str, Any]) -> bool:
    strings = all(isinstance(e.get(k), str) for k in ("id", "type", "tenantId", "at", "prevHash", "hash"))
    return (
        strings
        and (e.get("sandboxId") is None or isinstance(e.get("sandboxId"), str))
        and "sandboxId" in e
        and isinstance(e.get("data"), dict)
        and ("sandboxPrevHash" not in e or isinstance(e["sandboxPrevHash"], str))
    )


def _key_id(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()[:32]


def audit_key_id(public_key_pem: str) -> str:
    """The key id a trailer names: the first 32 hex digits of sha256 over the public key's SPKI DER."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(public_key_pem.encode())
    return _key_id(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def verify_audit_export(text: str, public_key_pem: Optional[str]) -> AuditExportVerdict:
    """Verifies an export's text against the deployment's public key (PEM; Sandbox.audit_public_key() or `sandglass keys
    audit-public`). Pure and offline. With public_key_pem None every other check still runs and a file that passes them
    all fails at `key`: an export is only proven by its signature, since anyone can recompute hashes after editing."""
    lines: List[str] = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    header = _object(lines[0] if lines else None)
    if (
        header is None
        or header.get("format") != AUDIT_EXPORT_FORMAT
        or not all(isinstance(header.get(k), str) for k in ("sandboxId", "tenantId", "exportedAt"))
        or not _is_count(header.get("count"))
    ):
        return AuditExportFailure(1, "header", f"the first line is not a {AUDIT_EXPORT_FORMAT} header")
    last = len(lines)
    trailer = _object(lines[last - 1]) if last >= 2 else None
    if trailer is None or not isinstance(trailer.get("signature"), str) or "hash" in trailer:
        return AuditExportFailure(last, "trailer", "the last line is not a signed trailer: the export was cut off or its trailer removed")
    if (
        trailer.get("format") != AUDIT_EXPORT_FORMAT
        or not _is_count(trailer.get("count"))
        or not all(isinstance(trailer.get(k), str) for k in ("headHash", "keyId", "exportedAt"))
    ):
        return AuditExportFailure(last, "trailer", "the trailer lacks format, count, headHash, keyId or exportedAt")
    for field in ("sandboxId", "tenantId", "exportedAt"):
        if trailer.get(field) != header[field]:
            return AuditExportFailure(last, "sandbox", f"the trailer's {field} {json.dumps(trailer.get(field))} is not the header's {json.dumps(header[field])}")

    prev_hash = _GENESIS_HASH
    unlinked = 0
    for i in range(1, last - 1):
        line = i + 1
        e = _object(lines[i])
        if e is None or not _is_event(e):
            return AuditExportFailure(line, "event", "not an event: id, type, tenantId, sandboxId, at, data, prevHash and hash are required")
        if e["sandboxId"] != header["sandboxId"] or e["tenantId"] != header["tenantId"]:
            return AuditExportFailure(line, "sandbox", f"the event belongs to {e['tenantId']}/{e['sandboxId']}, not to the header's {header['tenantId']}/{header['sandboxId']}")
        if _event_hash(e) != e["hash"]:
            return AuditExportFailure(line, "hash", f"the hash of event {e['id']} does not match its content: a field was edited")
        if "sandboxPrevHash" not in e:
            # Events from before the sandbox chain can only lead: once the chain starts, every later event carries its link.
            if i != unlinked + 1:
                return AuditExportFailure(line, "link", f"event {e['id']} has no sandboxPrevHash but follows events that do: a line was inserted")
            unlinked += 1
        elif e["sandboxPrevHash"] != prev_hash:
            return AuditExportFailure(line, "link", f"event {e['id']} does not link to the previous line: a line was swapped, inserted or removed")
        prev_hash = e["hash"]

    events = last - 2
    if header["count"] != trailer["count"] or events != trailer["count"]:
        return AuditExportFailure(last, "count", f"the header counts {header['count']} events, the trailer {trailer['count']}, the file holds {events}: events were cut")
    head_hash = _GENESIS_HASH if events == 0 else prev_hash
    if trailer["headHash"] != head_hash:
        return AuditExportFailure(last, "head", "the trailer's headHash is not the last event's hash: the tail was rewritten")

    if public_key_pem is None:
        return AuditExportFailure(last, "key", "no public key was given, so the signature is unchecked (every other check passed); pass the deployment's public key")
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return AuditExportFailure(last, "key", "checking the signature needs the cryptography package (Debian: python3-cryptography)")
    try:
        key = serialization.load_pem_public_key(public_key_pem.encode())
    except ValueError:
        return AuditExportFailure(last, "key", "the public key given is not a PEM public key")
    if not isinstance(key, Ed25519PublicKey):
        return AuditExportFailure(last, "key", f"the public key given is {type(key).__name__}, not ed25519")
    key_id = _key_id(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    if trailer["keyId"] != key_id:
        return AuditExportFailure(last, "key", f"the trailer was signed by key {trailer['keyId']}, not by the given key {key_id}")
    signed = {
        "format": AUDIT_EXPORT_FORMAT,
        "sandboxId": header["sandboxId"],
        "tenantId": header["tenantId"],
        "exportedAt": header["exportedAt"],
        "count": events,
        "headHash": head_hash,
        "keyId": key_id,
    }
    try:
        key.verify(base64.b64decode(trailer["signature"]), _canonical(signed).encode("utf-8"))
    except (InvalidSignature, ValueError):
        return AuditExportFailure(last, "signature", "the signature does not verify: the trailer or the header was rewritten")
    return AuditExportOk(header["sandboxId"], header["tenantId"], header["exportedAt"], events, head_hash, key_id, unlinked)


def format_audit_verdict(v: AuditExportVerdict) -> str:
    """The one-line verdict `sandglass events verify` prints."""
    if isinstance(v, AuditExportFailure):
        return f"FAILED line {v.line} ({v.check}): {v.problem}"
    unlinked = "" if v.unlinked_count == 0 else f" ({v.unlinked_count} from before the sandbox chain: hashes and count checked)"
    return f"OK {v.sandbox_id}: {v.count} events{unlinked}, head {v.head_hash[:16]}, signed by key {v.key_id} at {v.exported_at}"
