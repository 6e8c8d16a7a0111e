"""The replay driver, ported from packages/sdk/src/replay.ts: forks a sandbox in replay mode at a snapshot (or at its
creation) and re-issues its recorded inputs in order, comparing each; the report has the TypeScript SDK's shape."""
from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from ._http import ControlPlane, DataPlane, path_of
from ._time import Time, to_datetime
from .commands import CommandHandle, Commands
from .errors import SandglassError, error_of
from .files import Files

_PAGE = 1000
# The events a replay re-issues.
_INPUT_TYPES = {"command.started", "command.input", "file.written", "file.tar_written", "file.removed", "file.renamed", "file.dir_created"}


@dataclass(frozen=True)
class ReplayFork:
    """What `prepare` gets: the fork, before the first input is replayed."""

    id: str
    commands: Commands
    files: Files


def _seconds(t: Time, field: str = "at") -> float:
    return to_datetime(t, field).timestamp()


def _events(cp: ControlPlane, sandbox_id: str, type_filter: Optional[str] = None) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    after: Optional[int] = None
    while True:
        page = cp.json("GET", path_of("v1", "sandboxes", sandbox_id, "events"), query={"afterSeq": after, "limit": _PAGE, "type": type_filter})["events"]
        out.extend(page)
        if len(page) < _PAGE:
            return out
        after = int(page[-1]["seq"])


def delivery_order(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The log in the order its inputs reached the guest (the TypeScript SDK's deliveryOrder): an input logged after the
    command.exited it caused (a stdin EOF, a signal; the gateway logs an input once the agent answered) goes back before
    that exit, since the agent took it while the command ran."""
    exited: set = set()
    late: Dict[str, List[Dict[str, Any]]] = {}
    for e in events:
        cid = str(e["data"].get("commandId"))
        if e["type"] == "command.exited":
            exited.add(cid)
        elif e["type"] == "command.input" and cid in exited:
            late.setdefault(cid, []).append(e)
    moved = {id(e) for group in late.values() for e in group}
    out: List[Dict[str, Any]] = []
    for e in events:
        if id(e) in moved:
            continue
        if e["type"] == "command.exited":
            out.extend(late.get(str(e["data"].get("commandId")), []))
        out.append(e)
    return out


def choose_start(events: List[Dict[str, Any]], *, from_creation: bool = False, snapshot_id: Optional[str] = None, at: Optional[Time] = None) -> Dict[str, Any]:
    """Where a replay starts ({"snapshotId", "takenAt"}; snapshotId None: the sandbox's creation): the named snapshot,
    the latest at or before `at`, the creation (the default when no snapshot precedes the first input), else the first."""
    taken = [{"snapshotId": str(e["data"]["snapshotId"]), "takenAt": str(e["data"].get("takenAt") or e["at"])} for e in events if e["type"] == "snapshot.taken"]
    created = next((e["at"] for e in events if e["type"] == "sandbox.created"), events[0]["at"] if events else "1970-01-01T00:00:00.000Z")
    creation = {"snapshotId": None, "takenAt": created}
    if from_creation:
        return creation
    pick: Optional[Dict[str, Any]]
    if snapshot_id is not None:
        pick = next((s for s in taken if s["snapshotId"] == snapshot_id), None)
    elif at is not None:
        before = [s for s in taken if _seconds(s["takenAt"]) <= _seconds(at)]
        pick = before[-1] if before else None
    else:
        first_input = next((e for e in events if e["type"] in _INPUT_TYPES), None)
        first = taken[0] if taken else None
        pick = first if first and (first_input is None or _seconds(first["takenAt"]) < _seconds(first_input["at"])) else creation
    if pick is None:
        raise error_of(
            "snapshot_not_found",
            f"Snapshot {snapshot_id} is not one of this sandbox's."
            if snapshot_id is not None
            else "The sandbox has no snapshot at or before that time; replay it from its creation (from_creation=True) or a later time.",
        )
    return pick


def digest_of(stdout: List[bytes], stderr: List[bytes], both: List[bytes]) -> Dict[str, Any]:
    """A command's whole output as the agent hashes it (command.exited `output`)."""

    def h(parts: List[bytes]) -> str:
        d = hashlib.sha256()
        for p in parts:
            d.update(p)
        return d.hexdigest()

    return {
        "sha256": h(both),
        "stdoutSha256": h(stdout),
        "stderrSha256": h(stderr),
        "stdoutBytes": sum(map(len, stdout)),
        "stderrBytes": sum(map(len, stderr)),
    }


def _js(v: Any) -> str:
    # How the TypeScript SDK's messages print a value, so both SDKs' reports read alike.
    return "null" if v is None else ("true" if v is True else "false" if v is False else str(v))


def compare_command(original: Dict[str, Any], replay: Dict[str, Any], *, nondeterministic: bool = False) -> Dict[str, Any]:
    """Compares a replayed command's end with the original's: {"verdict", "differences"} (same, timing,
    nondeterministic or different, by the rules of packages/sdk/src/replay-report.ts)."""
    differences: List[str] = []
    if original["exitCode"] != replay["exitCode"]:
        differences.append(f"exit code {_js(original['exitCode'])} in the original, {_js(replay['exitCode'])} in the replay")
    if original["signal"] != replay["signal"]:
        differences.append(f"signal {original['signal'] or 'none'} in the original, {replay['signal'] or 'none'} in the replay")
    if original["timedOut"] != replay["timedOut"]:
        differences.append(f"timed out: {_js(original['timedOut'])} in the original, {_js(replay['timedOut'])} in the replay")
    end_differs = bool(differences)
    verdict = "same"
    o, r = original.get("output"), replay.get("output")
    if o and r:
        if o["sha256"] != r["sha256"]:
            if o["stdoutSha256"] == r["stdoutSha256"] and o["stderrSha256"] == r["stderrSha256"]:
                verdict = "timing"
                differences.append("stdout and stderr are the same, interleaved differently")
            else:
                verdict = "different"
                if o["stdoutSha256"] != r["stdoutSha256"]:
                    differences.append(f"stdout differs: {o['stdoutBytes']} bytes in the original, {r['stdoutBytes']} in the replay")
                if o["stderrSha256"] != r["stderrSha256"]:
                    differences.append(f"stderr differs: {o['stderrBytes']} bytes in the original, {r['stderrBytes']} in the replay")
    elif original["outputBytes"] != replay["outputBytes"]:
        verdict = "different"
        differences.append(f"output is {original['outputBytes']} bytes in the original, {replay['outputBytes']} in the replay (the original has no digest)")
    if end_differs:
        return {"verdict": "different", "differences": differences}
    if verdict == "different" and nondeterministic:
        return {"verdict": "nondeterministic", "differences": differences}
    return {"verdict": verdict, "differences": differences}


class _Running:
    """One command of the replay: its handle in the fork, followed in a thread, and what it printed, per stream."""

    def __init__(self, commands: Commands, command_id: str) -> None:
        self.stdout: List[bytes] = []
        self.stderr: List[bytes] = []
        self.both: List[bytes] = []
        self.outcome: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self._changed = threading.Condition()
        self.handle = CommandHandle(commands, command_id, on_bytes=self._bytes)
        threading.Thread(target=self._follow, name=f"sandglass-replay-{command_id}", daemon=True).start()

    def _bytes(self, fd: int, data: bytes) -> None:
        with self._changed:
            (self.stdout if fd == 1 else self.stderr).append(data)
            self.both.append(data)
            self._changed.notify_all()

    def _follow(self) -> None:
        try:
            r = self.handle.wait_exit()
            outcome: Dict[str, Any] = {
                "exitCode": None if r.signal else r.exit_code,
                "signal": r.signal or None,
                "timedOut": r.timed_out,
                "outputBytes": self.handle.output_offset,
            }
            with self._changed:
                self.outcome = outcome
                self._changed.notify_all()
        except BaseException as err:  # noqa: BLE001 — handed to whoever waits for the exit
            with self._changed:
                self.error = err
                self._changed.notify_all()

    def reach(self, offset: int, timeout_s: float) -> bool:
        """Waits until the command has written `offset` bytes; False when it exits short of them or time runs out."""
        with self._changed:
            self._changed.wait_for(lambda: self.handle.output_offset >= offset or self.outcome is not None or self.error is not None, timeout_s)
            return self.handle.output_offset >= offset

    def exit(self, what: str, timeout_s: float) -> Dict[str, Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: self.outcome is not None or self.error is not None, timeout_s):
                raise error_of("timeout", f"the replay waited {int(timeout_s * 1000)} ms for {what}")
            if self.error is not None:
                raise self.error
            assert self.outcome is not None
            return dict(self.outcome)


def run_replay(
    cp: ControlPlane,
    source_id: str,
    *,
    from_creation: bool = False,
    snapshot_id: Optional[str] = None,
    at: Optional[Time] = None,
    until: Optional[Time] = None,
    nondeterministic: Optional[List[str]] = None,
    input_timeout_ms: int = 60_000,
    timeout_s: int = 600,
    keep_fork: bool = False,
    prepare: Optional[Callable[[ReplayFork], None]] = None,
) -> Dict[str, Any]:
    """Replays `source_id` (see Sandbox.replay)."""
    t0 = time.monotonic()
    events = _events(cp, source_id)
    start = choose_start(events, from_creation=from_creation, snapshot_id=snapshot_id, at=at)
    # From creation every input is replayed; from a snapshot, those after it.
    from_s = float("-inf") if start["snapshotId"] is None else _seconds(start["takenAt"])
    until_s = float("inf") if until is None else _seconds(until, "until")
    wait_s = input_timeout_ms / 1000
    source = {"sandboxId": source_id, "fromCreation": True} if start["snapshotId"] is None else {"snapshotId": start["snapshotId"]}
    fork = cp.json("POST", "/v1/forks", json_body=dict(source, count=1, timeoutS=timeout_s, replay=True))["sandboxes"][0]
    dp = DataPlane(cp, fork["id"], fork.get("access"))
    commands, files = Commands(dp), Files(dp)

    def recorded(content_id: str, size_bytes: Optional[int] = None) -> bytes:
        return dp.request("GET", "/recording/" + path_of(content_id)[1:], query={"sizeBytes": size_bytes}).read()

    capped = next((e for e in events if e["type"] == "recording.capped"), None)
    inputs: List[Dict[str, Any]] = []
    running: Dict[str, _Running] = {}
    last_seq = 0
    unrecorded_seen = 0

    def command_for(command_id: str) -> _Running:
        # The fork's command for a source command id: one the replay started, or one restored from the snapshot.
        if command_id not in running:
            running[command_id] = _Running(commands, command_id)
        return running[command_id]

    def unrecorded_requests() -> List[str]:
        # Requests the fork's guest made that the recording did not have: a real divergence at the input in progress.
        nonlocal unrecorded_seen
        fe = cp.json("GET", path_of("v1", "sandboxes", fork["id"], "events"), query={"type": "egress.replay_unrecorded", "limit": _PAGE})["events"]
        fresh = fe[unrecorded_seen:]
        unrecorded_seen = len(fe)
        return [f"the guest requested {e['data'].get('method')} {e['data'].get('url')}, which the recording does not have" for e in fresh]

    def verdict_of(seq: int, kind: str, summary: str, differences: List[str]) -> Dict[str, Any]:
        return {"seq": seq, "kind": kind, "summary": summary, "verdict": "different" if differences else "same", "differences": differences}

    def not_recorded(seq: int, kind: str, summary: str) -> Dict[str, Any]:
        return {"seq": seq, "kind": kind, "summary": summary, "verdict": "not_recorded", "differences": ["its content was not recorded (the recording reached its cap)"]}

    try:
        if prepare is not None:
            prepare(ReplayFork(fork["id"], commands, files))
        for e in delivery_order(events):
            if e["type"] not in _INPUT_TYPES and e["type"] != "command.exited":
                continue
            when = _seconds(e["at"])
            if when <= from_s or when > until_s:
                continue
            d: Dict[str, Any] = e["data"]
            seq = int(e["seq"])
            result: Optional[Dict[str, Any]] = None
            if e["type"] == "command.started":
                summary = " ".join(d["argv"])
                if not isinstance(d.get("recordingId"), str):
                    result = not_recorded(seq, "command", summary)
                else:
                    spec = json.loads(recorded(d["recordingId"]).decode("utf-8"))
                    body: Dict[str, Any] = {"argv": spec["argv"], "envs": spec["envs"], "stdin": spec["stdin"]}
                    for field in ("cwd", "user", "pty", "timeoutMs"):
                        if spec.get(field) is not None:
                            body[field] = spec[field]
                    info = dp.json("POST", "/commands", json_body=body)
                    running[str(d["commandId"])] = _Running(commands, info["id"])
            elif e["type"] == "command.input":
                r = command_for(str(d["commandId"]))
                kind = d["kind"]
                offset = d["outputOffset"] if isinstance(d.get("outputOffset"), int) else 0
                if kind == "stdin":
                    summary = f"{d['sizeBytes']} bytes{' and EOF' if d.get('eof') else ''} at output offset {offset}"
                elif kind == "signal":
                    summary = f"{d['signal']} at output offset {offset}"
                else:
                    summary = f"{d['cols']}x{d['rows']}"
                if kind == "stdin" and d["sizeBytes"] > 0 and not isinstance(d.get("contentId"), str):
                    result = not_recorded(seq, "stdin", summary)
                else:
                    # Delivered once the replayed command has written as much as the original had when the input arrived.
                    differences = [] if r.reach(offset, wait_s) else [f"the replayed command never reached output offset {offset} (it is at {r.handle.output_offset})"]
                    try:
                        if kind == "stdin":
                            if d["sizeBytes"] > 0:
                                r.handle.send_stdin(recorded(d["contentId"], d["sizeBytes"]))
                            if d.get("eof"):
                                r.handle.close_stdin()
                        elif kind == "signal":
                            r.handle.kill(d["signal"])
                        else:
                            dp.request("POST", f"/commands/{path_of(r.handle.id)[1:]}/resize", json_body={"cols": d["cols"], "rows": d["rows"]}).read()
                    except SandglassError as err:
                        differences.append(f"the replay could not deliver it: {err.message}")
                    result = verdict_of(seq, kind, summary, differences)
            elif e["type"] == "command.exited":
                command_id = str(d["commandId"])
                r = command_for(command_id)
                started = next((x for x in events if x["type"] == "command.started" and x["data"].get("commandId") == command_id), None)
                argv: List[str] = started["data"]["argv"] if started else [command_id]
                summary = " ".join(argv)
                original: Dict[str, Any] = {
                    "exitCode": d.get("exitCode"),
                    "signal": d.get("signal"),
                    "timedOut": d.get("timedOut") is True,
                    "outputBytes": int(d.get("outputBytes") or 0),
                }
                if d.get("output"):
                    original["output"] = d["output"]
                try:
                    replayed = r.exit(f"{summary} to exit", wait_s)
                except SandglassError as err:
                    result = {"seq": seq, "kind": "command", "summary": summary, "verdict": "different", "differences": [err.message], "original": original}
                else:
                    replayed["output"] = digest_of(r.stdout, r.stderr, r.both)
                    cmp = compare_command(original, replayed, nondeterministic=any(s in a for s in (nondeterministic or []) for a in argv))
                    unrecorded = unrecorded_requests()
                    tail = b"".join(r.both)[-512:].decode("utf-8", "replace")
                    result = {
                        "seq": seq,
                        "kind": "command",
                        "summary": summary,
                        "verdict": "different" if unrecorded else cmp["verdict"],
                        "differences": unrecorded + cmp["differences"],
                        "original": original,
                        "replay": dict(replayed, outputTail=tail),
                    }
            elif e["type"] == "file.written":
                path = str(d["path"])
                summary = f"{path} ({d['sizeBytes']} bytes)"
                if not isinstance(d.get("contentId"), str):
                    result = not_recorded(seq, "file.write", summary)
                else:
                    try:
                        files.write(path, recorded(d["contentId"], int(d["sizeBytes"])))
                        result = verdict_of(seq, "file.write", summary, [])
                    except SandglassError as err:
                        result = verdict_of(seq, "file.write", summary, [f"the write failed in the replay: {err.message}"])
            elif e["type"] == "file.tar_written":
                path = str(d["path"])
                summary = f"{path} ({d['entries']} entries from a tar)"
                if not isinstance(d.get("contentId"), str):
                    result = not_recorded(seq, "file.writeTar", summary)
                else:
                    try:
                        w = files.write_tar(path, recorded(d["contentId"], int(d["archiveBytes"])))
                        diff = [] if w.get("entries") == d["entries"] else [f"{w.get('entries')} entries extracted in the replay, {d['entries']} originally"]
                    except SandglassError as err:
                        diff = [f"the upload failed in the replay: {err.message}"]
                    result = verdict_of(seq, "file.writeTar", summary, diff)
            else:
                kind = {"file.removed": "file.remove", "file.renamed": "file.rename", "file.dir_created": "file.mkdir"}[e["type"]]
                summary = f"{d['from']} → {d['to']}" if e["type"] == "file.renamed" else str(d["path"])
                try:
                    if e["type"] == "file.removed":
                        files.remove(str(d["path"]))
                    elif e["type"] == "file.renamed":
                        files.rename(str(d["from"]), str(d["to"]))
                    else:
                        files.make_dir(str(d["path"]))
                    result = verdict_of(seq, kind, summary, [])
                except SandglassError as err:
                    result = verdict_of(seq, kind, summary, [f"it failed in the replay: {err.message}"])
            last_seq = seq
            if result is not None:
                inputs.append(result)
    finally:
        # Killing the fork ends the output streams its commands' threads follow.
        if not keep_fork:
            try:
                cp.request("DELETE", path_of("v1", "sandboxes", fork["id"])).read()
            except SandglassError:
                pass
    counts = {v: 0 for v in ("same", "timing", "nondeterministic", "different", "not_recorded")}
    for i in inputs:
        counts[i["verdict"]] += 1
    duration_ms = round((time.monotonic() - t0) * 1000)
    replayed_inputs = len([i for i in inputs if i["verdict"] != "not_recorded"])
    return {
        "sourceSandboxId": source_id,
        "forkSandboxId": fork["id"],
        "snapshotId": start["snapshotId"],
        "fromSnapshotTakenAt": start["takenAt"],
        "untilSeq": last_seq,
        "inputs": inputs,
        "counts": counts,
        "firstDivergence": next((i for i in inputs if i["verdict"] == "different"), None),
        "notRecordedBeyondSeq": capped["seq"] if capped else None,
        "durationMs": duration_ms,
        "inputsPerSecond": round(replayed_inputs / (duration_ms / 1000), 2) if duration_ms > 0 else 0,
    }


def format_replay_report(r: Dict[str, Any]) -> str:
    """The report as people read it (as `sandglass replay` prints it): one line per input, then the first divergence."""
    mark = {"same": "same", "timing": "timing", "nondeterministic": "nondet", "different": "DIFF", "not_recorded": "unrecorded"}
    lines = [f"replay of {r['sourceSandboxId']} from {r['snapshotId'] or 'its creation'} ({r['fromSnapshotTakenAt']}) in {r['forkSandboxId']}"]
    for i in r["inputs"]:
        lines.append(f"  #{i['seq']} {mark[i['verdict']]:<10} {i['kind']:<11} {i['summary']}")
        lines.extend(f"      {d}" for d in i["differences"])
    c = r["counts"]
    lines.append(
        f"{len(r['inputs'])} inputs: {c['same']} same, {c['timing']} timing-only, {c['nondeterministic']} nondeterministic, "
        f"{c['different']} different, {c['not_recorded']} not recorded ({r['inputsPerSecond']} inputs/s)"
    )
    if r["notRecordedBeyondSeq"] is not None:
        lines.append(f"not recorded beyond seq {r['notRecordedBeyondSeq']} (the recording reached its cap)")
    f = r["firstDivergence"]
    if f:
        lines.append(f"first divergence: #{f['seq']} {f['kind']} {f['summary']}")
        lines.extend(f"  {d}" for d in f["differences"])
        if f.get("original"):
            lines.append(f"  original: {json.dumps(f['original'], separators=(',', ':'), ensure_ascii=False)}")
        if f.get("replay"):
            lines.append(f"  replay:   {json.dumps(f['replay'], separators=(',', ':'), ensure_ascii=False)}")
    else:
        lines.append("no divergence")
    return "\n".join(lines)
