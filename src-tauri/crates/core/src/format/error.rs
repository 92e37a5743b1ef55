//! What reading a model's files can fail with. Every variant names the field,
//! tensor or file part it is about, so a user holding a broken or hostile
//! model folder is told exactly what is wrong with it. The messages leave
//! out the file's path: the caller, which read the file, puts it in front.

/// A model file that cannot be used as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The text is not JSON (or not the JSON object the file must hold).
    #[error("not valid JSON: {reason}")]
    Json { file: &'static str, reason: String },
    /// A field the architecture needs is absent.
    #[error("\"{field}\" is missing, and {model_type} needs it")]
    MissingField { file: &'static str, field: String, model_type: String },
    /// A field is present but its value cannot be used.
    #[error("\"{field}\" is {value}, but it must be {expected}")]
    BadField { file: &'static str, field: String, value: String, expected: String },
    /// A `model_type` no architecture file here reads.
    #[error("unsupported model_type \"{model_type}\" (supported: {})", super::ModelType::NAMES.join(", "))]
    UnknownModelType { model_type: String },
    /// A quantization mode or method the engine does not run (mxfp4, nvfp4, gptq, …).
    #[error("unsupported quantization mode \"{mode}\" (supported: affine, as mlx-lm writes it)")]
    UnsupportedQuantMode { mode: String },
    /// A `rope_scaling` type the engine does not implement.
    #[error("unsupported rope_scaling type \"{rope_type}\" (supported: default, linear, llama3)")]
    UnsupportedRopeScaling { rope_type: String },
    /// A layer kind the engine does not implement (e.g. sliding-window attention in `layer_types`).
    #[error("unsupported layer type \"{layer_type}\" in \"layer_types\" (supported: full_attention)")]
    UnsupportedLayerType { layer_type: String },
    /// The 8-byte length prefix or the header it announces cannot be right.
    #[error("safetensors header: {reason}")]
    Header { reason: String },
    /// One tensor's entry in a safetensors header is wrong.
    #[error("safetensors header: tensor {tensor}: {reason}")]
    Tensor { tensor: String, reason: String },
    /// `model.safetensors.index.json` cannot be used.
    #[error("model.safetensors.index.json: {reason}")]
    Index { reason: String },
    /// A Hugging Face cache entry that does not follow the layout.
    #[error("Hugging Face cache: {reason}")]
    Cache { reason: String },
    /// A GGUF header that cannot be right (magic, version, a count, a
    /// length, a metadata value, the alignment).
    #[error("GGUF: {reason}")]
    Gguf { reason: String },
    /// One tensor info of a GGUF file is wrong, or has no place in the model.
    #[error("GGUF: tensor {tensor}: {reason}")]
    GgufTensor { tensor: String, reason: String },
    /// A GGUF tensor stored in a type MLX cannot load (K-quants, IQ-quants, …).
    #[error("GGUF: tensor {tensor} is stored as {ggml_type}, which MLX cannot load (supported: {supported}); use a file quantized as one of those")]
    UnsupportedGgufType { tensor: String, ggml_type: String, supported: String },
    /// A `general.architecture` the engine does not run.
    #[error("GGUF: unsupported architecture \"{architecture}\" (supported: {supported})")]
    UnsupportedGgufArchitecture { architecture: String, supported: String },
    /// The `tokenizer.*` metadata cannot be used with this model.
    #[error("GGUF tokenizer: {reason}")]
    GgufTokenizer { reason: String },
}

impl FormatError {
    pub(crate) fn bad(
        file: &'static str,
        field: impl Into<String>,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        Self::BadField { file, field: field.into(), value: value.to_string(), expected: expected.into() }
    }

    /// The field an error is about, if it is about one (the corpus tests check it is named).
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::MissingField { field, .. } | Self::BadField { field, .. } => Some(field),
            _ => None,
        }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
