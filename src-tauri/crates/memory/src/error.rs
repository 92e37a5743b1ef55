//! The memory crate's typed errors.

/// What reading the machine's memory can fail with.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// sysinfo could not be set up on this platform.
    #[error("cannot read system memory: {0}")]
    System(#[from] sysinfo::Error),
}

pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
