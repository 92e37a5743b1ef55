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

/// A size-valued entry of MLX's device info (`mlx::core::device_info`) for
/// device 0 of the given kind; `None` when the key is absent, is a string,
/// or the call fails. Metal reports `max_recommended_working_set_size`
/// (the GPU's share of unified memory macOS recommends keeping resident).
// Off macOS only the tests call it (there is no GPU to ask).
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub(crate) fn device_info_size(gpu: bool, key: &CStr) -> Option<u64> {
    let kind = if gpu { mlx_sys::mlx_device_type__MLX_GPU } else { mlx_sys::mlx_device_type__MLX_CPU };
    // SAFETY: the device and the info object are created here, used only
    // through mlx-c's accessors with a NUL-terminated key, and freed before
    // returning; `value` is a plain integer mlx-c writes on success only.
    unsafe {
        let device = mlx_sys::mlx_device_new_type(kind, 0);
        let mut info = mlx_sys::mlx_device_info_new();
        let mut value: usize = 0;
        let found = mlx_sys::mlx_device_info_get(&mut info, device) == 0
            && mlx_sys::mlx_device_info_get_size(&mut value, info, key.as_ptr()) == 0;
        mlx_sys::mlx_device_info_free(info);
        mlx_sys::mlx_device_free(device);
        found.then(|| u64::try_from(value).unwrap_or(u64::MAX))
    }
}
