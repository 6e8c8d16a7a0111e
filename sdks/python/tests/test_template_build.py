"""Template.build against real VMs: a copy, a run step and a start command built and published, a rebuild taken whole
from the step cache (sync and asyncio), a failing step and a start command that dies failing the build with the
catalogue's code, and bad input refused before a build is opened. The context comes from tests/python-sdk.test.ts,
fresh each run (so nothing is cached before the first build), which then builds the same spec with the TypeScript SDK
and finds every step cached."""
from __future__ import annotations

import asyncio
import os
from typing import List

import pytest

from sandglass import AsyncTemplate, BuildLogLine, InvalidArgumentError, NotFoundError, Sandbox, Template


@pytest.fixture(scope="module")
def context() -> str:
    path = os.environ.get("SANDGLASS_TEST_TEMPLATE_CONTEXT")
    if not path:
        pytest.fail("SANDGLASS_TEST_TEMPLATE_CONTEXT is not set: run these through tests/python-sdk.test.ts")
    return path


def test_builds_each_step_then_a_rebuild_is_taken_from_the_cache(context: str) -> None:
    spec_file = os.path.join(context, "sandglass.template.yaml")
    logs: List[BuildLogLine] = []
    built = Template.build("py-built", context=context, file=spec_file, on_log=logs.append)
    assert [(s.index, s.name, s.cached) for s in built.steps] == [
        (0, "COPY site /srv/site/", False),
        (1, "RUN cat /srv/site/hello.txt > /srv/site/built.txt && cat /srv/site/built.txt", False),
        (2, "start", False),
    ]
    nonce = open(os.path.join(context, "site", "hello.txt"), encoding="utf-8").read().strip()
    # The run step's output streamed to the callback as lines of its step.
    assert BuildLogLine("stdout", nonce, 1) in logs
    record = Template.get_build(built.build_id)
    assert record["status"] == "ready" and record["versionId"] == built.version["id"]
    assert [s["status"] for s in record["steps"]] == ["done", "done", "done"]
    assert BuildLogLine("info", "start: ready", 2) in logs
    # A sandbox of the template wakes with the start command still serving what the steps wrote.
    with Sandbox.create("py-built", timeout_s=300) as sbx:
        assert sbx.commands.run("curl -sf http://127.0.0.1:8000/built.txt").stdout == f"{nonce}\n"

    again = Template.build("py-built", context=context, file=spec_file)
    assert [(s.cached, s.duration_ms) for s in again.steps] == [(True, 0), (True, 0), (True, 0)]
    assert again.version["version"] == built.version["version"] + 1 and again.version["snapshotId"] == built.version["snapshotId"]
    from_async = asyncio.run(AsyncTemplate.build("py-built", context=context, file=spec_file))
    assert all(s.cached for s in from_async.steps) and from_async.version["snapshotId"] == built.version["snapshotId"]


def test_a_failing_step_fails_the_build_with_its_exit_code_and_output(context: str) -> None:
    spec = {
        "from": "base",
        "envs": {},
        "user": "root",
        "workdir": "/",
        "steps": [
            {"kind": "copy", "name": "COPY site /srv/site/", "src": ["site"], "dest": "/srv/site/", "user": "root"},
            {"kind": "run", "name": "doomed", "cmd": "echo going down; exit 3", "user": "root", "workdir": "/", "envs": {}},
        ],
    }
    with pytest.raises(InvalidArgumentError) as e:
        Template.build("py-doomed", context=context, spec=spec)
    err = e.value
    assert err.code == "template_build_failed" and err.status == 422
    assert err.details["step"] == 1 and err.details["stepName"] == "doomed" and err.details["exitCode"] == 3
    assert "going down" in err.details["outputTail"]
    record = Template.get_build(err.details["buildId"])
    assert record["status"] == "failed" and record["error"]["step"] == 1
    # The copy before it came from the cache; nothing was published.
    assert [(s["index"], s["status"]) for s in record["steps"]][:1] == [(0, "cached")]
    assert not Template.exists("py-doomed")


def test_a_start_command_that_exits_fails_the_build_naming_it(context: str) -> None:
    parsed_steps = [{"kind": "copy", "name": "COPY site /srv/site/", "src": ["site"], "dest": "/srv/site/", "user": "root"}]
    spec = {
        "from": "base",
        "envs": {"WHO": "py"},
        "user": "root",
        "workdir": "/",
        "steps": parsed_steps,
        "start": {"cmd": "echo start of $WHO; exit 5", "user": "root", "workdir": "/", "ready": {"cmd": "false", "timeoutS": 60, "intervalMs": 200}},
    }
    with pytest.raises(InvalidArgumentError) as e:
        Template.build("py-nostart", context=context, spec=spec)
    assert e.value.code == "template_build_failed"
    assert e.value.details["stepName"] == "start" and e.value.details["field"] == "start.cmd" and e.value.details["step"] == 1
    assert "exited with code 5" in e.value.message and "start of py" in e.value.details["outputTail"]


def test_bad_input_is_refused_naming_the_field_before_a_build_is_opened(context: str, tmp_path: "os.PathLike[str]") -> None:
    bad = os.path.join(str(tmp_path), "sandglass.template.yaml")
    with open(bad, "w", encoding="utf-8") as f:
        f.write("from: base\nsteps:\n  - copy: { src: ../outside, dest: /x }\n")
    with pytest.raises(InvalidArgumentError) as e:
        Template.build("py-refused", context=context, file=bad)
    assert e.value.code == "invalid_argument" and e.value.details["field"] == "steps[0].copy.src"
    dockerfile = os.path.join(str(tmp_path), "Dockerfile")
    with open(dockerfile, "w", encoding="utf-8") as f:
        f.write("FROM base\nCOPY missing /x\n")
    with pytest.raises(InvalidArgumentError) as e:
        Template.build("py-refused", context=context, file=dockerfile)
    assert e.value.details["field"] == "steps[0].copy.src" and "does not exist" in e.value.message
    with open(dockerfile, "w", encoding="utf-8") as f:
        f.write("FROM nothing-like-it\n")
    with pytest.raises(NotFoundError) as nf:
        Template.build("py-refused", context=context, file=dockerfile)
    assert nf.value.code == "template_not_found" and nf.value.details["field"] == "from"
    assert Template.builds(name="py-refused") == []
