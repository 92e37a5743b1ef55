//! The fit's backend-dependent terms, one table per backend: what MLX's
//! buffer cache may keep, what the process holds beside MLX's own peak, and
//! what is wired. Everything else in the estimate (weights, KV cache,
//! attention by MLX's dispatch rules, activations, logits) is the same
//! arithmetic on every backend.
//!
//! Sources: MLX 0.32.2 (the version bump, ml-explore/mlx commit
//! `29006584f`), the libmlx the engine links; for Metal
//! `mlx/backend/metal/allocator.cpp`, `resident.cpp` and
//! `mlx/backend/common/buffer_cache.h`, for the CPU
//! `mlx/backend/no_gpu/allocator.cpp`. The CPU figures were measured on the
//! 2-core Linux development machine (docs/fit-calibration.md); no Metal
//! figure is measured yet (`scripts/mac/acceptance.sh` measures them on the
//! first Mac). The calibration (`crate::calibration`) learns from MLX's
//! measured peaks on whichever backend runs, so a Metal term that is off
//! is corrected on the user's own Mac after one turn.

use crate::attention::Backend;

/// The least buffer cache a model gets on Metal, even on a tight budget:
/// without one MLX reallocates every step's temporaries and decoding crawls.
pub const MIN_BUFFER_CACHE_BYTES: u64 = 256 << 20;

/// MLX's buffer-cache limit on its CPU backend: MLX's own CPU default, the
/// one mlx-lm runs with (`mx.set_cache_limit` returns 33554432 there).
pub const CPU_BUFFER_CACHE_BYTES: u64 = 32 << 20;

/// What the process holds on MLX's CPU backend beyond MLX's own peak (and
/// the recurrence), at most: the runtime's [`CPU_RUNTIME_BYTES`] and what
/// MLX's buffer cache (capped there at [`CPU_BUFFER_CACHE_BYTES`]) keeps
/// at the peak, [`CPU_CACHE_HELD_BYTES`]. Below that,
/// [`cpu_resident_bytes`].
pub const CPU_RESIDENT_BYTES: u64 = CPU_RUNTIME_BYTES + CPU_CACHE_HELD_BYTES;

/// The runtime's own part of [`CPU_RESIDENT_BYTES`], before the cache holds
/// anything (`cpu_resident_bytes`).
pub const CPU_RUNTIME_BYTES: u64 = 8_000_000;

/// The most the capped buffer cache was seen to hold of a pass's freed
/// buffers at its peak, on four models where the chunk's MLP buffers are
/// small beside the cap (chosen with [`cpu_resident_bytes`]'s other two
/// bounds on 104 fresh runs: four models at 128–4,096 tokens and the
/// Qwen2.5-0.5B shape at 248–1,980; docs/fit-calibration.md, "What the
/// capped cache holds").
pub const CPU_CACHE_HELD_BYTES: u64 = 17_000_000;

/// What the process holds beside MLX's peak on the CPU backend when a
/// chunk's MLP holds `mlp_bytes` (`CPU_KERNEL_ACTIVATION_BYTES` × rows ×
/// (hidden + intermediate)) and its widest buffer (rows × intermediate, in
/// f32) is `widest_bytes`: the runtime's [`CPU_RUNTIME_BYTES`] and what the
/// capped cache keeps of the pass's freed buffers, the least of three:
/// twice the MLP's (a short prompt's pass frees little),
/// [`CPU_CACHE_HELD_BYTES`], and the cap less the widest buffer (the fewer
/// buffers that size fit under the cap, the less it held: fitted, the
/// mechanism not traced in MLX). Measured on the `medium` qwen2:
/// 16.6 MB at 128 tokens (16.8 here), 27.5 at 512 (25.0), 17.9 at 2,048,
/// where that buffer is 25 MB (16.4); SmolLM2-135M, whose widest buffer
/// stays under 13 MB, held 19–26 from 512 to 4,096 tokens (25.0).
pub fn cpu_resident_bytes(mlp_bytes: u64, widest_bytes: u64) -> u64 {
    CPU_RUNTIME_BYTES
        + mlp_bytes.saturating_mul(2).min(CPU_CACHE_HELD_BYTES).min(CPU_BUFFER_CACHE_BYTES.saturating_sub(widest_bytes))
}

/// How large MLX's buffer cache may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferCache {
    /// Held at a fixed size whatever the budget leaves.
    Capped { bytes: u64 },
    /// What the verdict leaves after the predicted peak (less the prompt
    /// cache's share), at least `min_bytes`.
    FollowsSpare { min_bytes: u64 },
}

/// What the process holds beside MLX's own peak (MLX's peak counts only
/// active buffers; cached ones are resident too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BesidePeak {
    /// The capped cache's share and the runtime: [`cpu_resident_bytes`].
    CappedCache,
    /// An uncapped cache keeps the previous chunk's freed attention block
    /// while the next one computes: half that block (the prefill slack,
    /// `chunk_overhead` in `crate::fit`), where the scores are materialized.
    PrefillSlack,
}

/// What MLX is asked to keep wired (resident, never paged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wired {
    /// Nothing: MLX has no wired limit here.
    Nothing,
    /// The predicted peak, never above the GPU's recommended working set,
    /// and only for a verdict that leaves the OS its headroom
    /// ([`crate::fit::wired_limit`]).
    PeakUnderWorkingSet,
}

/// One backend's terms, each with where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendTerms {
    pub backend: Backend,
    pub buffer_cache: BufferCache,
    pub beside_peak: BesidePeak,
    pub wired: Wired,
}

/// MLX's CPU backend (Linux: the test bench).
///
/// - Buffer cache, [`CPU_BUFFER_CACHE_BYTES`]: the cache limit MLX's CPU
///   allocator starts with (`no_gpu/allocator.cpp`; mlx-lm runs with it),
///   which the engine keeps: there MLX's buffers are the process's heap, and
///   a cached buffer is resident memory MLX's own peak does not count. Let
///   grow to the spare it held 123 MB past MLX's peak on a gemma-style model
///   at 4K tokens; capped, a turn's peak repeats within 1 % (measured,
///   docs/fit-calibration.md, "The capped cache").
/// - Beside the peak, [`cpu_resident_bytes`]: fitted to 104 fresh runs on
///   this machine (docs/fit-calibration.md).
/// - Wired: nothing. `set_wired_limit` is a no-op returning 0 off Metal
///   (`no_gpu/allocator.cpp`).
pub const CPU: BackendTerms = BackendTerms {
    backend: Backend::Cpu,
    buffer_cache: BufferCache::Capped { bytes: CPU_BUFFER_CACHE_BYTES },
    beside_peak: BesidePeak::CappedCache,
    wired: Wired::Nothing,
};

/// Metal (Apple silicon: the product). MLX's Metal allocator at 0.32.2
/// (`metal/allocator.cpp`), read, not yet measured:
///
/// - Its limits come from the device: the memory limit is
///   min(1.5 × `recommendedMaxWorkingSetSize`, 0.95 × RAM), and the cache
///   limit starts equal to it (`max_pool_size_ = block_limit_`): by default
///   freed buffers are kept until the cache alone could reach the memory
///   limit (mlx #3129: 16 GB Macs pushed into swap). Before allocating
///   afresh, MLX frees cached buffers once active + cached + the request
///   reach min(0.95 × the working set, the memory limit) (`gc_limit_`).
/// - Buffer cache, [`BufferCache::FollowsSpare`]: so the engine sets the
///   cache limit (`set_cache_limit`) to what the verdict leaves after the
///   predicted peak, at least [`MIN_BUFFER_CACHE_BYTES`]; everything a long
///   chat can grow stays inside what the verdict approved.
/// - Beside the peak, [`BesidePeak::PrefillSlack`]: a cached buffer is
///   reused only for a request of at least its size and under
///   min(2 × size, size + 2 pages) (`common/buffer_cache.h`), so a freed
///   attention block of one size waits in the cache while a block of
///   another size is allocated. Measured on the CPU backend with its cache
///   uncapped; it counts only where the scores are materialized, on Metal
///   the fallback for head sizes without a fused kernel (`crate::attention`).
/// - Page rounding: a request above `vm_page_size` (16 KiB on Apple
///   silicon) is rounded up to whole pages, one under 256 bytes comes from
///   a 1 MiB heap: at most 16 KiB per buffer, a few hundred buffers a pass,
///   so a few MB at most; not a term of its own (the fixed term and the
///   calibration cover it).
/// - Wired, [`Wired::PeakUnderWorkingSet`]: `set_wired_limit` above
///   `max_recommended_working_set_size` throws (through mlx-c's default
///   handler the process exits); on macOS 15+ with a Metal 3 GPU the limit
///   is the capacity of MLX's residency sets (`resident.cpp`: allocations
///   are kept resident up to it, the rest left pageable). mlx-lm wires the
///   whole working set around each generation; the engine wires the
///   predicted peak only.
pub const METAL: BackendTerms = BackendTerms {
    backend: Backend::Metal,
    buffer_cache: BufferCache::FollowsSpare { min_bytes: MIN_BUFFER_CACHE_BYTES },
    beside_peak: BesidePeak::PrefillSlack,
    wired: Wired::PeakUnderWorkingSet,
};

/// The terms of `backend`.
pub fn terms(backend: Backend) -> &'static BackendTerms {
    match backend {
        Backend::Cpu => &CPU,
        Backend::Metal => &METAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_has_its_own_table() {
        for backend in [Backend::Cpu, Backend::Metal] {
            assert_eq!(terms(backend).backend, backend);
        }
        // The CPU's cache is MLX's CPU default and what sits beside its peak
        // is the capped cache's share; Metal's cache follows the verdict.
        assert_eq!(CPU.buffer_cache, BufferCache::Capped { bytes: 33_554_432 });
        assert_eq!(METAL.buffer_cache, BufferCache::FollowsSpare { min_bytes: 256 << 20 });
        assert_eq!(CPU.wired, Wired::Nothing);
        assert_eq!(METAL.beside_peak, BesidePeak::PrefillSlack);
    }

    /// The capped cache's share is bounded three ways: twice the MLP's
    /// buffers, [`CPU_CACHE_HELD_BYTES`], and the cap less the widest buffer.
    #[test]
    fn the_cpu_resident_term_is_the_least_of_its_three_bounds() {
        assert_eq!(cpu_resident_bytes(1_000_000, 0), CPU_RUNTIME_BYTES + 2_000_000);
        assert_eq!(cpu_resident_bytes(50_000_000, 0), CPU_RESIDENT_BYTES);
        assert_eq!(cpu_resident_bytes(50_000_000, 30 << 20), CPU_RUNTIME_BYTES + (2 << 20));
        assert_eq!(cpu_resident_bytes(50_000_000, 40 << 20), CPU_RUNTIME_BYTES);
    }
}
