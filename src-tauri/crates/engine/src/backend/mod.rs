//! What MLX runs on here (its version and default device), and the one
//! boundary between the engine and a backend's kernels of its own.
//!
//! The Mac (Metal) is the product; MLX's CPU backend on Linux is the test
//! bench. The CPU backend's own kernels (the row-shared quantized matmul,
//! its thread team, AVX2 softmax and SiLU) live in [`cpu`], compiled only on
//! x86_64 off macOS, and the rest of the engine reaches them only through
//! [`Kernels`]: every method may answer `None`, and the caller then runs
//! MLX's own ops, which is all a Mac build contains ([`MlxOnly`]).
//! `scripts/check-macos/run.sh` checks that the macOS build compiles none of
//! [`cpu`]. No new CPU-only optimisation lands here (docs/layout.md).

use headroom_core::attention::Backend;
use mlx_rs::{Array, Device, DeviceType};

use crate::cache::AttentionMask;
use crate::error::Result;

// Off on every Mac (arm64, and Intel, where MLX has no Metal backend we
// ship): what a Mac runs is MLX's own kernels.
#[cfg(all(target_arch = "x86_64", not(target_os = "macos")))]
mod cpu;

/// The device kind MLX computes on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        }
    }

    /// The backend the fit estimate's attention rules are for: MLX's GPU
    /// device is Metal (the only GPU backend the Mac builds have).
    pub fn backend(self) -> Backend {
        match self {
            DeviceKind::Cpu => Backend::Cpu,
            DeviceKind::Gpu => Backend::Metal,
        }
    }
}

/// Facts about the MLX backend in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Version reported by the loaded libmlx, e.g. "0.32.2".
    pub mlx_version: String,
    /// MLX's default device: GPU (Metal) on a Mac, CPU on Linux.
    pub device: DeviceKind,
}

/// Asks the loaded libmlx for its version and default device.
pub fn backend_info() -> BackendInfo {
    BackendInfo { mlx_version: crate::ffi::mlx_version().unwrap_or_else(|| "unknown".to_owned()), device: device() }
}

fn device() -> DeviceKind {
    match Device::try_default().and_then(|d| d.get_type()) {
        Ok(DeviceType::Gpu) => DeviceKind::Gpu,
        // A failure to ask means no usable GPU either: MLX falls back to the CPU.
        Ok(DeviceType::Cpu) | Err(_) => DeviceKind::Cpu,
    }
}

/// Whether MLX computes on the CPU in this process: asked once, since the
/// attention and MLP ask it in every layer (nothing here changes MLX's
/// default device).
pub fn on_cpu() -> bool {
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| device() == DeviceKind::Cpu)
}

/// How long the row-shared kernel itself has run in this process, apart
/// from MLX's ops around it (and the evaluation of `x` that runs them):
/// `examples/pass_cost.rs` splits a forward pass with it. Test support only,
/// so the app pays no clock reads.
#[cfg(feature = "test-support")]
pub mod kernel_clock {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    static NANOS: AtomicU64 = AtomicU64::new(0);

    #[cfg_attr(not(all(target_arch = "x86_64", not(target_os = "macos"))), allow(dead_code))]
    pub(crate) fn add(spent: Duration) {
        NANOS.fetch_add(u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The kernel's time since the last call (and resets it).
    pub fn take() -> Duration {
        Duration::from_nanos(NANOS.swap(0, Ordering::Relaxed))
    }
}

/// A quantized `[out, in]` matrix as a kernel reads it (MLX's affine
/// layout, what `crate::quant` holds): borrowed, so this boundary names no
/// engine type above it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuantView<'a> {
    /// Packed values, `[out, in * bits / 32]`, u32.
    pub weight: &'a Array,
    /// `[out, in / group_size]`.
    pub scales: &'a Array,
    /// `[out, in / group_size]`.
    pub biases: &'a Array,
    pub group_size: i32,
    pub bits: i32,
}

/// What the engine asks of a backend beside MLX's ops: a function table,
/// one implementation per backend. Each answer is `None` where the kernel
/// does not apply (another backend, dtype or shape), and the caller then
/// runs MLX's ops, as mlx-lm does.
pub(crate) trait Kernels: Sync + std::fmt::Debug {
    /// Whether a `bits`/`group` matrix can take the row-shared path
    /// ([`crate::quant::QuantKernel::CpuF32`]'s few-row path): the labels
    /// and the kernel's paths ask before any matmul runs.
    fn row_shared(&self, bits: i32, group: i32) -> bool;

    /// `x · Wᵀ` in f32 as plain rows and their shape, on the row-shared
    /// path (the caller has decided `x` has few enough rows for it).
    fn quantized_rows(&self, w: QuantView<'_>, x: &Array) -> Result<Option<(Vec<f32>, Vec<i32>)>>;

    /// `silu(x · Gᵀ) * (x · Uᵀ)` (SwiGLU's hidden state) for an f32 `x`,
    /// both projections on the row-shared path.
    fn swiglu(&self, gate: QuantView<'_>, up: QuantView<'_>, x: &Array) -> Result<Option<Array>>;

    /// Attention over `[B, H, L, D]` queries, heads not merged, for a few
    /// f32 rows on the CPU backend.
    fn attention(
        &self,
        queries: &Array,
        keys: &Array,
        values: &Array,
        scale: f32,
        mask: &AttentionMask,
    ) -> Result<Option<Array>>;
}

/// The portable table: nothing of its own, MLX's ops everywhere. The only
/// one a Mac build has; on Linux the tests run it beside the CPU's.
#[derive(Debug)]
#[cfg_attr(all(target_arch = "x86_64", not(target_os = "macos"), not(test)), allow(dead_code))]
pub(crate) struct MlxOnly;

impl Kernels for MlxOnly {
    fn row_shared(&self, _bits: i32, _group: i32) -> bool {
        false
    }

    fn quantized_rows(&self, _w: QuantView<'_>, _x: &Array) -> Result<Option<(Vec<f32>, Vec<i32>)>> {
        Ok(None)
    }

    fn swiglu(&self, _gate: QuantView<'_>, _up: QuantView<'_>, _x: &Array) -> Result<Option<Array>> {
        Ok(None)
    }

    fn attention(
        &self,
        _q: &Array,
        _k: &Array,
        _v: &Array,
        _scale: f32,
        _mask: &AttentionMask,
    ) -> Result<Option<Array>> {
        Ok(None)
    }
}

/// This build's table: the CPU backend's kernels where they are compiled,
/// MLX's ops alone elsewhere.
pub(crate) fn kernels() -> &'static dyn Kernels {
    #[cfg(all(target_arch = "x86_64", not(target_os = "macos")))]
    {
        &cpu::CpuKernels
    }
    #[cfg(not(all(target_arch = "x86_64", not(target_os = "macos"))))]
    {
        &MlxOnly
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_libmlx_the_wheel_ships() {
        let info = backend_info();
        // mlx-rs 0.33 binds mlx-c 0.7.0, which pins MLX 0.32.2; the Linux
        // build loads the mlx-cpu 0.32.2 wheel. A different number means the
        // process picked up some other libmlx.
        assert_eq!(info.mlx_version, "0.32.2");
        #[cfg(not(target_os = "macos"))]
        assert_eq!(info.device, DeviceKind::Cpu);
    }

    /// The portable table answers nothing, so every caller runs MLX's ops:
    /// all a Mac build has. This build's own table takes the same inputs
    /// exactly where its kernels exist (the CPU backend on an AVX2 x86).
    #[test]
    fn the_portable_table_leaves_every_op_to_mlx() -> Result<()> {
        use crate::quant::{QuantKernel, QuantizedMatrix};
        use crate::testutil::normal;
        use mlx_rs::Dtype;

        let mut w = QuantizedMatrix::quantize(&normal(&[64, 128], 1, Dtype::Float32), 64, 4)?;
        w.kernel = QuantKernel::CPU;
        let x = normal(&[1, 2, 128], 2, Dtype::Float32);
        let q = normal(&[1, 4, 2, 32], 3, Dtype::Float32);
        let kv = normal(&[1, 2, 9, 32], 4, Dtype::Float32);

        assert!(!MlxOnly.row_shared(4, 64));
        assert!(MlxOnly.quantized_rows(w.view(), &x)?.is_none());
        assert!(MlxOnly.swiglu(w.view(), w.view(), &x)?.is_none());
        assert!(MlxOnly.attention(&q, &kv, &kv, 0.5, &AttentionMask::Causal)?.is_none());

        let native = kernels();
        let cpu_build = cfg!(all(target_arch = "x86_64", not(target_os = "macos")));
        let row_shared = native.row_shared(4, 64);
        assert!(!row_shared || cpu_build, "row-shared kernel outside the CPU build");
        assert_eq!(native.quantized_rows(w.view(), &x)?.is_some(), row_shared);
        assert_eq!(native.swiglu(w.view(), w.view(), &x)?.is_some(), row_shared);
        let attention = native.attention(&q, &kv, &kv, 0.5, &AttentionMask::Causal)?.is_some();
        assert_eq!(attention, cpu_build && on_cpu());
        Ok(())
    }
}
