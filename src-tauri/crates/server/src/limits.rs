//! The process's file-descriptor limit: raised as far as the OS allows when
//! the server starts, and the connection cap kept to half of it, so open
//! connections can never take the descriptors the rest of the process (the
//! app's SQLite, model loads, logs) needs.

/// What the soft limit is raised to at most: macOS refuses a soft limit over
/// OPEN_MAX (10240) even when the hard limit says "unlimited".
#[cfg(unix)]
const WANTED: u64 = 10_240;

/// Raises the soft RLIMIT_NOFILE towards the hard limit (at most
/// [`WANTED`]) and returns the soft limit in force afterwards (`None`:
/// unlimited, or not unix).
#[cfg(unix)]
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let soft = lim.current?;
    let target = lim.maximum.map_or(WANTED, |hard| hard.min(WANTED));
    if target <= soft {
        return Some(soft);
    }
    match setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum: lim.maximum }) {
        Ok(()) => {
            tracing::debug!("raised the open-file limit from {soft} to {target}");
            Some(target)
        }
        Err(e) => {
            tracing::debug!("cannot raise the open-file limit from {soft}: {e}");
            Some(soft)
        }
    }
}

#[cfg(not(unix))]
pub fn raise_fd_limit() -> Option<u64> {
    None
}

/// The connection cap in force: the configured one, but at most half the
/// descriptor limit (at least one connection).
pub fn connection_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    let half = fd_limit.map_or(usize::MAX, |l| usize::try_from(l / 2).unwrap_or(usize::MAX));
    configured.min(half).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_at_most_half_the_descriptor_limit() {
        assert_eq!(connection_cap(128, Some(256)), 128);
        assert_eq!(connection_cap(128, Some(100)), 50);
        assert_eq!(connection_cap(128, None), 128);
        assert_eq!(connection_cap(128, Some(1)), 1, "never zero");
    }

    #[cfg(unix)]
    #[test]
    fn the_limit_after_raising_is_never_lower_than_before() {
        let before = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let after = raise_fd_limit();
        assert!(after >= before || after.is_none(), "{after:?} < {before:?}");
    }
}
