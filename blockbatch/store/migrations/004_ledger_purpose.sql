-- 004: the ledger says what each row was for and which provider and API it went to.
-- purpose: 'pack' (a sync pack call), 'batch_request' (a request of a Message Batch);
-- later: 'probe', 'quality_probe'. api: 'messages' or 'message_batches'.
alter table llm_calls
    add column purpose  text not null default 'pack',
    add column provider text not null default 'anthropic',
    add column api      text;

update llm_calls
   set api = case when custom_id is null then 'messages' else 'message_batches' end,
       purpose = case when custom_id is null then 'pack' else 'batch_request' end;
