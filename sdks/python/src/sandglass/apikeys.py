"""`ApiKeys`: a tenant's API keys: create (the key is shown once), list (metadata only) and revoke; admin keys manage
their own tenant, the operator key every tenant."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Dict, List, Optional, Union

from ._http import ControlPlane, path_of, resolve_config
from ._time import iso_time


def _cp(api_url: Optional[str], api_key: Optional[str]) -> ControlPlane:
    return ControlPlane(resolve_config(api_url, api_key, None))


class ApiKeys:
    @staticmethod
    def create(
        *,
        role: Optional[str] = None,
        name: Optional[str] = None,
        tenant_id: Optional[str] = None,
        expires_in_s: Optional[int] = None,
        expires_at: Union[datetime, str, None] = None,
        format: Optional[str] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        """A new key of the caller's tenant (or, with the operator key, of tenant_id): role member (default), admin or
        operator; refused from expires_in_s seconds from now or from expires_at; format "e2b" gives `e2b_` + hex. The
        answer's "key" is the only time the key itself is shown."""
        body = {"role": role, "name": name, "tenantId": tenant_id, "expiresInS": expires_in_s, "expiresAt": None if expires_at is None else iso_time(expires_at, "expires_at"), "format": format}
        return dict(_cp(api_url, api_key).json("POST", "/v1/api-keys", json_body=body))

    @staticmethod
    def list(*, tenant_id: Optional[str] = None, api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[Dict[str, Any]]:
        """The keys of a tenant, oldest first, revoked and expired ones included; never the keys themselves."""
        return list(_cp(api_url, api_key).json("GET", "/v1/api-keys", query={"tenantId": tenant_id})["apiKeys"])

    @staticmethod
    def revoke(key_id: str, *, api_url: Optional[str] = None, api_key: Optional[str] = None) -> Dict[str, Any]:
        """Refuses the key from the next request on; revoking a revoked key changes nothing. An unknown id raises
        NotFoundError (api_key_not_found)."""
        return dict(_cp(api_url, api_key).json("DELETE", path_of("v1", "api-keys", key_id)))
