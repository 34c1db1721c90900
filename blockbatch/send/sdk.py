"""The ``anthropic`` SDK, loaded on first use.

Importing ``anthropic`` costs about 2.7 s of CPU on a small machine (its thousands of
pydantic types), three quarters of what the CLI spends starting. Most commands
(``status``, ``list``, ``review``, ``export``, ``cancel`` …) never call Claude, yet the front
doors hold what may: the client factory (blockbatch/runtime/claude.py), the endpoint
question (blockbatch/send/endpoint.py), the Models API read (blockbatch/runtime/models_api.py) and
the quote's token counts. Every module of ours refers to the SDK through :data:`anthropic`
here, a module that :class:`importlib.util.LazyLoader` executes the first time an attribute
is read (a client is built, an ``except anthropic.APIError`` clause meets an exception);
type names come from ``anthropic`` under ``TYPE_CHECKING`` only.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _lazy(name: str) -> ModuleType:
    """``name`` as found in ``sys.modules``, else a module that loads on first use."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"{name} is not installed: run `make install`")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


if TYPE_CHECKING:
    # The type checker reads the real module: its names type our annotations.
    import anthropic
else:
    anthropic = _lazy("anthropic")


async def vertex_access_token(client: Any) -> str:
    """The access token an ``AsyncAnthropicVertex`` client sends, refreshed as it refreshes
    it (``ANTHROPIC_VERTEX_ACCESS_TOKEN``, or Application Default Credentials).

    Vertex batch prediction jobs and their Cloud Storage files are called over plain HTTP
    with the same credentials as the run's Messages calls. The SDK keeps the token behind
    ``_ensure_access_token`` (public in no release, anthropic 2.x); this is the one place
    that reaches it, so an SDK that renames it breaks here, loudly.
    """
    token: str = await client._ensure_access_token()
    return token
