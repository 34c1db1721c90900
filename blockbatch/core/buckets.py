"""Where a provider's batch jobs keep their JSONL: a bucket and a key prefix in an object
store (S3 for Bedrock, Cloud Storage for Vertex), parsed from the URI a worker is given."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Self


@dataclass(frozen=True)
class BucketLocation:
    """A bucket and a key prefix; a subclass names its store (its class variables)."""

    bucket: str
    prefix: str

    #: The store's URI scheme, what its URIs are called in a message, the pattern of one,
    #: the variable a worker sets it in, and the error a malformed one raises.
    scheme: ClassVar[str]
    kind: ClassVar[str]
    pattern: ClassVar[re.Pattern[str]]
    setting: ClassVar[str]
    error: ClassVar[type[ValueError]]

    @classmethod
    def parse(cls, uri: str, name: str | None = None) -> Self:
        """``<scheme>://bucket/prefix`` (the prefix may be empty); ``name`` is what the
        message calls the value (default :attr:`setting`).

        Raises:
            ValueError: :attr:`error`, not a URI of this store.
        """
        match = cls.pattern.match(uri.strip())
        if match is None:
            raise cls.error(
                f"{name or cls.setting} must be {cls.kind} like "
                f"{cls.scheme}://my-bucket/blockbatch (got {uri!r})"
            )
        return cls(match["bucket"], (match["prefix"] or "").strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def uri(self, *parts: str) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key(*parts)}"
