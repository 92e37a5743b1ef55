//! What MLX runs on here: its version and default device.

use headroom_core::attention::Backend;
use mlx_rs::{Device, DeviceType};

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
}
