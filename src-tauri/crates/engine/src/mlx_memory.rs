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

/// Metal's recommended working-set size (`max_recommended_working_set_size`
/// in MLX's device info): what macOS lets the GPU keep resident of the
/// unified memory. A model past it pages even with RAM free, so the fit
/// budget takes it as a second limit. `None` off macOS (no GPU here) or when
/// MLX cannot say.
pub fn gpu_working_set_bytes() -> Option<u64> {
    #[cfg(target_os = "macos")]
    {
        crate::ffi::device_info_size(true, c"max_recommended_working_set_size")
    }
    #[cfg(not(target_os = "macos"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_working_set_is_read_only_where_there_is_metal() {
        let ws = gpu_working_set_bytes();
        #[cfg(target_os = "macos")]
        assert!(ws.is_some_and(|b| b > 1 << 30), "{ws:?}");
        #[cfg(not(target_os = "macos"))]
        assert_eq!(ws, None);
        // The reader behind it: the CPU device has string entries only, so a
        // size is None whether the key is a string or absent, never a crash.
        assert_eq!(crate::ffi::device_info_size(false, c"device_name"), None);
        assert_eq!(crate::ffi::device_info_size(false, c"no_such_key"), None);
    }

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
