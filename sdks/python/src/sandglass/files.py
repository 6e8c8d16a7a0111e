"""`sandbox.files`: read and write text or bytes, tar a directory up or down, list, stat, remove, make directories."""
from __future__ import annotations

from typing import Any, BinaryIO, Dict, List, Literal, Optional, Union, overload

from ._http import DataPlane
from .errors import NotFoundError


class Files:
    def __init__(self, dp: DataPlane) -> None:
        self._dp = dp

    @overload
    def read(self, path: str) -> str: ...
    @overload
    def read(self, path: str, format: Literal['text']) -> str: ...
    @overload
    def read(self, path: str, format: Literal['bytes']) -> bytes: ...
    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """A file's content: text (UTF-8) by default, or format='bytes'."""
        data = self._dp.request("GET", "/files", query={"path": path}).read()
        return data if format == "bytes" else data.decode("utf-8")

    def write(self, path: str, data: Union[str, bytes], *, mode: Optional[int] = None) -> Dict[str, Any]:
        """Writes a whole file (its directories made), answering what was written."""
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return dict(self._dp.json("PUT", "/files", query={"path": path, "mode": mode}, body=body, timeout_s=None))

    def write_tar(self, dir: str, tar: Union[bytes, BinaryIO]) -> Dict[str, Any]:
        """Unpacks a tar archive (bytes, or a seekable binary file sent from its start) into a directory of the sandbox;
        answers {"entries", "sizeBytes"}."""
        return dict(self._dp.json("PUT", "/files/tar", query={"path": dir}, body=tar, content_type="application/x-tar", timeout_s=None))

    def read_tar(self, dir: str) -> bytes:
        """A directory of the sandbox as a tar archive."""
        return self._dp.request("GET", "/files/tar", query={"path": dir}, timeout_s=None).read()

    def list(self, path: str, *, depth: Optional[int] = None) -> List[Dict[str, Any]]:
        return list(self._dp.json("GET", "/files/list", query={"path": path, "depth": depth})["entries"])

    def stat(self, path: str) -> Dict[str, Any]:
        return dict(self._dp.json("GET", "/files/stat", query={"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError as err:
            if err.code == "file_not_found":
                return False
            raise

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._dp.request("DELETE", "/files", query={"path": path, "recursive": recursive or None}).read()

    def make_dir(self, path: str) -> bool:
        return bool(self._dp.json("POST", "/files/mkdir", json_body={"path": path})["created"])

    def rename(self, src: str, dst: str) -> None:
        self._dp.request("POST", "/files/rename", json_body={"from": src, "to": dst}).read()
