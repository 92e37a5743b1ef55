//! The starter shelf: real models people run on 16–32 GB Macs, recorded as
//! the hub describes them (the repo's config.json, and every weight
//! tensor's dtype and shape), so the fit can say which of them this Mac can
//! run before anything is downloaded, offline.
//!
//! The recorded shelf is `assets/shelf.json`, written by
//! `scripts/shelf/record.py`; the app refreshes a model's record from the
//! hub when it is online (same [`ShelfRecord`] shape, one file per repo).
//! A record becomes a [`ShelfModel`] through the one model-format reader:
//! its config through [`ModelConfig::parse`], its tensors through the
//! safetensors header parser, so a shelf verdict and a pull's verdict from
//! the real headers are computed by the same code.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::fit::ModelFootprint;
use crate::format::safetensors::parse_header;
use crate::format::{footprint, FormatError, Header, LoadShape, ModelConfig};

/// The shelf as recorded in the repo.
pub const RECORDED: &str = include_str!("../../../../assets/shelf.json");

/// Stands for each layer index, `0..layers`, in a recorded tensor name.
pub const LAYER_PLACEHOLDER: &str = "{i}";

/// The recorded shelf: when and how it was recorded, and its models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shelf {
    /// The day the records were written (ISO date).
    pub recorded_on: String,
    /// The command that wrote them.
    pub recorded_by: String,
    pub models: Vec<ShelfRecord>,
}

/// One model as the hub describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShelfRecord {
    /// The Hugging Face repo a pull fetches ("mlx-community/Qwen3-8B-4bit").
    pub repo: String,
    /// The name the shelf shows ("Qwen3 8B").
    pub name: String,
    /// One line on what it is good at.
    pub about: String,
    pub license: String,
    /// The repo asks the user to accept terms (a Hugging Face token is needed).
    pub gated: bool,
    /// Bytes a pull downloads (every file of the repo), as the hub lists them;
    /// `None` where the record does not know.
    pub download_bytes: Option<u64>,
    /// The weight files' sizes as the hub's Files page shows them (decimal
    /// GB, rounded to 0.01), which the recorded tensors must add up to
    /// within that rounding (a check on the record, not used by the fit).
    #[serde(default)]
    pub hub_files_gb: Option<Vec<f64>>,
    /// Where the record's facts come from (URLs, or "hub <commit>" for a refresh).
    pub source: String,
    /// The repo's config.json.
    pub config: Value,
    /// How many layers [`LAYER_PLACEHOLDER`] expands to (0: no placeholder).
    #[serde(default)]
    pub layers: u32,
    /// Every weight tensor: name, safetensors dtype, shape.
    pub tensors: Vec<(String, String, Vec<u64>)>,
}

/// A record read and checked: what the fit needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ShelfModel {
    pub record: ShelfRecord,
    pub config: ModelConfig,
    /// The weights as one safetensors header (offsets laid end to end).
    pub header: Header,
}

#[derive(Debug, thiserror::Error)]
pub enum ShelfError {
    #[error("the shelf is not valid JSON of the expected shape: {reason}")]
    Json { reason: String },
    #[error("{repo}: {source}")]
    Format {
        repo: String,
        #[source]
        source: FormatError,
    },
    #[error("{repo}: tensor {tensor}: {reason}")]
    Tensor { repo: String, tensor: String, reason: String },
}

/// Parses a whole shelf file ([`RECORDED`]'s shape).
pub fn parse_shelf(text: &str) -> Result<Shelf, ShelfError> {
    serde_json::from_str(text).map_err(|e| ShelfError::Json { reason: e.to_string() })
}

/// Parses one refreshed record (a [`ShelfRecord`] alone).
pub fn parse_record(text: &str) -> Result<ShelfRecord, ShelfError> {
    serde_json::from_str(text).map_err(|e| ShelfError::Json { reason: e.to_string() })
}

/// The recorded shelf, every model checked. The test below keeps every
/// record readable, so an error here is a broken build, reported per model.
pub fn recorded() -> Result<Vec<ShelfModel>, ShelfError> {
    parse_shelf(RECORDED)?.models.into_iter().map(ShelfRecord::check).collect()
}

impl ShelfRecord {
    /// Reads the config and the tensors through the model-format reader.
    pub fn check(self) -> Result<ShelfModel, ShelfError> {
        let format = |source| ShelfError::Format { repo: self.repo.clone(), source };
        let config_text = serde_json::to_vec(&self.config).map_err(|e| ShelfError::Json { reason: e.to_string() })?;
        let config = ModelConfig::parse(&config_text).map_err(format)?;
        let (json, data_len) = self.header_json()?;
        let header = parse_header(&json, 8 + json.len() as u64 + data_len).map_err(format)?;
        Ok(ShelfModel { record: self, config, header })
    }

    /// The tensors as the JSON header of one safetensors file holding them
    /// all, and that file's data length.
    fn header_json(&self) -> Result<(Vec<u8>, u64), ShelfError> {
        let bad = |tensor: &str, reason: String| ShelfError::Tensor {
            repo: self.repo.clone(),
            tensor: tensor.to_owned(),
            reason,
        };
        let mut entries = Map::new();
        let mut offset = 0u64;
        for (name, dtype, shape) in &self.tensors {
            let size =
                crate::format::Dtype::parse(dtype).ok_or_else(|| bad(name, format!("unknown dtype {dtype}")))?.size();
            let bytes = shape
                .iter()
                .try_fold(size, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad(name, "its size overflows".into()))?;
            let names: Vec<String> = if name.contains(LAYER_PLACEHOLDER) {
                if self.layers == 0 {
                    return Err(bad(name, format!("{LAYER_PLACEHOLDER} with no layer count")));
                }
                (0..self.layers).map(|i| name.replace(LAYER_PLACEHOLDER, &i.to_string())).collect()
            } else {
                vec![name.clone()]
            };
            for n in names {
                let end = offset.checked_add(bytes).ok_or_else(|| bad(&n, "the total overflows".into()))?;
                if entries
                    .insert(n.clone(), json!({ "dtype": dtype, "shape": shape, "data_offsets": [offset, end] }))
                    .is_some()
                {
                    return Err(bad(&n, "listed twice".into()));
                }
                offset = end;
            }
        }
        let json = serde_json::to_vec(&entries).map_err(|e| ShelfError::Json { reason: e.to_string() })?;
        Ok((json, offset))
    }
}

impl ShelfModel {
    /// The footprint as the engine would load it (`shape`), from the same
    /// function a folder's and a hub repo's footprints come from.
    pub fn footprint(&self, shape: LoadShape) -> ModelFootprint {
        footprint(&self.config, std::slice::from_ref(&self.header), shape)
    }

    /// Bytes of every recorded tensor.
    pub fn tensor_bytes(&self) -> u64 {
        self.header.tensors.values().map(|t| t.nbytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recorded_model_reads_and_is_a_real_size() {
        let shelf = parse_shelf(RECORDED).unwrap();
        let models = recorded().unwrap();
        assert!(models.len() >= 6, "{} models", models.len());
        assert_eq!(models.len(), shelf.models.len());
        for m in &models {
            let fp = m.footprint(LoadShape::default());
            // A 4-bit 3B model is over 1.5 GB; none on the shelf is a toy.
            assert!(fp.weight_bytes > 1_500_000_000, "{}: {} weight bytes", m.record.repo, fp.weight_bytes);
            assert_eq!(m.config.quantization.as_ref().map(|q| q.default.bits), Some(4), "{}", m.record.repo);
            if let Some(shown) = &m.record.hub_files_gb {
                // Each file's rounding to 0.01 GB, plus its safetensors header (under 1 MB).
                let slack = shown.len() as f64 * (0.005e9 + 1e6);
                let hub: f64 = shown.iter().sum::<f64>() * 1e9;
                let off = m.tensor_bytes() as f64 - hub;
                assert!(
                    off.abs() <= slack,
                    "{}: the tensors are {off:+.0} bytes off the hub's {shown:?} GB",
                    m.record.repo
                );
            }
            if let Some(download) = m.record.download_bytes {
                // The download is the weights plus config, tokenizer and the like.
                assert!(download >= m.tensor_bytes(), "{}: {download} < {}", m.record.repo, m.tensor_bytes());
                assert!(
                    download - m.tensor_bytes() < 60_000_000,
                    "{}: {download} vs {}",
                    m.record.repo,
                    m.tensor_bytes()
                );
            }
        }
    }

    fn tiny(tensors: Vec<(&str, &str, Vec<u64>)>, layers: u32) -> ShelfRecord {
        ShelfRecord {
            repo: "test/tiny".into(),
            name: "Tiny".into(),
            about: String::new(),
            license: "mit".into(),
            gated: false,
            download_bytes: None,
            hub_files_gb: None,
            source: "test".into(),
            config: json!({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "vocab_size": 100, "rms_norm_eps": 1e-6}),
            layers,
            tensors: tensors.into_iter().map(|(n, d, s)| (n.to_owned(), d.to_owned(), s)).collect(),
        }
    }

    #[test]
    fn the_layer_placeholder_expands_to_each_layer() {
        let m = tiny(vec![("model.layers.{i}.mlp.up_proj.weight", "BF16", vec![128, 64])], 2).check().unwrap();
        let names: Vec<&str> = m.header.tensors.keys().map(String::as_str).collect();
        assert_eq!(names, ["model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"]);
        assert_eq!(m.tensor_bytes(), 2 * 128 * 64 * 2);
    }

    #[test]
    fn bad_records_get_typed_errors() {
        let err = tiny(vec![("a.weight", "Q9", vec![1])], 0).check().unwrap_err();
        assert!(matches!(err, ShelfError::Tensor { ref reason, .. } if reason.contains("unknown dtype Q9")), "{err}");
        let err = tiny(vec![("a.{i}.weight", "F16", vec![1])], 0).check().unwrap_err();
        assert!(err.to_string().contains("no layer count"), "{err}");
        let err = tiny(vec![("a.weight", "F16", vec![1]), ("a.weight", "F16", vec![2])], 0).check().unwrap_err();
        assert!(err.to_string().contains("listed twice"), "{err}");
        let err = tiny(vec![("a.weight", "F16", vec![u64::MAX, 4])], 0).check().unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        // Past MLX's i32 dimension limit: the safetensors parser's own check.
        let err = tiny(vec![("a.weight", "U8", vec![1 << 32])], 0).check().unwrap_err();
        assert!(matches!(err, ShelfError::Format { .. }), "{err}");
        let mut unknown = tiny(vec![], 0);
        unknown.config["model_type"] = json!("phi3");
        let err = unknown.check().unwrap_err();
        assert!(matches!(err, ShelfError::Format { source: FormatError::UnknownModelType { .. }, .. }), "{err}");
        assert!(matches!(parse_shelf("{\"models\": 3}"), Err(ShelfError::Json { .. })));
    }
}
