//! The engine's typed errors.

/// Everything the engine can fail with; variants carry what the user needs to act.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// MLX itself refused an operation (shape mismatch, unsupported dtype, …).
    #[error("MLX error in {op}: {source}")]
    Mlx {
        op: &'static str,
        #[source]
        source: mlx_rs::error::Exception,
    },
    /// A quantization parameter MLX does not support.
    #[error("unsupported quantization: {bits}-bit with group size {group_size} (supported: bits 2, 3, 4, 5, 6, 8; group sizes 32, 64, 128)")]
    UnsupportedQuantization { bits: i32, group_size: i32 },
    /// A tensor whose shape does not fit the operation it is used in.
    #[error("shape mismatch in {what}: expected {expected}, found {found:?}")]
    Shape {
        what: &'static str,
        expected: String,
        found: Vec<i32>,
    },
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Attaches the name of the operation to an MLX exception.
pub(crate) trait MlxContext<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> MlxContext<T> for std::result::Result<T, mlx_rs::error::Exception> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| EngineError::Mlx { op, source })
    }
}
