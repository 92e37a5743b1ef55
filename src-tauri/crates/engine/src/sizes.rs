//! The sizes the engine shares with the fit estimate. They are defined once,
//! in `headroom_core::fit` (the estimate must count what the engine
//! allocates); here they only become the engine's integer types, checked at
//! compile time.

/// Positions added to a layer's KV buffers each time they run out (mlx-lm's `KVCache.step`).
pub(crate) const KV_STEP: i32 = {
    let step = headroom_core::fit::KV_STEP;
    assert!(step > 0 && step <= i32::MAX as u64, "KV_STEP must be a positive i32");
    step as i32
};

/// Prompt tokens per prefill pass (mlx-lm's `prefill_step_size`).
pub(crate) const PREFILL_CHUNK: usize = {
    let chunk = headroom_core::fit::PREFILL_CHUNK;
    assert!(chunk > 0 && chunk <= u32::MAX as u64, "PREFILL_CHUNK must be a positive u32");
    chunk as usize
};
