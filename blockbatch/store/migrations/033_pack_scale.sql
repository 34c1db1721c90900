-- 033: per-pack work proportional to the pack, not the run (issue 39).
--
-- A pack's quality tally reads the samples compared in that pack through this index
-- (blockbatch/store/quality.py ``pack_tally``) and the rest through the pack's overlays
-- (``overlays_run_pack``), instead of every sample of the run joined to its overlay.
create index if not exists quality_samples_run_pack on quality_samples (run_id, pack_index)
    where pack_index is not null;

-- The followers of a block (migration 031's ``same_as``): the trigger that hands them the
-- block's outcome, and a re-asked block's copies, find them here instead of reading every
-- pending overlay of the run for each block a pack answers.
create index if not exists overlays_run_same_as on overlays (run_id, same_as)
    where same_as is not null;
