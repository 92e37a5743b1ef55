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

/// Where MLX computes on the CPU its buffers come from glibc's malloc, and
/// glibc's mmap threshold moves at run time (a freed mapping raises it), so
/// whether a large buffer is mapped and given back on free, or carved from
/// a heap that keeps it, depended on what ran before: with MLX's cache
/// capped, two runs of the same turn peaked at 288 and 328.5 MB. Fixed at
/// glibc's own starting value (128 KiB), every large buffer is mapped and
/// unmapped alike, and a turn's peak repeats (38 of 40 pairs of fresh runs
/// within 1 %, the others 1.2 and 3.5 %: docs/fit-calibration.md), which a
/// fit that learns from one turn needs. Process-wide; set once, before the
/// engine's first allocation.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn fix_mmap_threshold() {
    const THRESHOLD: libc::c_int = 128 << 10;
    // SAFETY: mallopt only sets an allocator parameter; any value is valid
    // for M_MMAP_THRESHOLD up to HEAP_MAX (32 MiB on 64-bit).
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) } == 1;
    if !ok {
        tracing::warn!("mallopt(M_MMAP_THRESHOLD) failed: peaks may not repeat from run to run");
    }
}

/// Elsewhere the allocator is not glibc's and there is nothing to fix.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn fix_mmap_threshold() {}

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

/// This process's MLX ring group (peer/ring.rs). Freed when dropped.
pub(crate) struct Group(mlx_sys::mlx_distributed_group);

// SAFETY: the group is a handle to MLX's process-wide ring, which MLX
// itself uses from its own threads; the engine uses it from one thread at a
// time (the model that owns it moves with the engine's jobs).
unsafe impl Send for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: the handle came from mlx_distributed_init and is freed once.
        unsafe {
            mlx_sys::mlx_distributed_group_free(self.0);
        }
    }
}

/// Joins MLX's ring backend (strictly: no fallback to a group of one), as
/// `MLX_HOSTFILE` and `MLX_RANK` describe; `None` when it fails.
pub(crate) fn ring_init() -> Option<Group> {
    // SAFETY: `group` is created here and filled by mlx_distributed_init on
    // success; on failure it is freed here. The backend name is NUL-terminated.
    unsafe {
        let mut group = mlx_sys::mlx_distributed_group_new();
        if mlx_sys::mlx_distributed_init(&mut group, true, c"ring".as_ptr()) == 0 && !group.ctx.is_null() {
            Some(Group(group))
        } else {
            mlx_sys::mlx_distributed_group_free(group);
            None
        }
    }
}

/// MLX's `send` of `x` to rank `dst` on the CPU stream: an array to evaluate.
pub(crate) fn ring_send(x: &mlx_rs::Array, dst: i32, group: &Group) -> Result<mlx_rs::Array, i32> {
    let stream = mlx_rs::Stream::cpu();
    // SAFETY: `res` is a fresh array handle that mlx-c fills on success and
    // that `Array::from_ptr` then owns; on failure it is freed here. `x`,
    // the group and the stream outlive the call.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        match mlx_sys::mlx_distributed_send(&mut res, x.as_ptr(), dst, group.0, stream.as_ptr()) {
            0 => Ok(mlx_rs::Array::from_ptr(res)),
            status => {
                mlx_sys::mlx_array_free(res);
                Err(status)
            }
        }
    }
}

/// MLX's `recv` of a `shape` array of `dtype` from rank `src` on the CPU stream.
pub(crate) fn ring_recv(shape: &[i32], dtype: mlx_rs::Dtype, src: i32, group: &Group) -> Result<mlx_rs::Array, i32> {
    let stream = mlx_rs::Stream::cpu();
    // SAFETY: as in `ring_send`; `shape` is read for `shape.len()` ints.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_distributed_recv(
            &mut res,
            shape.as_ptr(),
            shape.len(),
            dtype as mlx_sys::mlx_dtype,
            src,
            group.0,
            stream.as_ptr(),
        );
        match status {
            0 => Ok(mlx_rs::Array::from_ptr(res)),
            status => {
                mlx_sys::mlx_array_free(res);
                Err(status)
            }
        }
    }
}

/// Shuts down (both ways) every TCP socket of this process whose local and
/// peer addresses satisfy `pick`, without closing it (its owner, MLX's
/// ring, still holds the descriptor and then sees the connection end);
/// returns how many. MLX keeps its ring sockets to itself, so they are found
/// by walking the process's descriptors (`/dev/fd` on Linux and macOS).
pub(crate) fn shutdown_sockets(pick: impl Fn(std::net::SocketAddr, std::net::SocketAddr) -> bool) -> usize {
    use std::os::fd::BorrowedFd;
    let Ok(entries) = std::fs::read_dir("/dev/fd") else { return 0 };
    let fds: Vec<i32> = entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    let mut cut = 0;
    for fd in fds {
        // SAFETY: the descriptor was open when listed and is only borrowed
        // for these calls: socket2's `SockRef` never closes it. One closed in
        // between fails the calls below (EBADF) and is skipped; a descriptor
        // that is not a connected socket fails `local_addr`/`peer_addr`.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let addrs = (socket.local_addr().map(|a| a.as_socket()), socket.peer_addr().map(|a| a.as_socket()));
        if let (Ok(Some(local)), Ok(Some(peer))) = addrs {
            if pick(local, peer) && socket.shutdown(std::net::Shutdown::Both).is_ok() {
                cut += 1;
            }
        }
    }
    cut
}
