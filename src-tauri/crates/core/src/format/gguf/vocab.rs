//! What a GGUF file's `tokenizer.*` metadata says: the vocabulary, merges,
//! token kinds, special ids and chat template, as plain values. The engine
//! builds its tokenizer from this (`headroom_engine::tokenizer`); nothing
//! here knows the `tokenizers` crate.

use super::types::{MetaArray, MetaValue};
use super::GgufFile;
use crate::format::error::{FormatError, Result};

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The tokenizer a GGUF file describes (CONTRACT shared by the core reader and
/// the engine's tokenizer builder: fields may be added, not renamed).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE), "llama" (SentencePiece), …
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer's name ("smollm", "qwen2", "llama-bpe", …).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`, one per token, or empty when absent.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges` ("a b" per merge), empty when absent.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.scores`, one per token, or empty when absent.
    pub scores: Vec<f32>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (Llama 3's <|eot_id|>), when given.
    pub eot_id: Option<u32>,
    pub unknown_id: Option<u32>,
    pub padding_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` / `add_eos_token`, when given.
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    /// `tokenizer.chat_template`, when given.
    pub chat_template: Option<String>,
}

/// The keys that name a special token id.
pub(crate) const SPECIAL_ID_KEYS: [&str; 5] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
];

fn tokenizer_err(reason: impl Into<String>) -> FormatError {
    FormatError::GgufTokenizer { reason: reason.into() }
}

impl GgufFile {
    /// The tokenizer the `tokenizer.*` keys describe, checked: every list
    /// one entry per token, every special id a token, and no more tokens
    /// than the embedding has rows (when the file has `token_embd.weight`).
    pub fn vocab(&self) -> Result<GgufVocab> {
        let string = |key: &str| -> Result<Option<String>> {
            match self.get(key) {
                None => Ok(None),
                Some(MetaValue::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(tokenizer_err(format!("{key} is {}, not a string", v.type_name()))),
            }
        };
        let model = string("tokenizer.ggml.model")?.ok_or_else(|| tokenizer_err("tokenizer.ggml.model is missing"))?;
        let tokens = match self.get("tokenizer.ggml.tokens") {
            Some(MetaValue::Array(MetaArray::String(t))) => t.clone(),
            Some(v) => {
                return Err(tokenizer_err(format!(
                    "tokenizer.ggml.tokens is {}, not an array of string",
                    v.type_name()
                )))
            }
            None => return Err(tokenizer_err("tokenizer.ggml.tokens is missing")),
        };
        if tokens.is_empty() {
            return Err(tokenizer_err("tokenizer.ggml.tokens is empty"));
        }
        let n = tokens.len();
        let per_token = |key: &str, len: usize| -> Result<()> {
            if len != n {
                return Err(tokenizer_err(format!("{key} has {len} entries for {n} tokens")));
            }
            Ok(())
        };
        let token_types = match self.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(MetaValue::Array(a)) => {
                let all = a.to_i64s().ok_or_else(|| {
                    tokenizer_err(format!(
                        "tokenizer.ggml.token_type is an array of {}, not integers",
                        a.element_name()
                    ))
                })?;
                per_token("tokenizer.ggml.token_type", all.len())?;
                all.into_iter().map(|t| i32::try_from(t).unwrap_or(token_type::UNKNOWN)).collect()
            }
            Some(v) => {
                return Err(tokenizer_err(format!("tokenizer.ggml.token_type is {}, not an array", v.type_name())))
            }
        };
        let scores = match self.get("tokenizer.ggml.scores") {
            None => Vec::new(),
            Some(MetaValue::Array(MetaArray::F32(s))) => {
                per_token("tokenizer.ggml.scores", s.len())?;
                s.clone()
            }
            Some(v) => {
                return Err(tokenizer_err(format!("tokenizer.ggml.scores is {}, not an array of f32", v.type_name())))
            }
        };
        let merges = match self.get("tokenizer.ggml.merges") {
            None => Vec::new(),
            Some(MetaValue::Array(MetaArray::String(m))) => m.clone(),
            Some(v) => {
                return Err(tokenizer_err(format!(
                    "tokenizer.ggml.merges is {}, not an array of string",
                    v.type_name()
                )))
            }
        };
        let id = |key: &str| -> Result<Option<u32>> {
            let Some(v) = self.get(key) else { return Ok(None) };
            match v.as_u64().and_then(|id| u32::try_from(id).ok()) {
                Some(id) if (id as usize) < n => Ok(Some(id)),
                _ => Err(tokenizer_err(format!("{key} is {v:?}, not the id of one of the {n} tokens"))),
            }
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            match self.get(key) {
                None => Ok(None),
                Some(MetaValue::Bool(b)) => Ok(Some(*b)),
                Some(v) => Err(tokenizer_err(format!("{key} is {}, not a bool", v.type_name()))),
            }
        };
        if let Some(embed) = self.tensor("token_embd.weight") {
            let rows = embed.dims.get(1).copied().unwrap_or(0);
            if n as u64 > rows {
                return Err(tokenizer_err(format!(
                    "{n} tokens, but the embedding (token_embd.weight) has {rows} rows"
                )));
            }
        }
        Ok(GgufVocab {
            model,
            pre: string("tokenizer.ggml.pre")?,
            bos_id: id(SPECIAL_ID_KEYS[0])?,
            eos_id: id(SPECIAL_ID_KEYS[1])?,
            eot_id: id(SPECIAL_ID_KEYS[2])?,
            unknown_id: id(SPECIAL_ID_KEYS[3])?,
            padding_id: id(SPECIAL_ID_KEYS[4])?,
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_eos: flag("tokenizer.ggml.add_eos_token")?,
            chat_template: string("tokenizer.chat_template")?,
            tokens,
            token_types,
            merges,
            scores,
        })
    }
}
