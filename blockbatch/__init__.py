"""blockbatch: run an LLM over every block of a document, packed, cached and durable."""
