-- Where each block came from in its file (blockbatch.core.blocks.Provenance): its character
-- span in the file's extracted text, page and box for paged formats (PDF, PPTX), heading
-- path, and the source file's name. One jsonb value, read whole by the review and export
-- reads; blocks stored before it have none.
alter table blocks add column if not exists provenance jsonb;
