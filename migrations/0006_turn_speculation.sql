-- What speculative decoding did in a turn, as the stats line words it
-- ("lookup: 62% accepted, 2.5 tok/pass"); NULL for plain decoding, cloud
-- answers and turns stored before it was kept.
ALTER TABLE turn_stats ADD COLUMN speculation TEXT;
