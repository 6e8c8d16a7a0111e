"""`Template`: custom templates of the caller's tenant: build one from a spec, promote a snapshot, list, inspect, delete,
read build logs."""
from __future__ import annotations

import re
import time
from typing import Any, Callable, Dict, List, Optional

from ._http import ControlPlane, path_of, resolve_config
from .errors import NotFoundError, error_of
from .template_build import DEFAULT_STEP_TIMEOUT_MS, LogCallback, TemplateBuildResult, build_template
from .template_spec import Spec

# As the TypeScript SDK's TEMPLATE_NAME: checked before any request, so a bad name changes nothing.
_TEMPLATE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def _cp(api_url: Optional[str], api_key: Optional[str]) -> ControlPlane:
    return ControlPlane(resolve_config(api_url, api_key, None))


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _TEMPLATE_NAME.fullmatch(name):
        raise error_of(
            "invalid_argument",
            "name: must be 1–64 of lower-case letters, digits, '.', '_' and '-', starting with a letter or digit",
            details={"field": "name"},
        )
    return name


class Template:
    @staticmethod
    def build(
        name: str,
        *,
        context: str,
        file: Optional[str] = None,
        spec: Optional[Spec] = None,
        on_log: Optional[LogCallback] = None,
        step_timeout_ms: int = DEFAULT_STEP_TIMEOUT_MS,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout_s: Optional[float] = None,
    ) -> TemplateBuildResult:
        """Builds a version of the template `name` from a spec (a `file`, sandglass.template.yaml or a Dockerfile, or a
        `spec` dict shaped as parse_template_yaml's) and a `context` directory, as the TypeScript SDK's Template.build:
        a sandbox boots `from`, runs each step with its output streamed to `on_log` (BuildLogLine: stream, text, step)
        and the build's log, and is snapshotted after each; the last snapshot is published. A step either SDK built
        before is taken from the cache instead (the step keys are the same). A failed step fails the build
        (template_build_failed, details step, stepName, exitCode, outputTail) and publishes nothing; one build runs per
        name at a time (template_build_in_progress). Bad input is invalid_argument naming details["field"], before any
        request."""
        return build_template(
            ControlPlane(resolve_config(api_url, api_key, request_timeout_s)),
            name,
            context=context,
            file=file,
            spec=spec,
            on_log=on_log,
            step_timeout_ms=step_timeout_ms,
        )

    @staticmethod
    def list(*, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every template the caller can create from: the platform's and the tenant's own."""
        return list(_cp(api_url, api_key).json("GET", "/v1/templates")["templates"])

    @staticmethod
    def get(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
        """A template with its versions, newest first; NotFoundError (template_not_found) when there is none."""
        return dict(_cp(api_url, api_key).json("GET", path_of("v1", "templates", name)))

    @staticmethod
    def exists(name: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> bool:
        try:
            Template.get(name, api_url=api_url, api_key=api_key)
            return True
        except NotFoundError:
            return False

    @staticmethod
    def delete(name: str, *, version: Optional[int] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> None:
        """Deletes a template's versions, or one with `version`; sandboxes and snapshots made from them keep working."""
        _cp(api_url, api_key).request("DELETE", path_of("v1", "templates", name), query={"version": version}).read()

    @staticmethod
    def from_snapshot(
        name: str,
        snapshot_id: str,
        *,
        envs: Optional[Dict[str, str]] = None,
        user: Optional[str] = None,
        workdir: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Promotes a snapshot of the tenant to a new version of `name` (created on first use); envs, user and workdir
        are what sandboxes created from the version get."""
        body = {"name": _check_name(name), "snapshotId": snapshot_id, "envs": envs, "user": user, "workdir": workdir}
        return dict(_cp(api_url, api_key).json("POST", "/v1/templates", json_body=body))

    @staticmethod
    def builds(*, name: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """The tenant's builds, newest first; of one template with `name`."""
        return list(_cp(api_url, api_key).json("GET", "/v1/template-builds", query={"name": name})["builds"])

    @staticmethod
    def get_build(build_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
        return dict(_cp(api_url, api_key).json("GET", path_of("v1", "template-builds", build_id)))

    @staticmethod
    def logs(
        build_or_name: str,
        *,
        from_line: int = 0,
        follow: bool = False,
        on_line: Optional[Callable[[Dict[str, Any]], None]] = None,
        interval_s: float = 1.0,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        """A build's log: `bld_…`, or a template name for its newest build. With follow, reads on until the build has
        ended and every line is read. Answers {"lines": [those not given to on_line], "status": the build's at the end}."""
        cp = _cp(api_url, api_key)
        build_id = build_or_name
        if not build_or_name.startswith("bld_"):
            builds = cp.json("GET", "/v1/template-builds", query={"name": build_or_name})["builds"]
            if not builds:
                raise error_of("not_found", f"template '{build_or_name}' has no builds", details={"field": "name"})
            build_id = builds[0]["id"]
        collected: List[Dict[str, Any]] = []
        next_line = from_line
        while True:
            page = cp.json("GET", path_of("v1", "template-builds", build_id, "log"), query={"fromLine": next_line})
            for line in page["lines"]:
                if on_line is not None:
                    on_line(line)
                else:
                    collected.append(line)
            next_line = page["nextLine"]
            if page["lines"]:
                continue
            if not follow or page["status"] != "running":
                return {"lines": collected, "status": page["status"]}
            time.sleep(interval_s)
