"""A template build driven from Python as the TypeScript SDK drives it (packages/sdk/src/template-build.ts): a build
sandbox runs the steps, each step's snapshot is cached under a key both SDKs compute alike, and the last one is
published; over the same public APIs, so either SDK reuses the steps the other built."""
from __future__ import annotations

import errno
import hashlib
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ._http import ControlPlane, path_of
from .commands import CommandHandle, CommandResult
from .errors import CommandExitError, CommandTimeoutError, NotFoundError, SandglassError, error_of
from .sandbox import Sandbox
from .template_context import CollectedCopy, collect_copy, plan_copy, tar_stream
from .template_spec import Spec, check_name, invalid_field, js_sorted_keys, parse_template_file


@dataclass(frozen=True)
class BuildLogLine:
    stream: str  # stdout, stderr or info
    text: str
    # The step the line belongs to (the start command is the step after the last).
    step: Optional[int] = None


@dataclass(frozen=True)
class BuiltStep:
    index: int
    name: str
    # Its snapshot came from the step cache: the step did not run.
    cached: bool
    duration_ms: int


@dataclass(frozen=True)
class TemplateBuildResult:
    build_id: str
    version: Dict[str, Any]
    # The steps, then the start command (named `start`) when the spec has one.
    steps: List[BuiltStep]
    duration_ms: int
    # What the spec file held that the build ignored (Dockerfile EXPOSE, LABEL …).
    notes: List[str] = field(default_factory=list)


LogCallback = Callable[[BuildLogLine], None]

DEFAULT_STEP_TIMEOUT_MS = 30 * 60_000
# The control plane ends a build not reported to for 60 s; report at least this often.
_HEARTBEAT_S = 15.0
_REPORT_INTERVAL_S = 1.0
_MAX_LINE = 16_384
_MAX_LINES_PER_REPORT = 1000
_TAIL_CHARS = 8000
# A copy's archive is spooled here before it is sent, so a retried request can send it again; small ones stay in memory.
_SPOOL_BYTES = 8 << 20


def _json_string(text: str) -> str:
    # JSON.stringify: non-ASCII as itself, a lone surrogate escaped (lower-case hex, as Python's own escapes are).
    return "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in json.dumps(text, ensure_ascii=False))


def canonical_json(value: Any) -> str:
    """JSON with object keys sorted (in JavaScript's order) at every level: the TypeScript SDK's canonicalJson."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(k)}:{canonical_json(value[k])}" for k in js_sorted_keys(value) if value[k] is not None) + "}"
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def base_key(spec: Spec, from_id: str) -> str:
    """The key of the build's starting point: the template it starts from (as resolved) and the sandbox's resources and egress."""
    keys = ("memoryMib", "vcpus", "diskMib", "network", "secrets")
    return _sha256(canonical_json({"v": 1, "from": spec["from"], "fromId": from_id, **{k: spec.get(k) for k in keys}}))


def step_key(previous: str, step: Spec, digest: str) -> str:
    """A step's key: the key before it, the step as it runs (its display name left out) and the digest of what it copies."""
    what = {k: v for k, v in step.items() if k != "name"}
    return _sha256(f"{previous}\n{canonical_json(what)}\n{digest}")


def start_key(previous: str, start: Spec, envs: Dict[str, str]) -> str:
    """The start command's key: the last step's key, the command and its ready check, and the envs it runs with."""
    return _sha256(f"{previous}\n{canonical_json({'start': start, 'envs': envs})}")


class _Reporter:
    """Batches a build's output to the control plane (at most one report a second, from a thread of its own) and keeps
    the build from going stale."""

    def __init__(self, cp: ControlPlane, build_id: str) -> None:
        self._cp = cp
        self._path = path_of("v1", "template-builds", build_id, "log")
        self._lines: List[Dict[str, str]] = []
        self._steps: List[Dict[str, Any]] = []
        self._cond = threading.Condition()
        self._due: Optional[float] = None
        self._last_sent = time.monotonic()
        self._closed = False
        self._failure: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._loop, name=f"sandglass-build-{build_id}", daemon=True)
        self._thread.start()

    def line(self, stream: str, text: str) -> None:
        with self._cond:
            for i in range(0, max(len(text), 1), _MAX_LINE):
                self._lines.append({"stream": stream, "text": text[i : i + _MAX_LINE]})
            self._schedule(_REPORT_INTERVAL_S)

    def step(self, step: Dict[str, Any]) -> None:
        with self._cond:
            self._steps.append(step)
            self._schedule(_REPORT_INTERVAL_S)

    def _schedule(self, delay_s: float) -> None:
        if self._due is None:
            self._due = time.monotonic() + delay_s
            self._cond.notify()

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._due is None and now - self._last_sent >= _HEARTBEAT_S:
                    self._due = now
                if self._due is not None and now >= self._due:
                    self._due = None
                    self._cond.release()
                    try:
                        self._send()
                    finally:
                        self._cond.acquire()
                    continue
                wake = self._last_sent + _HEARTBEAT_S if self._due is None else self._due
                self._cond.wait(max(0.0, wake - now))

    def _send(self) -> None:
        try:
            # Lines first, then each step change in order: a step's report follows the output it produced.
            while True:
                with self._cond:
                    lines = self._lines[:_MAX_LINES_PER_REPORT]
                    del self._lines[:_MAX_LINES_PER_REPORT]
                    step = self._steps.pop(0) if not self._lines and self._steps else None
                body: Dict[str, Any] = {"lines": lines}
                if step is not None:
                    body["step"] = step
                self._cp.request("POST", self._path, json_body=body).read()
                with self._cond:
                    self._last_sent = time.monotonic()
                    if not self._lines and not self._steps:
                        return
        except Exception as err:  # noqa: BLE001 — kept for check(): the build cannot go on without its reports
            if self._failure is None:
                self._failure = err

    def check(self) -> None:
        """Raises what reporting failed with (the build went stale, the server went away): the build cannot go on."""
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        """Sends what is pending and stops."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._lines or self._steps:
            self._send()


class _Tail:
    """The last characters of a step's output, kept as it streams."""

    def __init__(self) -> None:
        self.text = ""

    def add(self, s: str) -> None:
        self.text = (self.text + s)[-_TAIL_CHARS:]


class _LineSplitter:
    """Splits streamed output into lines per stream, for the log; a line cut by a frame boundary waits for its end."""

    def __init__(self, emit: Callable[[str, str], None]) -> None:
        self._emit = emit
        self._partial = {"stdout": "", "stderr": ""}

    def write(self, stream: str, data: str) -> None:
        parts = (self._partial[stream] + data).split("\n")
        self._partial[stream] = parts.pop()
        for p in parts:
            self._emit(stream, p[:-1] if p.endswith("\r") else p)

    def end(self) -> None:
        for stream in ("stdout", "stderr"):
            if self._partial[stream]:
                self._emit(stream, self._partial[stream])
        self._partial = {"stdout": "", "stderr": ""}


def _build_failed(message: str, details: Dict[str, Any]) -> SandglassError:
    return error_of("template_build_failed", message, status=422, details=details)


def _cached(cp: ControlPlane, key: str) -> Optional[str]:
    """A cache hit's snapshot, or None when the key has none (or its snapshot is gone)."""
    try:
        return str(cp.json("GET", path_of("v1", "template-cache", key))["snapshotId"])
    except NotFoundError:
        return None


def _load_spec(file: Optional[str], spec: Optional[Spec]) -> Spec:
    if spec is not None:
        return {"spec": spec, "notes": []}
    if not file:
        raise invalid_field("file", "give a spec file (sandglass.template.yaml or a Dockerfile) or a spec")
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise invalid_field("file", f"cannot read {file} ({errno.errorcode.get(err.errno or 0, err.strerror)})") from None
    except UnicodeDecodeError:
        raise invalid_field("file", f"cannot read {file} (not UTF-8)") from None
    return parse_template_file(file, text)


class _Step:
    """What one step's run needs: where its output goes and the timeout of its commands."""

    def __init__(self, log: LogCallback, reporter: _Reporter, step_timeout_ms: int) -> None:
        self.log = log
        self.reporter = reporter
        self.step_timeout_ms = step_timeout_ms

    def output(self, index: int, tail: _Tail) -> "tuple[_LineSplitter, Dict[str, Any]]":
        def emit(stream: str, text: str) -> None:
            self.log(BuildLogLine(stream, text, index))
            self.reporter.line(stream, text)

        lines = _LineSplitter(emit)

        def on_stdout(d: str) -> None:
            tail.add(d)
            lines.write("stdout", d)

        def on_stderr(d: str) -> None:
            tail.add(d)
            lines.write("stderr", d)

        return lines, {"on_stdout": on_stdout, "on_stderr": on_stderr}


def build_template(
    cp: ControlPlane,
    name: str,
    *,
    context: str,
    file: Optional[str] = None,
    spec: Optional[Spec] = None,
    on_log: Optional[LogCallback] = None,
    step_timeout_ms: int = DEFAULT_STEP_TIMEOUT_MS,
) -> TemplateBuildResult:
    """Builds a template version from a spec; see Template.build."""
    began = time.monotonic()
    name = check_name(name, "name")
    loaded = _load_spec(file, spec)
    spec_: Spec = loaded["spec"]
    notes: List[str] = loaded["notes"]
    config = cp.config

    def log(line: BuildLogLine) -> None:
        if on_log is not None:
            on_log(line)

    # Everything that can be refused is checked before the server is asked for anything: bad input changes nothing.
    copies: List[Optional[CollectedCopy]] = []
    for i, step in enumerate(spec_["steps"]):
        if step.get("kind") not in ("run", "copy"):
            raise invalid_field(f"steps[{i}].kind", f"unknown step kind '{step.get('kind')}'; a step is run or copy")
        copies.append(collect_copy(context, step["src"], f"steps[{i}].copy.src") if step["kind"] == "copy" else None)
    try:
        from_id = str(cp.json("GET", path_of("v1", "templates", spec_["from"]))["template"]["id"])
    except NotFoundError as err:
        raise error_of(
            "template_not_found", f"from: there is no template '{spec_['from']}' (see `sandglass templates`)", status=404, details={"field": "from"}
        ) from err
    keys: List[str] = []
    key = base_key(spec_, from_id)
    for i, step in enumerate(spec_["steps"]):
        key = step_key(key, step, copies[i].digest if copies[i] is not None else "")  # type: ignore[union-attr]
        keys.append(key)
    start = spec_.get("start")
    final_key = start_key(key, start, spec_["envs"]) if start else None

    build = cp.json("POST", "/v1/template-builds", json_body={"name": name})
    build_id = str(build["id"])
    reporter = _Reporter(cp, build_id)

    def info(text: str, step: Optional[int] = None) -> None:
        log(BuildLogLine("info", text, step))
        reporter.line("info", text)

    steps: List[BuiltStep] = []
    sbx: Optional[Sandbox] = None
    current: Optional[int] = None
    n_steps = len(spec_["steps"])
    try:
        for note in notes:
            info(note)
        # The longest prefix of steps whose snapshots the cache still has.
        snapshot_id: Optional[str] = None
        done = 0
        while done < len(keys):
            hit = _cached(cp, keys[done])
            if hit is None:
                break
            snapshot_id = hit
            done += 1
        start_index = n_steps
        start_cached = _cached(cp, final_key) if done == len(keys) and final_key is not None else None

        def mark_cached(index: int, step_name: str) -> None:
            steps.append(BuiltStep(index, step_name, True, 0))
            reporter.step({"index": index, "name": step_name, "status": "cached"})
            info(f"step {index + 1}/{n_steps} {step_name}: cached", index)

        for i in range(done):
            mark_cached(i, spec_["steps"][i]["name"])
        if start_cached is not None:
            mark_cached(start_index, "start")
            snapshot_id = start_cached

        if done < len(keys) or (start is not None and start_cached is None) or snapshot_id is None:
            timeout_s = -(-step_timeout_ms // 1000) + 600
            conn = {"api_url": config.api_url, "api_key": config.api_key}
            info(f"build sandbox: fork of {snapshot_id}" if snapshot_id else f"build sandbox: {spec_['from']}")
            sbx = (
                Sandbox.fork(snapshot_id, timeout_s=timeout_s, **conn)[0]
                if snapshot_id
                else Sandbox.create(
                    from_id,
                    memory_mib=spec_.get("memoryMib"),
                    vcpus=spec_.get("vcpus"),
                    disk_mib=spec_.get("diskMib"),
                    network=spec_.get("network"),
                    secrets=spec_.get("secrets"),
                    timeout_s=timeout_s,
                    request_timeout_s=config.request_timeout_s,
                    **conn,
                )
            )
            box = sbx
            ctx = _Step(log, reporter, step_timeout_ms)

            def snap(index: int, k: str) -> str:
                # Compact: a version's RAM holds only live pages, as a platform template's does, so forks of it copy less.
                taken = box.snapshot(name=f"tb-{name[:32]}-{index}-{k[:16]}", compact=True)
                cp.request("PUT", path_of("v1", "template-cache", k), json_body={"snapshotId": taken["id"]}).read()
                return str(taken["id"])

            for i in range(done, len(keys)):
                step = spec_["steps"][i]
                current = i
                reporter.check()
                box.set_timeout(timeout_s)
                t0 = time.monotonic()
                reporter.step({"index": i, "name": step["name"], "status": "running"})
                info(f"step {i + 1}/{n_steps} {step['name']}", i)
                _run_step(box, step, i, copies[i], ctx)
                snapshot_id = snap(i, keys[i])
                duration_ms = round((time.monotonic() - t0) * 1000)
                steps.append(BuiltStep(i, step["name"], False, duration_ms))
                reporter.step({"index": i, "name": step["name"], "status": "done", "durationMs": duration_ms})
                info(f"step {i + 1}/{n_steps} done in {duration_ms / 1000:.1f} s", i)
            if start is not None and start_cached is None:
                current = start_index
                reporter.check()
                t0 = time.monotonic()
                reporter.step({"index": start_index, "name": "start", "status": "running"})
                info(f"start: {start['cmd']}", start_index)
                _start_and_wait(box, start, spec_["envs"], start_index, ctx)
                assert final_key is not None
                snapshot_id = snap(start_index, final_key)
                duration_ms = round((time.monotonic() - t0) * 1000)
                steps.append(BuiltStep(start_index, "start", False, duration_ms))
                reporter.step({"index": start_index, "name": "start", "status": "done", "durationMs": duration_ms})
            if snapshot_id is None:
                snapshot_id = str(box.snapshot(name=f"tb-{name[:32]}-from")["id"])
        current = None
        reporter.check()
        reporter.close()
        body = {
            "name": name,
            "snapshotId": snapshot_id,
            "envs": spec_["envs"],
            "user": spec_["user"],
            "workdir": spec_["workdir"],
            "start": start,
            "buildId": build_id,
        }
        version = dict(cp.json("POST", "/v1/templates", json_body=body))
        log(BuildLogLine("info", f"published {name} version {version['version']} ({version['id']})"))
        return TemplateBuildResult(build_id, version, steps, round((time.monotonic() - began) * 1000), notes)
    except BaseException as err:
        # A step's failure names the build too; anything else (size_unsupported, policy_invalid from the build
        # sandbox's create, a lost connection) keeps its own code, and the build is failed with its message.
        message = err.message if isinstance(err, SandglassError) else str(err) or type(err).__name__
        try:
            reporter.close()
        except Exception:  # noqa: BLE001 — the build's own failure is what the caller hears
            pass
        fail: Dict[str, Any] = {"message": (message or "the build failed")[:16_384]}
        if current is not None:
            fail["step"] = current
        try:
            cp.request("POST", path_of("v1", "template-builds", build_id, "fail"), json_body=fail).read()
        except Exception:  # noqa: BLE001
            pass
        if isinstance(err, SandglassError) and err.code == "template_build_failed":
            raise _build_failed(err.message, {**err.details, "buildId": build_id}) from err
        raise
    finally:
        reporter.close()
        if sbx is not None:
            try:
                sbx.kill()
            except Exception:  # noqa: BLE001 — the sandbox's own timeout ends it otherwise
                pass


def _run_step(sbx: Sandbox, step: Spec, index: int, copy: Optional[CollectedCopy], ctx: _Step) -> None:
    tail = _Tail()
    lines, callbacks = ctx.output(index, tail)

    def fail(what: str, result: Optional[CommandResult] = None) -> SandglassError:
        details: Dict[str, Any] = {"step": index, "stepName": step["name"], "outputTail": tail.text}
        if result is not None:
            details["exitCode"] = result.exit_code
        return _build_failed(f"step {index} ({step['name']}) {what}" + (f"; its output ends:\n{tail.text}" if tail.text else ""), details)

    try:
        if step["kind"] == "run":
            # WORKDIR creates its directory, as in Docker.
            if step["workdir"] != "/":
                sbx.files.make_dir(step["workdir"])
            sbx.commands.run(step["cmd"], user=step["user"], cwd=step["workdir"], envs=step["envs"], timeout_ms=ctx.step_timeout_ms, **callbacks)
            return
        assert copy is not None
        dest_is_dir = _is_dir(sbx, step["dest"]) if copy.single_file and not step["dest"].endswith("/") else True
        plan = plan_copy(copy, step["dest"], dest_is_dir)
        existed = sbx.files.exists(plan.target_dir)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as archive:
            for chunk in tar_stream(plan.entries):
                archive.write(chunk)
            written = sbx.files.write_tar(plan.target_dir, archive)  # type: ignore[arg-type]
        copied = f"copied {written['entries']} entries ({written['sizeBytes']} bytes) into {plan.target_dir}\n"
        tail.add(copied)
        lines.write("stdout", copied)
        if step["user"] != "root":
            # Only what the copy wrote (and the directory it created) changes owner, as with Docker's --chown.
            user = step["user"]
            owner = user if ":" in user else f"{user}:{user}" if user.isdigit() else f"{user}:"
            paths = [f"/{r}" if plan.target_dir == "/" else f"{plan.target_dir}/{r}" for r in plan.roots]
            if not existed and plan.target_dir != "/":
                paths.append(plan.target_dir)
            sbx.commands.exec(["chown", "-R", owner, "--", *paths], timeout_ms=ctx.step_timeout_ms, **callbacks)
    except CommandTimeoutError as err:
        raise fail(f"ran past its timeout of {ctx.step_timeout_ms} ms", err.result) from err
    except CommandExitError as err:
        raise fail(f"exited with code {err.result.exit_code}", err.result) from err
    except Exception as err:  # noqa: BLE001 — whatever stopped the step (a changed context, a lost connection) fails it
        raise fail(f"failed: {err.message if isinstance(err, SandglassError) else err}") from err
    finally:
        lines.end()


def _is_dir(sbx: Sandbox, path: str) -> bool:
    try:
        return bool(sbx.files.stat(path)["type"] == "dir")
    except NotFoundError:
        return False


def _start_and_wait(sbx: Sandbox, start: Spec, envs: Dict[str, str], index: int, ctx: _Step) -> None:
    """Starts the start command in the background and runs the ready check until it exits 0, the start command ends,
    or its time is up."""
    tail = _Tail()
    lines, callbacks = ctx.output(index, tail)

    def fail(what: str, field_name: str) -> SandglassError:
        message = f"start: {what}" + (f"; its output ends:\n{tail.text}" if tail.text else "")
        return _build_failed(message, {"step": index, "stepName": "start", "field": field_name, "outputTail": tail.text})

    handle: CommandHandle = sbx.commands.run(start["cmd"], background=True, user=start["user"], cwd=start["workdir"], envs=envs, timeout_ms=0, **callbacks)
    ended: List[str] = []

    def follow() -> None:
        try:
            r = handle.wait_exit()
            ended.append(f"the start command exited with code {r.exit_code} before it was ready")
        except Exception as err:  # noqa: BLE001 — reported as the start command's end
            ended.append(f"the start command ended before it was ready: {err}")

    follower = threading.Thread(target=follow, name=f"sandglass-start-{handle.id}", daemon=True)
    follower.start()
    try:
        ready = start.get("ready")
        if not ready:
            return
        deadline = time.monotonic() + ready["timeoutS"]
        last = ""
        while True:
            if ended:
                raise fail(ended[0], "start.cmd")
            try:
                timeout_ms = max(1000, min(30_000, int((deadline - time.monotonic()) * 1000)))
                sbx.commands.run(ready["cmd"], user=start["user"], cwd=start["workdir"], envs=envs, timeout_ms=timeout_ms)
                ctx.reporter.line("info", "start: ready")
                ctx.log(BuildLogLine("info", "start: ready", index))
                return
            except CommandTimeoutError:
                last = "timed out"
            except CommandExitError as err:
                stderr = err.result.stderr.strip()[-500:]
                last = f"exit {err.result.exit_code}" + (f": {stderr}" if stderr else "")
            if time.monotonic() + ready["intervalMs"] / 1000 > deadline:
                raise fail(f"the ready check did not pass within {ready['timeoutS']} s (last: {last})", "start.ready")
            time.sleep(ready["intervalMs"] / 1000)
    finally:
        # The process keeps running into the snapshot; only this handle's stream stops.
        if not ended:
            handle.disconnect()
        follower.join(timeout=10)
        lines.end()
