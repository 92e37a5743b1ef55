//! A draft model: a smaller model of the same vocabulary that proposes the
//! next few tokens, which the loaded model then checks in one pass
//! (`generate`, the same verification as prompt lookup). Its proposals are
//! greedy, so deterministic: the standard acceptance rule then keeps the
//! loaded model's output exactly (greedy: token for token; sampled: the
//! same distribution), whatever the draft proposes. Whether it pays is
//! measured per answer by [`crate::lookup::Depth`], down to not drafting.
//!
//! The draft keeps a cache of its own across turns and sessions: before
//! each proposal it is trimmed to what it shares with the conversation and
//! fed the rest, so it never proposes from another conversation's state.

use std::path::{Path, PathBuf};

use mlx_rs::ops::indexing::argmax_axis;
use mlx_rs::transforms::eval;

use headroom_core::kv::KvFormat;

use crate::cache::KvCache;
use crate::error::{EngineError, MlxContext, Result};
use crate::models::{Logits, Model};
use crate::quant::QuantKernel;
use crate::tokenizer::Tokenizer;
use crate::weights::ComputeDtype;

/// A loaded draft model and its cache.
pub struct Draft {
    model: Model,
    cache: KvCache,
    /// The prefill chunk its catch-up is fed in.
    chunk: usize,
}

impl std::fmt::Debug for Draft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draft").field("cached", &self.cache.offset()).finish()
    }
}

/// A draft model's folder whose vocabulary was checked against the model's
/// ([`Draft::check_vocabulary`]): what [`Draft::load`] takes, so a load
/// checks it once, before the model it replaces is unloaded.
#[derive(Debug, Clone)]
pub struct SameVocabulary(PathBuf);

impl SameVocabulary {
    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Draft {
    /// Whether the model in `dir` speaks the vocabulary of `target` (the
    /// loaded model's tokenizer): as many tokens, the same ones at 512 ids
    /// spread over it. Cheap (its tokenizer only), so a load checks it
    /// before the model it replaces is unloaded.
    pub fn check_vocabulary(dir: &Path, target: &Tokenizer) -> Result<SameVocabulary> {
        let refuse = |reason: String| EngineError::DraftModel { path: dir.to_owned(), reason };
        let words = Tokenizer::for_model(dir)?;
        let (vocab, target_vocab) = (words.vocab_size(), target.vocab_size());
        if vocab != target_vocab {
            return Err(refuse(format!("its vocabulary has {vocab} tokens, the loaded model's {target_vocab}")));
        }
        let stride = (vocab / 512).max(1);
        for id in (0..vocab).step_by(stride).filter_map(|i| u32::try_from(i).ok()) {
            let (a, b) = (words.decode(&[id], false)?, target.decode(&[id], false)?);
            if a != b {
                return Err(refuse(format!(
                    "token {id} is {a:?} there and {b:?} in the loaded model: another vocabulary"
                )));
            }
        }
        Ok(SameVocabulary(dir.to_owned()))
    }

    /// Loads the draft whose vocabulary was `checked` as `dtype` with
    /// `kernel`, its cache stored as `kv` (as the model's is), for proposing
    /// to `target`: refused unless it has as many output rows and a cache
    /// that can step back past rejected proposals (full attention in every
    /// layer), both before its weights are read.
    pub fn load(
        checked: &SameVocabulary,
        (dtype, kernel, kv): (ComputeDtype, QuantKernel, KvFormat),
        target: &Model,
        chunk: usize,
    ) -> Result<Self> {
        let dir = checked.dir();
        let refuse = |reason: String| EngineError::DraftModel { path: dir.to_owned(), reason };
        let model = crate::loader::stage(dir, dtype, kernel)?;
        let rows = (model.config().text.vocab_size, target.config().text.vocab_size);
        if rows.0 != rows.1 {
            return Err(refuse(format!("its output has {} rows, the loaded model's {}", rows.0, rows.1)));
        }
        // Stored as the model's cache is: the fit counts its layers in that format.
        let cache = model.new_cache_as(kv).map_err(|e| refuse(e.to_string()))?;
        if !cache.always_steps_back() {
            return Err(refuse(format!(
                "a {} cannot step back past a rejected proposal (sliding windows or recurrent layers); a draft model must use full attention",
                model.config().model_type_name()
            )));
        }
        // Checked before its weights are read.
        crate::loader::materialize(&model, dir)?;
        Ok(Self { model, cache, chunk: chunk.max(1) })
    }

    /// Brings the cache to `seq` but its last token: trimmed to what they
    /// share, the rest fed in prefill chunks (the tokens the model decoded
    /// while the draft was idle). Returns what is left to feed (at least
    /// `seq`'s last token), for [`Self::propose`].
    pub fn catch_up<'a>(&mut self, seq: &'a [u32]) -> Result<&'a [u32]> {
        let kept = self.cache.reuse_prefix(seq);
        let mut rest = &seq[kept..];
        while rest.len() > 1 {
            let take = self.chunk.min(rest.len() - 1);
            self.model.forward(&ids(&rest[..take]), &mut self.cache)?;
            self.cache.push_tokens(&rest[..take]);
            eval(self.cache.arrays()).op("draft prefill")?;
            rest = &rest[take..];
        }
        Ok(rest)
    }

    /// Up to `n` greedy proposals for what follows the conversation, once
    /// [`Self::catch_up`] has brought the cache to it: `rest` is what that
    /// returned (its last token at least, not yet checked by the loaded
    /// model). The cache is left holding the conversation exactly.
    pub fn propose(&mut self, rest: &[u32], n: usize) -> Result<Vec<u32>> {
        if n == 0 || rest.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(n);
        let mut feed = rest.to_vec();
        loop {
            let logits = self.model.forward_with(&ids(&feed), &mut self.cache, Logits::Last)?;
            self.cache.push_tokens(&feed);
            let next = argmax_axis(&logits, -1, None).op("draft argmax")?.as_dtype(mlx_rs::Dtype::Uint32).op("cast")?;
            eval([&next]).op("draft step")?;
            let token = next.as_slice::<u32>().first().copied().unwrap_or(0);
            out.push(token);
            if out.len() == n {
                break;
            }
            feed = vec![token];
        }
        // The proposals fed back (all but the last) are not the conversation's yet.
        self.cache.trim(n - 1);
        Ok(out)
    }
}

fn ids(tokens: &[u32]) -> mlx_rs::Array {
    let len = i32::try_from(tokens.len()).unwrap_or(i32::MAX);
    mlx_rs::Array::from_slice(tokens, &[1, len])
}
