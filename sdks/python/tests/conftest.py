"""The Python SDK's tests run against the real server the integration suite starts (tests/python-sdk.test.ts passes
SANDGLASS_URL and SANDGLASS_API_KEY); one sandbox per test module, killed at the end."""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from sandglass import Sandbox


@pytest.fixture(scope="module")
def sbx() -> Iterator[Sandbox]:
    if not os.environ.get("SANDGLASS_URL"):
        pytest.fail("SANDGLASS_URL is not set: run these through tests/python-sdk.test.ts")
    sandbox = Sandbox.create(timeout_s=600)
    yield sandbox
    Sandbox.kill(sandbox.id)
