-- Calibration before a big run (issue 15, `starter.py calibrate`): a sample of a document's
-- blocks run alone and at several pack sizes, each size's answers compared with the alone
-- ones. One row per calibration; a quote of the same schema and model reads the latest.
create table calibrations (
    calibration_id     text primary key,
    schema_id          text not null references schemas (schema_id),
    model              text not null,
    -- The calibrated document: its id as `run` would store it (content-hashed; the
    -- document itself need not be stored) and its name. The sample's blocks are a document
    -- of their own (sample_document_id), the one the calibration's runs ran over.
    document_id        text not null,
    document_name      text not null,
    sample_document_id text not null references documents (document_id),
    sample             integer not null check (sample > 0),
    seed               text not null,
    target             numeric(6, 5) not null check (target > 0 and target <= 1),
    -- core.calibration.SizeResult per size, the alone run (size 1) first.
    sizes              jsonb not null,
    recommended_size   integer,
    -- core.calibration.Calibration as `calibrate --json` prints it.
    result             jsonb not null,
    created_at         timestamptz not null default now()
);
create index calibrations_schema_model on calibrations (schema_id, model, created_at desc);
