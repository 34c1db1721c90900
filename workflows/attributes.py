"""The search attributes blockbatch sets on its workflows, as Temporal keys (their names are
declared in blockbatch/core/workflow_names.py, once).

Workflows set them (run, document, schema, model on a run; run and pack on every pack);
the front doors filter by them; ``blockbatch.runtime.temporal.ensure_search_attributes`` and the
local dev server register them (all ``Keyword``).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

from blockbatch.core import workflow_names as names

RUN_ID = SearchAttributeKey.for_keyword(names.RUN_ID_ATTRIBUTE)
DOCUMENT = SearchAttributeKey.for_keyword(names.DOCUMENT_ATTRIBUTE)
SCHEMA = SearchAttributeKey.for_keyword(names.SCHEMA_ATTRIBUTE)
MODEL = SearchAttributeKey.for_keyword(names.MODEL_ATTRIBUTE)
PACK = SearchAttributeKey.for_keyword(names.PACK_ATTRIBUTE)

#: Name -> type, as ``temporal operator search-attribute create`` takes them.
SEARCH_ATTRIBUTES = names.SEARCH_ATTRIBUTES
