//! The few mlx-c calls that mlx-rs 0.33 does not wrap. The only unsafe code in the engine.
#![allow(unsafe_code)]

use std::ffi::CStr;

/// The version string of the libmlx this process actually runs (not the one
/// the crate was built against): the Linux build links the mlx-cpu wheel's
/// libmlx.so at run time, so this is what tells a mismatch.
pub(crate) fn mlx_version() -> Option<String> {
    // SAFETY: mlx_string_new returns an owned empty string; mlx_version fills
    // it; mlx_string_data points into it until mlx_string_free, and we copy
    // the bytes out before freeing.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        let ok = mlx_sys::mlx_version(&mut s) == 0;
        let out = ok.then(|| {
            let ptr = mlx_sys::mlx_string_data(s);
            (!ptr.is_null()).then(|| CStr::from_ptr(ptr).to_string_lossy().into_owned())
        });
        mlx_sys::mlx_string_free(s);
        out.flatten()
    }
}
