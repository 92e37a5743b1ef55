//! macOS signals straight from the kernel: `kern.memorystatus_vm_pressure_level`
//! (1 / 2 / 4 = normal / warning / critical, the dispatch encoding) and
//! `vm.swapusage`. Neither needs privileges. The only unsafe code of the crate.
#![allow(unsafe_code)]

use std::ffi::CStr;

use headroom_core::pressure::PressureLevel;

use crate::os::{OsSignals, SwapUsage};

/// The sysctl readers.
#[derive(Debug, Clone, Default)]
pub struct PlatformSignals;

impl PlatformSignals {
    pub fn new() -> Self {
        Self
    }
}

/// Reads a fixed-size sysctl value into a `T`.
fn sysctl_raw<T: Copy>(name: &CStr, mut value: T) -> std::io::Result<T> {
    let mut len = std::mem::size_of::<T>();
    // SAFETY: `name` is NUL-terminated; `value` is a valid, writable `T` of
    // `len` bytes that outlives the call; no new value is set (null, 0). The
    // kernel writes at most `len` bytes and reports how many in `len`.
    let rc = unsafe { libc::sysctlbyname(name.as_ptr(), (&raw mut value).cast(), &mut len, std::ptr::null_mut(), 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if len != std::mem::size_of::<T>() {
        return Err(std::io::Error::other(format!("{name:?}: {len} bytes, expected {}", std::mem::size_of::<T>())));
    }
    Ok(value)
}

impl OsSignals for PlatformSignals {
    fn pressure(&mut self) -> PressureLevel {
        sysctl_raw::<libc::c_int>(c"kern.memorystatus_vm_pressure_level", 0)
            .map_or(PressureLevel::Unknown, |level| PressureLevel::from_macos_dispatch(i64::from(level)))
    }

    fn swap(&mut self) -> Option<SwapUsage> {
        // SAFETY: xsw_usage is plain old data (integers and a bool-like int);
        // all-zero is a valid value.
        let zero: libc::xsw_usage = unsafe { std::mem::zeroed() };
        let usage = sysctl_raw(c"vm.swapusage", zero).ok()?;
        Some(SwapUsage { total: usage.xsu_total, used: usage.xsu_used })
    }
}
