//! MLX's own view of its memory (process-wide allocator counters), for the
//! app to show next to the OS readings of `headroom-memory`.

use serde::Serialize;

use crate::error::{MlxContext, Result};

/// Bytes held by MLX's allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MlxMemory {
    /// In live arrays (weights, KV caches, activations in flight).
    pub active: u64,
    /// Freed buffers MLX keeps for reuse (returned by `clear_cache`).
    pub cache: u64,
    /// The most `active` has been since the last reset.
    pub peak: u64,
}

/// Reads MLX's counters now.
pub fn mlx_memory() -> Result<MlxMemory> {
    let as_u64 = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    Ok(MlxMemory {
        active: as_u64(mlx_rs::memory::active_memory().op("active_memory")?),
        cache: as_u64(mlx_rs::memory::cache_memory().op("cache_memory")?),
        peak: as_u64(mlx_rs::memory::peak_memory().op("peak_memory")?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_see_a_live_array() -> Result<()> {
        let a = mlx_rs::ops::zeros::<f32>(&[1024, 1024]).op("zeros")?;
        mlx_rs::transforms::eval([&a]).op("eval")?;
        let m = mlx_memory()?;
        assert!(m.active >= 4 << 20, "{m:?}");
        assert!(m.peak >= m.active, "{m:?}");
        Ok(())
    }
}
