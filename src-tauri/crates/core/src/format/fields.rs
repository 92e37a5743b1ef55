//! Checked access to the fields of a parsed `config.json`: each value is
//! read once, with its type and range checked, and a bad one becomes a
//! [`FormatError`] naming the field. The architecture files read their
//! fields through this, so a hostile size (`"head_dim": -2147483648`) never
//! reaches arithmetic.

use serde_json::{Map, Value};

use super::error::{FormatError, Result};

/// The file errors are labelled with.
pub(crate) const CONFIG: &str = "config.json";

/// Upper bounds on sizes, far above any real model (the largest public
/// checkpoints have hidden 16384, 128 heads, 126 layers, vocabularies of
/// 262144, intermediate 53248, contexts of 10 M) and low enough that every
/// product the engine forms as an MLX shape (heads × head_dim, in × bits)
/// stays within i32, and every byte count within u64.
pub mod limits {
    pub const HIDDEN_SIZE: u64 = 1 << 17;
    pub const HEADS: u64 = 1 << 10;
    pub const HEAD_DIM: u64 = 1 << 12;
    pub const LAYERS: u64 = 1 << 10;
    pub const INTERMEDIATE_SIZE: u64 = 1 << 19;
    pub const VOCAB_SIZE: u64 = 1 << 22;
    pub const MAX_POSITION_EMBEDDINGS: u64 = 1 << 27;
    /// RoPE bases seen in the wild go up to about 1e8.
    pub const ROPE_THETA: f64 = 1e12;
    /// Experts in a mixture-of-experts layer (the largest public models have 512).
    pub const EXPERTS: u64 = 1 << 12;
    /// A causal convolution's width (linear attention uses 4).
    pub const CONV_KERNEL: u64 = 64;
}

/// The fields of one JSON object, read with checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    obj: &'a Map<String, Value>,
    file: &'static str,
    /// Prefix for nested objects (`rope_scaling.`), empty at the top.
    prefix: &'a str,
    /// Named in "missing" errors: which architecture needs the field.
    model_type: &'a str,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(obj: &'a Map<String, Value>, file: &'static str, model_type: &'a str) -> Self {
        Self { obj, file, prefix: "", model_type }
    }

    pub(crate) fn nested(
        obj: &'a Map<String, Value>,
        file: &'static str,
        prefix: &'a str,
        model_type: &'a str,
    ) -> Self {
        Self { obj, file, prefix, model_type }
    }

    /// The object under `key` (e.g. `text_config`), its fields named
    /// `key.field` in errors; `None` if absent.
    pub(crate) fn child(&self, key: &str, prefix: &'static str) -> Result<Option<Fields<'a>>> {
        Ok(self.object(key)?.map(|obj| Fields::nested(obj, self.file, prefix, self.model_type)))
    }

    /// A list of sizes (e.g. `mlp_only_layers`), each in `0..max`.
    pub(crate) fn indices(&self, key: &str, max: u64) -> Result<Option<Vec<i32>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let bad = || self.bad(key, v, format!("a list of whole numbers below {max}"));
        let list = v.as_array().ok_or_else(bad)?;
        list.iter()
            .map(|x| x.as_u64().filter(|n| *n < max).and_then(|n| i32::try_from(n).ok()).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// `rope_scaling.` inside a nested object, empty at the top.
    pub(crate) fn prefix(&self) -> &str {
        self.prefix
    }

    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The raw value; JSON `null` counts as absent (as Python's `None`).
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    /// The value as written, `null` included (where null and absent differ).
    pub(crate) fn raw(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key)
    }

    pub(crate) fn missing(&self, key: &str) -> FormatError {
        FormatError::MissingField { file: self.file, field: self.name(key), model_type: self.model_type.to_owned() }
    }

    fn bad(&self, key: &str, value: &Value, expected: impl Into<String>) -> FormatError {
        FormatError::bad(self.file, self.name(key), value, expected)
    }

    /// A size: an integer in `1..=max`.
    pub(crate) fn size(&self, key: &str, max: u64) -> Result<Option<i32>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        match v.as_u64() {
            // `max` is below i32::MAX for every limit.
            Some(n) if (1..=max).contains(&n) => Ok(Some(i32::try_from(n).unwrap_or(i32::MAX))),
            _ => Err(self.bad(key, v, format!("a whole number from 1 to {max}"))),
        }
    }

    pub(crate) fn required_size(&self, key: &str, max: u64) -> Result<i32> {
        self.size(key, max)?.ok_or_else(|| self.missing(key))
    }

    /// A finite number in the open interval `(0, max]`.
    pub(crate) fn positive(&self, key: &str, max: f64) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 && x <= max => Ok(Some(x)),
            _ => Err(self.bad(key, v, format!("a number above 0 and at most {max:e}"))),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_bool().map(Some).ok_or_else(|| self.bad(key, v, "true or false"))
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<&'a str>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_str().map(Some).ok_or_else(|| self.bad(key, v, "a string"))
    }

    pub(crate) fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_object().map(Some).ok_or_else(|| self.bad(key, v, "an object"))
    }
}

/// Parses `text` as the JSON object a config file must be.
pub(crate) fn object(text: &[u8], file: &'static str) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(FormatError::Json { file, reason: format!("expected an object, found {}", kind(&other)) }),
        Err(e) => Err(FormatError::Json { file, reason: e.to_string() }),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
