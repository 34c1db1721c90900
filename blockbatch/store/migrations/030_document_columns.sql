-- The input's own columns in their file order, the text column among them (a CSV's header,
-- a JSONL file's keys), and which of them held each block's text: blocks.metadata is jsonb,
-- which keeps no key order, and leaves the text column out. The CSV and Parquet exports give
-- each row back its columns in this order, under these names (blockbatch/api/review.py).
-- Null for documents without columns (markdown, PDF ...) and for documents stored before.
alter table documents add column if not exists record_columns text[];
alter table documents add column if not exists text_column text;
