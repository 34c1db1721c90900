"""The search attributes blockbatch sets on its workflows: declared here, once.

Workflows set them (run, document, schema, model on a run; run and pack on every pack);
the front doors filter by them; ``blockbatch.runtime.temporal.ensure_search_attributes`` and the
local dev server register them (all ``Keyword``).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

RUN_ID = SearchAttributeKey.for_keyword("BlockbatchRunId")
DOCUMENT = SearchAttributeKey.for_keyword("BlockbatchDocument")
SCHEMA = SearchAttributeKey.for_keyword("BlockbatchSchema")
MODEL = SearchAttributeKey.for_keyword("BlockbatchModel")
PACK = SearchAttributeKey.for_keyword("BlockbatchPack")

#: Name -> type, as ``temporal operator search-attribute create`` takes them.
SEARCH_ATTRIBUTES = {key.name: "Keyword" for key in (RUN_ID, DOCUMENT, SCHEMA, MODEL, PACK)}
