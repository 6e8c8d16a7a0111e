"""A template's build spec: `sandglass.template.yaml` and the Dockerfile subset read into one normalized spec, a dict
shaped exactly as the TypeScript SDK's TemplateSpec (packages/sdk/src/template-spec.ts), refusing what it refuses
with the same details["field"]. Lengths, whitespace, path normalizing and YAML's types follow JavaScript's rules, so
both SDKs read a file into the same spec and so the same step keys (a drift test in packages/sdk compares them)."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Tuple

from .errors import SandglassError, error_of

Spec = Dict[str, Any]

TEMPLATE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_FROM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,63}")
_STEP_USER = re.compile(r"(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10})")
_OWNER = re.compile(r"(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10})(?::(?:[a-z_][a-z0-9_-]{0,63}|[0-9]{1,10}))?")
_SECRET_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MAX_ENVS = 128
_MAX_ENVS_BYTES = 64 * 1024
_MAX_STEPS = 500
_MAX_CMD = 262_144
_MAX_STEP_NAME = 200
_MAX_PATH = 4096
READY_TIMEOUT_DEFAULT_S = 60
READY_TIMEOUT_MAX_S = 600
_READY_INTERVAL_DEFAULT_MS = 500

# JavaScript's \s (and what its trim() removes): Python's \s differs (it has \x1c-\x1f and \x85, not \ufeff).
_WS = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def invalid_field(field: str, message: str) -> SandglassError:
    """The error of a bad input, naming the exact place it came from (`steps[2].copy.src`, `line 7`)."""
    return error_of("invalid_argument", f"{field}: {message}", details={"field": field})


def js_length(text: str) -> int:
    """A string's length as JavaScript counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_slice(text: str, end: int) -> str:
    """`text.slice(0, end)` as JavaScript cuts it: in UTF-16 code units, so half a surrogate pair may be left at the cut."""
    return text.encode("utf-16-le", "surrogatepass")[: end * 2].decode("utf-16-le", "surrogatepass")


def js_utf8(text: str) -> bytes:
    """Buffer.from(text, 'utf8'): a lone surrogate becomes U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text).encode("utf-8")


def js_trim(text: str) -> str:
    return re.sub(f"^[{_WS}]+|[{_WS}]+\\Z", "", text)


def utf8_length(text: str) -> int:
    """Buffer.byteLength: a lone surrogate counts as the 3 bytes of U+FFFD."""
    return len(js_utf8(text))


def js_keys(value: Dict[str, Any]) -> List[str]:
    """A map's keys in the order JavaScript walks an object's: array indexes first, ascending, then insertion order."""
    index = [k for k in value if re.fullmatch(r"0|[1-9][0-9]*", k) and int(k) < 2**32 - 1]
    return sorted(index, key=int) + [k for k in value if k not in index]


def js_sorted_keys(keys: Any) -> List[str]:
    """Keys in JavaScript's default sort order (UTF-16 code units)."""
    return sorted(keys, key=lambda k: k.encode("utf-16-be", "surrogatepass"))


# ---- node's path.posix, whose results differ from posixpath's (leading //, trailing /) ----


def _normalize_string(path: str, allow_above_root: bool) -> str:
    res = ""
    last_segment_length = 0
    last_slash = -1
    dots = 0
    code = ""
    for i in range(len(path) + 1):
        if i < len(path):
            code = path[i]
        elif code == "/":
            break
        else:
            code = "/"
        if code == "/":
            if last_slash == i - 1 or dots == 1:
                pass
            elif dots == 2:
                if len(res) < 2 or last_segment_length != 2 or res[-1] != "." or res[-2] != ".":
                    if len(res) > 2:
                        idx = res.rfind("/")
                        if idx == -1:
                            res = ""
                            last_segment_length = 0
                        else:
                            res = res[:idx]
                            last_segment_length = len(res) - 1 - res.rfind("/")
                        last_slash = i
                        dots = 0
                        continue
                    if len(res) != 0:
                        res = ""
                        last_segment_length = 0
                        last_slash = i
                        dots = 0
                        continue
                if allow_above_root:
                    res += "/.." if len(res) > 0 else ".."
                    last_segment_length = 2
            else:
                segment = path[last_slash + 1 : i]
                res = f"{res}/{segment}" if len(res) > 0 else segment
                last_segment_length = i - last_slash - 1
            last_slash = i
            dots = 0
        elif code == "." and dots != -1:
            dots += 1
        else:
            dots = -1
    return res


def posix_normalize(path: str) -> str:
    """node's path.posix.normalize."""
    if path == "":
        return "."
    absolute = path[0] == "/"
    trailing = path[-1] == "/"
    out = _normalize_string(path, not absolute)
    if out == "":
        return "/" if absolute else ("./" if trailing else ".")
    if trailing:
        out += "/"
    return f"/{out}" if absolute else out


def posix_join(*parts: str) -> str:
    """node's path.posix.join."""
    joined = "/".join(p for p in parts if p != "")
    return "." if joined == "" else posix_normalize(joined)


def posix_resolve(base: str, path: str) -> str:
    """node's path.posix.resolve(base, path) for an absolute base."""
    whole = path if path.startswith("/") else (base if path == "" else f"{base}/{path}")
    out = _normalize_string(whole, False)
    return f"/{out}" if out else "/"


def posix_basename(path: str) -> str:
    """node's path.posix.basename: the last segment, trailing slashes aside."""
    stripped = path.rstrip("/")
    return "" if stripped == "" else stripped[stripped.rfind("/") + 1 :]


# ---- the checks ----


def check_envs(envs: Any, field: str) -> Dict[str, str]:
    """envs when every name, value and the total obey the control plane's rules; otherwise names the variable."""
    if not isinstance(envs, dict):
        raise invalid_field(field, "must be a map of names to strings")
    if len(envs) > _MAX_ENVS:
        raise invalid_field(field, f"has {len(envs)} variables; at most {_MAX_ENVS}")
    size = 0
    for name in js_keys(envs):
        value = envs[name]
        if not _ENV_NAME.fullmatch(name):
            raise invalid_field(f"{field}.{name}", "must be a name like [A-Za-z_][A-Za-z0-9_]* of at most 128 characters")
        if not isinstance(value, str):
            raise invalid_field(f"{field}.{name}", "must be a string")
        if "\0" in value:
            raise invalid_field(f"{field}.{name}", "must not contain NUL")
        size += utf8_length(name) + utf8_length(value)
    if size > _MAX_ENVS_BYTES:
        raise invalid_field(field, f"holds {size} bytes of names and values; at most {_MAX_ENVS_BYTES}")
    return envs


def _shell_quote(word: str) -> str:
    return word if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", word) else "'" + word.replace("'", "'\\''") + "'"


def shell_join(argv: List[str]) -> str:
    """An exec-form argv as the one shell command line that runs exactly it."""
    return " ".join(_shell_quote(a) for a in argv)


def _default_name(step: Spec) -> str:
    """A step's name when none is given: the Dockerfile instruction that means it, so both forms name steps alike."""
    text = f"RUN {step['cmd']}" if step["kind"] == "run" else "COPY " + " ".join([*step["src"], step["dest"]])
    line = js_trim(re.sub(f"[{_WS}]+", " ", text))
    return f"{js_slice(line, _MAX_STEP_NAME - 1)}…" if js_length(line) > _MAX_STEP_NAME else line


def _check_cmd(cmd: Any, field: str) -> str:
    if isinstance(cmd, list):
        if len(cmd) == 0 or not all(isinstance(a, str) for a in cmd):
            raise invalid_field(field, "an exec form must be a non-empty list of strings")
        text = shell_join(cmd)
    elif isinstance(cmd, str):
        text = cmd
    else:
        raise invalid_field(field, "must be a command line (a string) or an exec form (a list of strings)")
    if js_trim(text) == "":
        raise invalid_field(field, "must not be empty")
    if js_length(text) > _MAX_CMD:
        raise invalid_field(field, f"is {js_length(text)} characters; at most {_MAX_CMD}")
    if "\0" in text:
        raise invalid_field(field, "must not contain NUL")
    return text


def _check_user(user: Any, field: str, rule: "re.Pattern[str]" = _STEP_USER) -> str:
    if not isinstance(user, str) or not rule.fullmatch(user):
        raise invalid_field(field, f"must be a user name like [a-z_][a-z0-9_-]* (at most 64){'' if rule is _USER else ' or a uid'}")
    return user


def _check_abs_path(path: Any, field: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise invalid_field(field, "must be an absolute path")
    if js_length(path) > _MAX_PATH or "\0" in path:
        raise invalid_field(field, f"must be at most {_MAX_PATH} characters without NUL")
    # JavaScript's `.` matches no line terminator.
    return re.sub("([^\n\r\u2028\u2029])/+\\Z", r"\1", posix_normalize(path), count=1)


def _check_src(src: str, field: str) -> str:
    """A copy source: relative to the context and inside it (symlinks are checked where the context is read)."""
    if src == "" or "\0" in src or js_length(src) > _MAX_PATH:
        raise invalid_field(field, f"must be a path of 1…{_MAX_PATH} characters without NUL")
    if src.startswith("/"):
        raise invalid_field(field, f"'{src}' is absolute: a copy source is a path inside the build context")
    norm = posix_normalize(src)
    if norm == ".." or norm.startswith("../"):
        raise invalid_field(field, f"'{src}' leaves the build context")
    if re.search(r"[*?\[]", src):
        raise invalid_field(field, f"'{src}': wildcards are not supported; name the file or directory")
    return re.sub(r"/+\Z", "", norm) or "."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(value: Any, field: str, low: int, high: int) -> int:
    # JavaScript has one number type: 512.0 is the integer 512.
    if not _is_number(value) or (isinstance(value, float) and not value.is_integer()) or value < low or value > high:
        raise invalid_field(field, f"must be an integer from {low} to {high}")
    return int(value)


def _check_network(value: Any, field: str) -> Dict[str, List[str]]:
    if not isinstance(value, dict):
        raise invalid_field(field, "must be { allow: [...], deny: [...] }")
    out: Dict[str, List[str]] = {"allow": [], "deny": []}
    for key in js_keys(value):
        rules = value[key]
        if key not in ("allow", "deny"):
            raise invalid_field(f"{field}.{key}", "is not a policy field; a policy has allow and deny")
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
            raise invalid_field(f"{field}.{key}", "must be a list of rules (strings)")
        out[key] = rules
    return out


def _check_secrets(value: Any, field: str) -> List[str]:
    if not isinstance(value, list):
        raise invalid_field(field, "must be a list of secret names")
    for i, s in enumerate(value):
        if not isinstance(s, str) or not _SECRET_NAME.fullmatch(s):
            raise invalid_field(f"{field}[{i}]", "must be a secret name like [A-Z_][A-Z0-9_]*")
    return value


def _check_from(value: Any, field: str) -> str:
    if not isinstance(value, str) or value == "":
        raise invalid_field(field, "must name the Sandglass template to build from (e.g. base)")
    # Registry hosts, repository paths, tags and digests are what an OCI reference has and a template name cannot.
    if re.search(r"[/:@]", value):
        raise invalid_field(
            field,
            f"'{value}' is an OCI image: Sandglass builds from its own templates (snapshots of its VMs), not container images. "
            "It runs no container runtime and pulls nothing at build time; name a Sandglass template (base, or one you built) and install what the image held with RUN steps",
        )
    if not _FROM_NAME.fullmatch(value):
        raise invalid_field(field, f"'{value}' is not a template name or id ([A-Za-z0-9._-], at most 64)")
    return value


def _check_steps(n: int, field: str) -> None:
    if n > _MAX_STEPS:
        raise invalid_field(field, f"has {n} steps; at most {_MAX_STEPS}")


def _check_ready(value: Any, field: str) -> Spec:
    r = _as_map(value, field, ("cmd", "timeoutS", "intervalMs"))
    return {
        "cmd": _check_cmd(r.get("cmd"), f"{field}.cmd"),
        "timeoutS": READY_TIMEOUT_DEFAULT_S if "timeoutS" not in r else _check_int(r["timeoutS"], f"{field}.timeoutS", 1, READY_TIMEOUT_MAX_S),
        "intervalMs": _READY_INTERVAL_DEFAULT_MS if "intervalMs" not in r else _check_int(r["intervalMs"], f"{field}.intervalMs", 50, 60_000),
    }


def _as_map(value: Any, field: str, keys: Tuple[str, ...]) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid_field(field, "must be a map")
    for key in js_keys(value):
        if key not in keys:
            raise invalid_field(f"{field}.{key}", f"is not a field here; expected one of {', '.join(keys)}")
    return value


def check_name(name: Any, field: str) -> str:
    if not isinstance(name, str) or not TEMPLATE_NAME.fullmatch(name):
        raise invalid_field(field, "must be 1–64 of lower-case letters, digits, '.', '_' and '-', starting with a letter or digit")
    return name


# ---- YAML, read as the `yaml` package reads it: YAML 1.2's core schema, unique keys, at most 100 aliases ----

_TOP_KEYS = ("name", "from", "memoryMib", "vcpus", "diskMib", "envs", "user", "workdir", "network", "secrets", "steps", "start")
_STEP_KINDS = ("run", "copy")
_STEP_KEYS = ("name", *_STEP_KINDS, "user", "workdir", "envs")
_MAX_ALIASES = 100


def _yaml_load(text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise invalid_field("file", "is YAML, which needs PyYAML (Debian: apt-get install python3-yaml); or pass the spec as a dict, or a Dockerfile") from None

    class Loader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > _MAX_ALIASES:
                    raise yaml.MarkedYAMLError(problem="excessive alias count", problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def flatten_mapping(self, node: Any) -> None:
            # YAML 1.2 has no merge key: `<<` is a key like any other.
            return None

        def construct_mapping(self, node: Any, deep: bool = False) -> Dict[Any, Any]:
            out: Dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (list, dict)):
                    raise yaml.MarkedYAMLError(problem="a key must be a scalar", problem_mark=key_node.start_mark)
                name = _js_key(key)
                if name in out:
                    raise yaml.MarkedYAMLError(problem="Map keys must be unique", problem_mark=key_node.start_mark)
                out[name] = self.construct_object(value_node, deep=deep)
            return out

    Loader.yaml_implicit_resolvers = {}
    core: List[Tuple[str, str, str]] = [
        ("tag:yaml.org,2002:null", r"(?:~|[Nn]ull|NULL)?", "~nN"),
        ("tag:yaml.org,2002:bool", r"(?:[Tt]rue|TRUE|[Ff]alse|FALSE)", "tTfF"),
        ("tag:yaml.org,2002:int", r"(?:0o[0-7]+|[-+]?[0-9]+|0x[0-9a-fA-F]+)", "-+0123456789"),
        (
            "tag:yaml.org,2002:float",
            r"(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN|[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*))",
            "-+.0123456789",
        ),
    ]
    for tag, pattern, first in core:
        Loader.add_implicit_resolver(tag, re.compile(f"^{pattern}\\Z"), list(first) + ([""] if tag.endswith("null") else []))

    def core_int(loader: Any, node: Any) -> int:
        v = loader.construct_scalar(node)
        return int(v[2:], 8) if v.startswith("0o") else int(v[2:], 16) if v.startswith("0x") else int(v, 10)

    def core_float(loader: Any, node: Any) -> float:
        v = loader.construct_scalar(node)
        if v.lower().endswith("inf"):
            return -math.inf if v.startswith("-") else math.inf
        return math.nan if v.lower() == ".nan" else float(v)

    Loader.add_constructor("tag:yaml.org,2002:int", core_int)
    Loader.add_constructor("tag:yaml.org,2002:float", core_float)
    Loader.add_constructor("tag:yaml.org,2002:bool", lambda loader, node: loader.construct_scalar(node) in ("true", "True", "TRUE"))
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 — a SafeLoader with YAML 1.2's core schema
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise invalid_field(f"line {line}", f"not valid YAML: {(err.problem or err.context or 'cannot be read').splitlines()[0]}") from None
    except yaml.YAMLError as err:
        raise invalid_field("line 1", f"not valid YAML: {str(err).splitlines()[0]}") from None


def _js_key(key: Any) -> str:
    """A scalar map key as JavaScript's object key (the `yaml` package's toJS stringifies them)."""
    if key is None:
        return ""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        if key.is_integer() and abs(key) < 1e21:
            return str(int(key))
        return "NaN" if key != key else "Infinity" if key == math.inf else "-Infinity" if key == -math.inf else repr(key)
    return str(key)


def parse_template_yaml(text: str) -> Spec:
    """Reads `sandglass.template.yaml` (text) into {"spec", "name"?, "notes"}; a bad field is invalid_argument naming it."""
    doc = _yaml_load(text)
    top = _as_map({} if doc is None else doc, "spec", _TOP_KEYS)
    if "from" not in top:
        raise invalid_field("from", "is required: the template to build from (e.g. base)")
    name = None if "name" not in top else check_name(top["name"], "name")
    envs = {} if "envs" not in top else dict(check_envs(top["envs"], "envs"))
    user = "root" if "user" not in top else _check_user(top["user"], "user", _USER)
    workdir = "/" if "workdir" not in top else _check_abs_path(top["workdir"], "workdir")
    raw_steps = top.get("steps")
    if raw_steps is None:
        raw_steps = []
    if not isinstance(raw_steps, list):
        raise invalid_field("steps", "must be a list of steps")
    _check_steps(len(raw_steps), "steps")
    steps = [_yaml_step(raw, f"steps[{i}]", envs) for i, raw in enumerate(raw_steps)]
    spec: Spec = {"from": _check_from(top["from"], "from"), "envs": envs, "user": user, "workdir": workdir, "steps": steps}
    if "memoryMib" in top:
        spec["memoryMib"] = _check_int(top["memoryMib"], "memoryMib", 128, 1_048_576)
    if "vcpus" in top:
        spec["vcpus"] = _check_int(top["vcpus"], "vcpus", 1, 256)
    if "diskMib" in top:
        spec["diskMib"] = _check_int(top["diskMib"], "diskMib", 1024, 65_536)
    if "network" in top:
        spec["network"] = _check_network(top["network"], "network")
    if "secrets" in top:
        spec["secrets"] = _check_secrets(top["secrets"], "secrets")
    if "start" in top:
        s = _as_map(top["start"], "start", ("cmd", "user", "workdir", "ready"))
        start: Spec = {
            "cmd": _check_cmd(s.get("cmd"), "start.cmd"),
            "user": user if "user" not in s else _check_user(s["user"], "start.user"),
            "workdir": workdir if "workdir" not in s else _check_abs_path(s["workdir"], "start.workdir"),
        }
        if "ready" in s:
            start["ready"] = _check_ready(s["ready"], "start.ready")
        spec["start"] = start
    out: Spec = {"spec": spec, "notes": []}
    if name is not None:
        out["name"] = name
    return out


def _yaml_step(raw: Any, field: str, envs: Dict[str, str]) -> Spec:
    if isinstance(raw, dict):
        kinds = [k for k in js_keys(raw) if k not in _STEP_KEYS]
        if kinds and not any(k in raw for k in _STEP_KINDS):
            raise invalid_field(f"{field}.{kinds[0]}", f"unknown step kind '{kinds[0]}'; a step is one of {', '.join(_STEP_KINDS)}")
    s = _as_map(raw, field, _STEP_KEYS)
    present = [k for k in _STEP_KINDS if k in s]
    if len(present) != 1:
        raise invalid_field(field, f"a step has exactly one of {', '.join(_STEP_KINDS)}{', not ' + ' and '.join(present) if present else ''}")
    user = "root" if "user" not in s else _check_user(s["user"], f"{field}.user", _OWNER if present[0] == "copy" else _STEP_USER)
    explicit_name = None if "name" not in s else _check_step_name(s["name"], f"{field}.name")
    if present[0] == "run":
        step: Spec = {
            "kind": "run",
            "cmd": _check_cmd(s["run"], f"{field}.run"),
            "user": user,
            "workdir": "/" if "workdir" not in s else _check_abs_path(s["workdir"], f"{field}.workdir"),
            "envs": dict(envs) if "envs" not in s else check_envs({**envs, **check_envs(s["envs"], f"{field}.envs")}, f"{field}.envs"),
        }
        return {**step, "name": explicit_name if explicit_name is not None else _default_name(step)}
    if "workdir" in s:
        raise invalid_field(f"{field}.workdir", "a copy step has no working directory: give an absolute dest")
    if "envs" in s:
        raise invalid_field(f"{field}.envs", "a copy step runs no command")
    c = _as_map(s["copy"], f"{field}.copy", ("src", "dest"))
    raw_src = [c["src"]] if isinstance(c.get("src"), str) else c.get("src")
    if not isinstance(raw_src, list) or len(raw_src) == 0 or not all(isinstance(x, str) for x in raw_src):
        raise invalid_field(f"{field}.copy.src", "must be a path in the build context, or a non-empty list of them")
    single = len(raw_src) == 1 and isinstance(c["src"], str)
    src = [_check_src(x, f"{field}.copy.src" if single else f"{field}.copy.src[{i}]") for i, x in enumerate(raw_src)]
    dest = _copy_dest(c.get("dest"), f"{field}.copy.dest", src)
    step = {"kind": "copy", "src": src, "dest": dest, "user": user}
    return {**step, "name": explicit_name if explicit_name is not None else _default_name(step)}


def _copy_dest(dest: Any, field: str, src: List[str]) -> str:
    path = _check_abs_path(dest, field)
    # Several sources go into a directory, as in Docker; a trailing '/' says "into", so it is kept through normalizing.
    if len(src) > 1 and not dest.endswith("/"):
        raise invalid_field(field, "must end with / when several sources are copied into it")
    return f"{path}/" if dest.endswith("/") and path != "/" else path


def _check_step_name(name: Any, field: str) -> str:
    if not isinstance(name, str) or js_trim(name) == "" or js_length(name) > _MAX_STEP_NAME:
        raise invalid_field(field, f"must be 1–{_MAX_STEP_NAME} characters")
    return name


# ---- the Dockerfile subset ----


def _instructions(text: str) -> List[Tuple[str, str, int]]:
    """The instructions (keyword, arguments, first line): comments dropped, `\\` continuations joined (comment lines
    inside them skipped)."""
    out: List[Tuple[str, str, int]] = []
    lines = re.split(r"\r?\n", text)
    cont = re.compile(f"\\\\[{_WS}]*\\Z")
    i = 0
    while i < len(lines):
        first = lines[i]
        if re.match(f"[{_WS}]*(#|\\Z)", first):
            i += 1
            continue
        start = i + 1
        body = first
        while cont.search(body) and i + 1 < len(lines):
            body = cont.sub("", body, count=1)
            i += 1
            nxt = lines[i]
            if re.match(f"[{_WS}]*#", nxt):
                body += "\\"
                continue
            body += nxt
        body = cont.sub("", body, count=1)
        m = re.fullmatch(f"[{_WS}]*([A-Za-z]+)(?:[{_WS}]+([\\s\\S]*))?", body)
        if not m:
            raise invalid_field(f"line {start}", f"'{js_slice(js_trim(first), 60)}' is not an instruction")
        out.append((m.group(1).upper(), js_trim(m.group(2) or ""), start))
        i += 1
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _exec_form(args: str, field: str) -> Optional[List[str]]:
    """An exec form (`["a", "b"]`) as its argv, or None for a shell form."""
    if not args.startswith("["):
        return None
    try:
        argv = json.loads(args, parse_constant=_reject_constant)
    except ValueError:
        # Docker reads a '[' that is not a JSON array as a shell form, and so does this.
        return None
    if not isinstance(argv, list) or len(argv) == 0 or not all(isinstance(a, str) for a in argv):
        raise invalid_field(field, "an exec form must be a non-empty JSON list of strings")
    return argv


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_IS_WS = re.compile(f"[{_WS}]")


def _words(args: str, env: Dict[str, str], field: str) -> List[str]:
    """Docker's words: whitespace-separated, with '…', "…" and \\ escapes, and $VAR / ${VAR} from `env` outside single
    quotes."""
    out: List[str] = []
    cur = ""
    in_word = False
    quote = ""
    i = 0
    n = len(args)
    while i < n:
        c = args[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                cur += c
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            i += 1
            cur += args[i]
            in_word = True
            i += 1
            continue
        if c == "$":
            m = _VAR.match(args, i)
            if m:
                cur += env.get(m.group(1) or m.group(2), "")
                i = m.end()
                in_word = True
                continue
        if quote == '"':
            if c == '"':
                quote = ""
            else:
                cur += c
            i += 1
            continue
        if c in ("'", '"'):
            quote = c
            in_word = True
            i += 1
            continue
        if _IS_WS.match(c):
            if in_word:
                out.append(cur)
            cur = ""
            in_word = False
            i += 1
            continue
        cur += c
        in_word = True
        i += 1
    if quote:
        raise invalid_field(field, f"an unterminated {quote} quote")
    if in_word:
        out.append(cur)
    return out


def _flags(args: str) -> Tuple[List[Tuple[str, str]], str]:
    """`--flag=value` options at the front of an instruction's arguments, and what follows them."""
    found: List[Tuple[str, str]] = []
    rest = args
    flag = re.compile(f"--([a-z-]+)(?:=([^{_WS}]*))?[{_WS}]*")
    while True:
        m = flag.match(rest)
        if not m:
            return found, rest
        found.append((m.group(1), m.group(2) or ""))
        rest = rest[m.end() :]


_IGNORED = ("ARG", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL", "VOLUME")
_REFUSED = {
    "ADD": "ADD fetches URLs and unpacks archives, which a build from a local context does not do: use COPY",
    "ONBUILD": "ONBUILD triggers are not supported",
    "SHELL": "SHELL is not supported: RUN steps run with /bin/bash -c",
}
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _duration_ms(text: str, field: str) -> int:
    """A Docker duration such as 30s, 1m30s or 500ms, in milliseconds."""
    part = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
    ms = 0.0
    at = 0
    m = part.match(text, at)
    while m:
        ms += float(m.group(1)) * _UNIT_MS[m.group(2)]
        at = m.end()
        m = part.match(text, at)
    if text == "" or at != len(text):
        raise invalid_field(field, f"'{text}' is not a duration like 30s or 1m30s")
    # Math.round: halves go up.
    return int(math.floor(ms + 0.5))


def parse_dockerfile(text: str) -> Spec:
    """Reads the Dockerfile subset that maps onto a template: FROM (a Sandglass template), RUN, COPY [--chown], ENV,
    WORKDIR, USER, CMD/ENTRYPOINT (the start command) and HEALTHCHECK CMD (its ready check). ARG, EXPOSE and LABEL are
    ignored with a note; anything else is refused naming its line."""
    notes: List[str] = []
    from_: Optional[str] = None
    envs: Dict[str, str] = {}
    user = "root"
    workdir = "/"
    steps: List[Spec] = []
    cmd: Any = None
    entrypoint: Any = None
    ready: Optional[Spec] = None
    for keyword, args, line in _instructions(text):
        field = f"line {line}"
        if from_ is None and keyword not in ("FROM", "ARG"):
            raise invalid_field(field, f"{keyword} before FROM: a Dockerfile starts with FROM <template>")
        if keyword in _IGNORED:
            why = "every guest port is reachable through the gateway" if keyword == "EXPOSE" else "it has no meaning for a template"
            notes.append(f"{field}: {keyword} ignored ({why})")
            continue
        if keyword in _REFUSED:
            raise invalid_field(field, _REFUSED[keyword])
        if args == "" and keyword != "RUN":
            raise invalid_field(field, f"{keyword} needs arguments")
        if keyword == "FROM":
            if from_ is not None:
                raise invalid_field(field, "a second FROM: multi-stage builds are not supported")
            f, rest = _flags(args)
            if f:
                raise invalid_field(field, f"FROM --{f[0][0]} is not supported")
            w = _words(rest, {}, field)
            if len(w) != 1 and not (len(w) == 3 and w[1].upper() == "AS"):
                raise invalid_field(field, "FROM takes one template name (and optionally AS <stage>)")
            from_ = _check_from(w[0] if w else None, field)
        elif keyword == "RUN":
            f, rest = _flags(args)
            if f:
                raise invalid_field(field, f"RUN --{f[0][0]} is not supported")
            if re.match(r"<<-?[\"']?[A-Za-z_]", rest):
                raise invalid_field(field, "heredocs are not supported: put the script in a file and COPY it, or use one RUN line")
            argv = _exec_form(rest, field)
            run: Spec = {"kind": "run", "cmd": _check_cmd(argv if argv is not None else rest, field), "user": user, "workdir": workdir, "envs": dict(envs)}
            steps.append({**run, "name": _default_name(run)})
        elif keyword == "COPY":
            f, rest = _flags(args)
            owner = "root"
            for flag, value in f:
                if flag != "chown":
                    raise invalid_field(field, f"COPY --{flag} is not supported{' (multi-stage builds are not)' if flag == 'from' else ''}")
                owner_words = _words(value, envs, field)
                owner = _check_user(owner_words[0] if owner_words else "", field, _OWNER)
            parts = _exec_form(rest, field)
            if parts is None:
                parts = _words(rest, envs, field)
            if len(parts) < 2:
                raise invalid_field(field, "COPY takes one or more sources and a destination")
            src = [_check_src(s, field) for s in parts[:-1]]
            raw_dest = parts[-1]
            # A relative destination is under WORKDIR, as in Docker.
            absolute = raw_dest if raw_dest.startswith("/") else posix_join(workdir, raw_dest) + ("/" if raw_dest.endswith("/") else "")
            copy: Spec = {"kind": "copy", "src": src, "dest": _copy_dest(absolute, field, src), "user": owner}
            steps.append({**copy, "name": _default_name(copy)})
        elif keyword == "ENV":
            w = _words(args, envs, field)
            pairs: List[Tuple[str, str]] = []
            if "=" in w[0]:
                for kv in w:
                    eq = kv.find("=")
                    if eq <= 0:
                        raise invalid_field(field, f"'{kv}' is not NAME=value")
                    pairs.append((kv[:eq], kv[eq + 1 :]))
            else:
                # The legacy form: one name, then the rest of the line as its value.
                pairs.append((w[0], js_trim(args[args.find(w[0]) + len(w[0]) :])))
            for k, v in pairs:
                if not _ENV_NAME.fullmatch(k):
                    raise invalid_field(field, f"'{k}' is not a variable name")
                envs[k] = v
            check_envs(envs, field)
        elif keyword == "WORKDIR":
            w = _words(args, envs, field)
            if len(w) != 1:
                raise invalid_field(field, "WORKDIR takes one path")
            workdir = _check_abs_path(posix_resolve(workdir, w[0]), field)
        elif keyword == "USER":
            w = _words(args, envs, field)
            if len(w) != 1 or ":" in w[0]:
                raise invalid_field(field, "USER takes one user name (a group is not supported)")
            user = _check_user(w[0], field, _USER)
        elif keyword in ("CMD", "ENTRYPOINT"):
            form = _exec_form(args, field)
            value: Any = form if form is not None else args
            if keyword == "CMD":
                cmd = value
            else:
                entrypoint = value
                # Docker resets CMD when ENTRYPOINT is set after it.
                cmd = None
        elif keyword == "HEALTHCHECK":
            f, rest = _flags(args)
            if re.fullmatch("NONE", rest, re.I | re.A):
                ready = None
                continue
            m = re.fullmatch(f"CMD[{_WS}]+([\\s\\S]+)", rest, re.I | re.A)
            if not m:
                raise invalid_field(field, "HEALTHCHECK takes CMD <command> or NONE")
            interval_ms = _READY_INTERVAL_DEFAULT_MS
            timeout_s = READY_TIMEOUT_DEFAULT_S
            for flag, value in f:
                if flag == "interval":
                    interval_ms = _check_int(_duration_ms(value, field), field, 50, 60_000)
                elif flag == "start-period":
                    timeout_s = _check_int(math.ceil(_duration_ms(value, field) / 1000), field, 1, READY_TIMEOUT_MAX_S)
                else:
                    notes.append(f"{field}: HEALTHCHECK --{flag} ignored (the ready check runs until it passes or the start period ends)")
            form = _exec_form(m.group(1), field)
            ready = {"cmd": _check_cmd(form if form is not None else m.group(1), field), "timeoutS": timeout_s, "intervalMs": interval_ms}
        else:
            raise invalid_field(field, f"{keyword} is not in the supported subset (FROM, RUN, COPY, ENV, WORKDIR, USER, CMD, ENTRYPOINT, HEALTHCHECK)")
        _check_steps(len(steps), field)
    if from_ is None:
        raise invalid_field("from", "the Dockerfile has no FROM <template>")
    spec: Spec = {"from": from_, "envs": envs, "user": user, "workdir": workdir, "steps": steps}
    start = _start_command(entrypoint, cmd)
    if start is not None:
        spec["start"] = {"cmd": _check_cmd(start, "start.cmd"), "user": user, "workdir": workdir, **({"ready": ready} if ready else {})}
    elif ready:
        raise invalid_field("start.ready", "HEALTHCHECK without CMD or ENTRYPOINT: there is nothing to check")
    return {"spec": spec, "notes": notes}


def _start_command(entrypoint: Any, cmd: Any) -> Any:
    """ENTRYPOINT and CMD as Docker combines them: exec forms concatenate; a shell-form ENTRYPOINT ignores CMD."""
    if entrypoint is None:
        return cmd
    if isinstance(entrypoint, str) or cmd is None:
        return entrypoint
    return [*entrypoint, *(["/bin/sh", "-c", cmd] if isinstance(cmd, str) else cmd)]


def parse_template_file(file_name: str, text: str) -> Spec:
    """Reads a spec file by its name: a Dockerfile (`Dockerfile`, `e2b.Dockerfile`, `*.Dockerfile`) or YAML."""
    base = posix_basename(file_name.replace("\\", "/"))
    dockerfile = re.search(r"(^|\.)Dockerfile\Z", base, re.I | re.A) or re.match(r"Dockerfile\.", base, re.I | re.A)
    return parse_dockerfile(text) if dockerfile else parse_template_yaml(text)

