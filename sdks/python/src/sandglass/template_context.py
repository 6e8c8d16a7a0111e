"""A template build's context: a copy step's sources read from under the context directory (never outside it), their
digest, and the deterministic tar that uploads them; byte for byte the TypeScript SDK's (template-context.ts), so a
copy step has the same key from either SDK."""
from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from .template_spec import invalid_field, js_slice, js_sorted_keys, js_utf8, posix_basename, posix_resolve, utf8_length


@dataclass(frozen=True)
class TarEntry:
    """One archive member: a path relative to where the archive is extracted, and where its bytes come from here."""

    path: str
    type: str  # file, dir or symlink
    mode: int
    size_bytes: int
    # The file to read (files only), and its identity when it was checked: what is read later must be that same file.
    source: Optional[str] = None
    inode: Optional[Tuple[int, int]] = None
    # The link's target as written (symlinks only).
    link_target: Optional[str] = None


@dataclass(frozen=True)
class CollectedCopy:
    entries: List[TarEntry]
    # sha256 (hex) of the deterministic archive: sorted paths, types, modes, contents and link targets, nothing else.
    digest: str
    # The step copies one file (not into a directory): its dest may name the file itself.
    single_file: bool


@dataclass(frozen=True)
class CopyPlan:
    """Where a copy lands: the directory the archive is extracted into and the top-level names it writes there."""

    target_dir: str
    entries: List[TarEntry]
    roots: List[str] = field(default_factory=list)


# The gateway's PUT files/tar limit.
_MAX_ENTRIES = 1_000_000
_BLOCK = 512
_READ = 65536


def _inside(root: str, path: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _code(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, str(err.errno))


def _realpath(path: str) -> str:
    """The path with every symlink resolved; OSError when it does not exist (os.path.realpath would answer anyway)."""
    os.stat(path)
    return os.path.realpath(path)


def _checked_name(name: str, where: str, rel: str) -> str:
    # Node reads names as UTF-8; a name that is not cannot be sent under its own name.
    if any("\udc80" <= ch <= "\udcff" for ch in name):
        raise invalid_field(where, f"'{rel}' has a name that is not UTF-8")
    return name


def collect_copy(context: str, src: List[str], field_name: str) -> CollectedCopy:
    """Reads a copy step's sources under `context`: anything that resolves outside it (a `..`, an absolute path, a
    symlink whose target leaves it, a path through such a symlink) is invalid_argument naming `field_name`."""
    try:
        root = _realpath(os.path.abspath(context))
    except OSError:
        raise invalid_field("context", f"'{context}' is not a directory that can be read") from None
    if not os.path.isdir(root):
        raise invalid_field("context", f"'{context}' is not a directory")
    by_path: Dict[str, TarEntry] = {}
    single_file = len(src) == 1
    for i, s in enumerate(src):
        where = field_name if len(src) == 1 else f"{field_name}[{i}]"

        def add(e: TarEntry, where: str = where) -> None:
            by_path[e.path] = e
            if len(by_path) > _MAX_ENTRIES:
                raise invalid_field(where, f"copies more than {_MAX_ENTRIES} entries")

        lexical = posix_resolve(root, s)
        if s.startswith("/") or not _inside(root, lexical):
            raise invalid_field(where, f"'{s}' is outside the build context")
        try:
            real = _realpath(lexical)
        except OSError as err:
            why = f"'{s}' does not exist in the build context" if err.errno == errno.ENOENT else f"'{s}' cannot be read ({_code(err)})"
            raise invalid_field(where, why) from None
        if not _inside(root, real):
            raise invalid_field(where, f"'{s}' resolves to {real}, outside the build context")
        st = os.stat(real)
        if stat.S_ISDIR(st.st_mode):
            single_file = False
            _walk(root, real, "", add, where)
        elif stat.S_ISREG(st.st_mode):
            add(TarEntry(posix_basename(lexical), "file", st.st_mode & 0o7777, st.st_size, real, (st.st_dev, st.st_ino)))
        else:
            raise invalid_field(where, f"'{s}' is not a file or directory")
    entries = [by_path[p] for p in js_sorted_keys(by_path)]
    digest = hashlib.sha256()
    for chunk in tar_stream(entries):
        digest.update(chunk)
    return CollectedCopy(entries, digest.hexdigest(), single_file)


def _walk(root: str, directory: str, prefix: str, add: Callable[[TarEntry], None], where: str) -> None:
    for name in js_sorted_keys(os.listdir(directory)):
        abs_path = os.path.join(directory, name)
        rel = os.path.relpath(abs_path, root)
        path = _checked_name(name, where, rel) if prefix == "" else f"{prefix}/{_checked_name(name, where, rel)}"
        st = os.lstat(abs_path)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(abs_path)
            # A dangling link resolves as written; either way its target must stay inside the context.
            try:
                resolved = _realpath(abs_path)
            except OSError:
                resolved = posix_resolve(directory, target)
            if not _inside(root, resolved):
                raise invalid_field(where, f"'{rel}' is a symlink to {target}, outside the build context")
            add(TarEntry(path, "symlink", 0o777, 0, link_target=target))
        elif stat.S_ISDIR(st.st_mode):
            add(TarEntry(path, "dir", st.st_mode & 0o7777, 0))
            _walk(root, abs_path, path, add, where)
        elif stat.S_ISREG(st.st_mode):
            add(TarEntry(path, "file", st.st_mode & 0o7777, st.st_size, abs_path, (st.st_dev, st.st_ino)))
        else:
            raise invalid_field(where, f"'{rel}' is not a file, directory or symlink")


def plan_copy(collected: CollectedCopy, dest: str, dest_is_dir: bool) -> CopyPlan:
    """Where a copy lands, as Docker places it: a single file goes to `dest` itself unless dest ends in '/' or is a
    directory in the sandbox already (`dest_is_dir`), in which case it goes into it; a directory's contents go into dest."""
    if collected.single_file and not dest.endswith("/") and not dest_is_dir:
        name = posix_basename(dest)
        parent = dest[: dest.rfind("/")] or "/"
        return CopyPlan(parent, [replace(collected.entries[0], path=name)], [name])
    target_dir = dest.rstrip("/") if len(dest) > 1 else "/"
    roots = list(dict.fromkeys(e.path.split("/")[0] for e in collected.entries))
    return CopyPlan(target_dir, collected.entries, roots)


# ---- the tar writer: POSIX ustar, with pax records for what ustar cannot hold ----


def _octal(buf: bytearray, offset: int, length: int, value: int) -> None:
    digits = format(value, "o").rjust(length - 1, "0").encode("ascii")[: length - 1]
    buf[offset : offset + len(digits)] = digits
    buf[offset + length - 1] = 0


def _split_name(name: str) -> Optional[Tuple[str, str]]:
    """A name split into ustar's prefix (<= 155 bytes) and name (<= 100 bytes) at a '/', or None when it cannot be."""
    if utf8_length(name) <= 100:
        return "", name
    i = name.find("/")
    while i > 0:
        prefix, rest = name[:i], name[i + 1 :]
        if utf8_length(prefix) <= 155 and utf8_length(rest) <= 100 and rest != "":
            return prefix, rest
        i = name.find("/", i + 1)
    return None


def _put(buf: bytearray, offset: int, limit: int, data: bytes) -> None:
    part = data[:limit]
    buf[offset : offset + len(part)] = part


def _header(name: str, kind: str, mode: int, size: int, link_name: str = "") -> bytes:
    # A name ustar cannot hold is in the pax record before this header; the header keeps what fits.
    prefix, short = _split_name(name) or ("", name)
    h = bytearray(_BLOCK)
    _put(h, 0, 100, js_utf8(short))
    _octal(h, 100, 8, mode)
    _octal(h, 108, 8, 0)
    _octal(h, 116, 8, 0)
    _octal(h, 124, 12, size if size < 0o77777777777 else 0)
    # A fixed mtime: the archive, and so the step's key, depends on contents only.
    _octal(h, 136, 12, 0)
    h[148:156] = b"        "
    h[156:157] = kind.encode("ascii")
    _put(h, 157, 100, js_utf8(link_name))
    h[257:265] = b"ustar\x0000"
    _put(h, 345, 155, js_utf8(prefix))
    h[148:156] = format(sum(h), "o").rjust(6, "0").encode("ascii") + b"\x00 "
    return bytes(h)


def _pax_record(key: str, value: str) -> str:
    """A pax record, `<len> key=value\\n`, whose length counts its own digits."""
    body = f" {key}={value}\n"
    n = utf8_length(body) + 1
    while len(str(n)) + utf8_length(body) != n:
        n = len(str(n)) + utf8_length(body)
    return f"{n}{body}"


def _padding(size: int) -> bytes:
    return bytes((_BLOCK - size % _BLOCK) % _BLOCK)


def tar_stream(entries: List[TarEntry]) -> Iterator[bytes]:
    """The archive of `entries` in their order, as chunks; file contents are read as it is consumed, never held whole."""
    for e in entries:
        name = f"{e.path}/" if e.type == "dir" else e.path
        link = e.link_target or ""
        pax = "".join(
            [
                _pax_record("path", name) if _split_name(name) is None else "",
                _pax_record("linkpath", link) if utf8_length(link) > 100 else "",
                _pax_record("size", str(e.size_bytes)) if e.size_bytes >= 0o77777777777 else "",
            ]
        )
        if pax:
            body = js_utf8(pax)
            yield _header(js_slice(f"PaxHeaders/{posix_basename(e.path)}", 100), "x", 0o644, len(body))
            yield body
            yield _padding(len(body))
        kind = "0" if e.type == "file" else "5" if e.type == "dir" else "2"
        if e.type != "file":
            yield _header(name, kind, e.mode, 0, link)
            continue
        yield from _file_member(e, name, kind, link)
    yield bytes(_BLOCK * 2)


def _file_member(e: TarEntry, name: str, kind: str, link: str) -> Iterator[bytes]:
    assert e.source is not None
    # Not followed if it became a symlink, and refused if another file took its place since it was checked.
    try:
        fd = os.open(e.source, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise invalid_field("context", f"{e.source} cannot be read any more ({_code(err)})") from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if e.inode is not None and (now.st_dev, now.st_ino) != e.inode:
            raise invalid_field("context", f"{e.source} was replaced while the build read the context")
        yield _header(name, kind, e.mode, e.size_bytes, link)
        sent = 0
        while True:
            chunk = f.read(_READ)
            if not chunk:
                break
            sent += len(chunk)
            if sent > e.size_bytes:
                break
            yield chunk
        # The header promised this size: a file that changed since it was read would corrupt the archive.
        if sent != e.size_bytes:
            raise invalid_field("context", f"{e.source} changed while the build read it ({e.size_bytes} bytes, now {sent})")
    yield _padding(e.size_bytes)
