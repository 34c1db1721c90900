-- A schema's definition as its author wrote it: json keeps the text it is given, keys in
-- the author's order, where jsonb sorts them (by length, then bytes). The prompt lists the
-- fields in the order the run reads them back, so that order is the author's. Rows stored
-- before keep the order jsonb gave them.
alter table schemas alter column definition type json using definition::json;
