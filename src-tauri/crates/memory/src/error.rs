//! The memory crate's typed errors.

/// What reading the machine's memory can fail with.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// sysinfo could not be set up on this platform.
    #[error("cannot read system memory: {0}")]
    System(#[from] sysinfo::Error),
    /// A bandwidth measurement asked for something it cannot do.
    #[error("bandwidth measurement: invalid {name}: {reason}")]
    InvalidOption { name: &'static str, reason: String },
}

pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
