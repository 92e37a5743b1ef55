//! MLX's ring backend, as this engine uses it: a group of two processes
//! (rank 0 the host, rank 1 the lender) joined over TCP from a hostfile,
//! hidden states sent and received as MLX arrays on the CPU stream, and a
//! watchdog for the one failure MLX does not see.
//!
//! Checked here (`docs/two-macs.md`): a killed peer makes the waiting side's
//! `eval` fail with "[ring] connection to a peer was lost" within seconds
//! (the kernel resets its sockets). A peer that stops answering without
//! closing (a frozen process, a dropped network) would block it forever:
//! the watchdog shuts the ring's sockets down when a pass has waited longer
//! than its deadline, and MLX then fails the pass the same way.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx_rs::{Array, Dtype};

use crate::error::{EngineError, Result};
use crate::ffi;

/// How long one hand-off may wait for the peer before the watchdog cuts the
/// ring: longer than the slowest honest pass (a 2048-token prompt chunk
/// through half of a 32B model on a base M1 takes about 20 s).
/// `HEADROOM_PEER_STALL_SECS` sets another (the tests' frozen-peer case).
pub const STALL_DEADLINE: Duration = Duration::from_secs(60);

/// [`STALL_DEADLINE`], or what `HEADROOM_PEER_STALL_SECS` says.
pub(crate) fn stall_deadline() -> Duration {
    std::env::var("HEADROOM_PEER_STALL_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(STALL_DEADLINE, Duration::from_secs)
}

/// Whether this process has joined a ring (MLX's is for the process's life).
static JOINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process's ring group.
pub(crate) struct Ring {
    group: ffi::Group,
    /// The other rank.
    other: i32,
    watchdog: Watchdog,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").field("other", &self.other).finish_non_exhaustive()
    }
}

impl Ring {
    /// Joins the ring the hostfile `[[host], [lender]]` describes as `rank`,
    /// waiting for the other side (MLX retries its connections for a while,
    /// then fails). Once per process: MLX keeps the group for the process's life.
    pub(crate) fn join(host: &str, lender: &str, rank: i32, deadline: Duration) -> Result<Self> {
        // A second init would return the first ring, its peer long gone.
        if JOINED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(ring_error(
                "this process has placed a model on a peer before, and MLX keeps one ring per process: start it again to place another".into(),
            ));
        }
        let (dir, hostfile) = write_hostfile(host, lender)?;
        let group = join_with(&hostfile, rank)?;
        drop(dir);
        let ours: SocketAddr = parse(if rank == 0 { host } else { lender })?;
        let theirs: SocketAddr = parse(if rank == 0 { lender } else { host })?;
        Ok(Self { group, other: 1 - rank, watchdog: Watchdog::start(ours, theirs, deadline) })
    }

    /// Sends `x` to the other rank and waits until it has gone.
    pub(crate) fn send(&self, x: &Array) -> Result<()> {
        let sent = ffi::ring_send(x, self.other, &self.group)
            .map_err(|status| ring_error(format!("send failed ({status})")))?;
        self.watchdog.wait(|| sent.eval())
    }

    /// Receives a `shape` array of `dtype` from the other rank.
    pub(crate) fn recv(&self, shape: &[i32], dtype: Dtype) -> Result<Array> {
        let got = ffi::ring_recv(shape, dtype, self.other, &self.group)
            .map_err(|status| ring_error(format!("receive failed ({status})")))?;
        self.watchdog.wait(|| got.eval())?;
        Ok(got)
    }
}

/// The hostfile `[[host], [lender]]` in a folder of its own: created with a
/// random name and mode 0700 (`tempfile`), so another user of a shared
/// machine can neither predict the path (and plant a file or link there
/// first) nor read or swap the addresses the ring connects to. Removed when
/// the returned folder is dropped.
fn write_hostfile(host: &str, lender: &str) -> Result<(tempfile::TempDir, std::path::PathBuf)> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("headroom-ring-");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let dir = builder
        .tempdir()
        .map_err(|e| ring_error(format!("cannot create a private folder for the ring's hostfile: {e}")))?;
    let hostfile = dir.path().join("hosts.json");
    let hosts = serde_json::json!([[host], [lender]]);
    std::fs::write(&hostfile, hosts.to_string())
        .map_err(|e| ring_error(format!("cannot write {}: {e}", hostfile.display())))?;
    Ok((dir, hostfile))
}

/// Sets the two variables MLX's ring reads (it has no other way in) and
/// joins. Each side calls it once, before it starts a ring of its own.
fn join_with(hostfile: &Path, rank: i32) -> Result<ffi::Group> {
    // MLX reads these with getenv during the init below; nothing else in
    // the process reads or writes them.
    std::env::set_var("MLX_HOSTFILE", hostfile);
    std::env::set_var("MLX_RANK", rank.to_string());
    ffi::ring_init().ok_or_else(|| {
        ring_error("MLX could not join the ring (the other side did not connect, or a port is taken)".into())
    })
}

fn parse(addr: &str) -> Result<SocketAddr> {
    addr.parse().map_err(|e| ring_error(format!("{addr} is not an ip:port address: {e}")))
}

fn ring_error(reason: String) -> EngineError {
    EngineError::Peer { reason }
}

/// Cuts the ring's sockets when a hand-off waits longer than its deadline.
struct Watchdog {
    /// When the current wait began (`None`: not waiting).
    waiting: Arc<Mutex<Option<Instant>>>,
}

impl Watchdog {
    fn start(ours: SocketAddr, theirs: SocketAddr, deadline: Duration) -> Self {
        let waiting: Arc<Mutex<Option<Instant>>> = Arc::default();
        let seen = Arc::downgrade(&waiting);
        // Ends with the ring (its `Arc` gone).
        let _ = std::thread::Builder::new().name("headroom-ring-watchdog".into()).spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let Some(waiting) = seen.upgrade() else { return };
            let since = *waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if since.is_some_and(|t| t.elapsed() > deadline) {
                let cut = ffi::shutdown_sockets(|local, peer| local == ours || peer == theirs);
                tracing::warn!("the peer has not answered for {} s: cut {cut} ring socket(s)", deadline.as_secs());
                return;
            }
        });
        Self { waiting }
    }

    fn wait(&self, eval: impl FnOnce() -> std::result::Result<(), mlx_rs::error::Exception>) -> Result<()> {
        let set = |v| *self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = v;
        set(Some(Instant::now()));
        let out = eval();
        set(None);
        // MLX's message ends with the mlx-c source line it came through: not the user's business.
        out.map_err(|e| {
            let what = e.what();
            let reason = what.find(" at /").map_or(what, |at| &what[..at]);
            EngineError::PeerLost { reason: reason.to_owned() }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostfile_is_in_a_private_folder_of_a_random_name_and_goes_with_it() {
        let (a, file_a) = write_hostfile("10.0.0.1:7001", "10.0.0.2:7002").unwrap();
        let (b, _) = write_hostfile("10.0.0.1:7001", "10.0.0.2:7002").unwrap();
        assert_ne!(a.path(), b.path(), "two rings, two folders: the path is not predictable");
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("headroom-ring-") && name != format!("headroom-ring-{}", std::process::id()));
        assert_eq!(std::fs::read_to_string(&file_a).unwrap(), r#"[["10.0.0.1:7001"],["10.0.0.2:7002"]]"#);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(a.path()).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "only this user may look inside");
        }
        let dir = a.path().to_owned();
        drop(a);
        assert!(!dir.exists(), "removed with its folder");
    }
}
