-- Where a turn's later layers ran when its model was split across two Macs,
-- and what handing the hidden state over cost, as the stats line words it
-- ("across two Macs: layers 15–29 on 10.0.0.2:7070, hand-off 1.2 ms a pass");
-- NULL for a turn on this Mac alone, cloud answers and turns stored before it was kept.
ALTER TABLE turn_stats ADD COLUMN two_macs TEXT;
