-- Two more labels on a turn's stats: the quantized-matmul kernel it ran with
-- ("cpu f32" / "fused"; NULL for unquantized models and cloud answers), and
-- the live view's verdict when memory slowed it ("slowed by swap: 3.1 → 0.8
-- tok/s while swap grew 1.2 GB"; NULL when nothing did).
ALTER TABLE turn_stats ADD COLUMN quant_kernel TEXT;
ALTER TABLE turn_stats ADD COLUMN slowdown TEXT;
