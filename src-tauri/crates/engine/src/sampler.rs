//! Turning logits into the next token: greedy at temperature 0, otherwise
//! temperature + top-p / min-p / top-k filters and a repetition penalty, in
//! mlx-lm's order (penalty on logits; then top_p -> min_p -> top_k on
//! log-probabilities; then a categorical draw). The sampler owns its random
//! key, so a seed makes a run repeatable whatever else uses MLX's RNG.

use mlx_rs::ops::{self, indexing};
use mlx_rs::random::RandomState;
use mlx_rs::{Array, Dtype};

use crate::error::{EngineError, MlxContext, Result};

/// Sampling settings; the defaults are greedy decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep the smallest set of tokens whose probability reaches `top_p`; 1 (or 0) disables.
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens; 0 disables.
    pub top_k: i32,
    /// Drop tokens less likely than `min_p` × the top token's probability; 0 disables.
    pub min_p: f32,
    /// mlx-lm's sign-aware multiplicative penalty on recent tokens; 1 (or 0) disables.
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at (mlx-lm's default: 20).
    pub repetition_context_size: usize,
    /// Seed of the sampler's own random key; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repetition_context_size: 20,
            seed: None,
        }
    }
}

impl SamplingParams {
    fn validate(&self) -> Result<()> {
        let bad = |name, value: String, reason| Err(EngineError::InvalidSetting { name, value, reason });
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature.to_string(), "must be finite and >= 0");
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p", self.top_p.to_string(), "must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p.to_string(), "must be in [0, 1]");
        }
        if self.top_k < 0 {
            return bad("top_k", self.top_k.to_string(), "must be >= 0");
        }
        if !(self.repetition_penalty >= 0.0 && self.repetition_penalty.is_finite()) {
            return bad("repetition_penalty", self.repetition_penalty.to_string(), "must be finite and >= 0");
        }
        Ok(())
    }
}

/// A configured sampler with its own random state.
#[derive(Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: RandomState,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = match params.seed {
            Some(seed) => RandomState::with_seed(seed),
            None => RandomState::with_seed(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
            ),
        }
        .op("random key")?;
        Ok(Self { params, rng })
    }

    /// Whether the logits processors need the token history.
    pub fn uses_history(&self) -> bool {
        self.penalty_active()
    }

    fn penalty_active(&self) -> bool {
        let p = self.params.repetition_penalty;
        p != 0.0 && p != 1.0 && self.params.repetition_context_size > 0
    }

    /// Logits `[1, vocab]` -> the next token, `[1]` u32 (lazy: nothing is evaluated here).
    /// `history` is every token so far (prompt and generated), for the penalty.
    pub fn sample(&mut self, logits: &Array, history: &[u32]) -> Result<Array> {
        let mut logits = logits.clone();
        if self.penalty_active() && !history.is_empty() {
            logits = self.repetition_penalty(&logits, history)?;
        }
        // Greedy decoding too takes the argmax of the log-probabilities, not
        // of the logits: in bf16 the subtraction rounds, which can tie or
        // reorder the top two, and mlx-lm's tokens are the reference.
        let logprobs = logits.subtract(ops::logsumexp_axis(&logits, -1, true).op("logsumexp")?).op("logprobs")?;
        let p = &self.params;
        if p.temperature == 0.0 {
            return indexing::argmax_axis(&logprobs, -1, None).op("argmax")?.as_dtype(Dtype::Uint32).op("cast");
        }
        let mut lp = logprobs;
        if 0.0 < p.top_p && p.top_p < 1.0 {
            lp = apply_top_p(&lp, p.top_p)?;
        }
        if p.min_p != 0.0 {
            lp = apply_min_p(&lp, p.min_p)?;
        }
        let vocab = lp.dim(-1);
        if p.top_k > 0 && p.top_k < vocab {
            lp = apply_top_k(&lp, p.top_k)?;
        }
        let key = self.rng.next_key().op("random key")?;
        let scaled = lp.multiply(Array::from_f32(1.0 / p.temperature)).op("temperature")?;
        mlx_rs::random::categorical(&scaled, -1, None, &key).op("categorical")?.as_dtype(Dtype::Uint32).op("cast")
    }

    fn repetition_penalty(&self, logits: &Array, history: &[u32]) -> Result<Array> {
        let start = history.len().saturating_sub(self.params.repetition_context_size);
        let ids: Vec<i32> = history[start..].iter().map(|&t| t as i32).collect();
        let idx = Array::from_slice(&ids, &[1, ids.len() as i32]);
        let selected = logits.take_along_axis(&idx, -1).op("penalty gather")?;
        let penalty = Array::from_f32(self.params.repetition_penalty);
        let penalized = ops::select(
            selected.lt(Array::from_f32(0.0)).op("penalty")?,
            selected.multiply(&penalty).op("penalty")?,
            selected.divide(&penalty).op("penalty")?,
        )
        .op("penalty")?;
        logits.put_along_axis(&idx, &penalized, -1).op("penalty scatter")
    }
}

/// Nucleus filter, as mlx-lm: drop tokens below the threshold where the
/// probability mass above reaches `top_p`.
fn apply_top_p(logprobs: &Array, top_p: f32) -> Result<Array> {
    let sorted = ops::sort_axis(logprobs, -1).op("top_p")?;
    let probs = sorted.as_dtype(Dtype::Float32).op("top_p")?.exp().op("top_p")?;
    let mass_above = ops::cumsum(&probs, -1, true, false).op("top_p")?;
    let total = indexing::TryIndexOp::try_index(&mass_above, (.., ..1))
        .op("top_p")?
        .add(indexing::TryIndexOp::try_index(&probs, (.., ..1)).op("top_p")?)
        .op("top_p")?;
    let dropped = mass_above
        .ge(total.multiply(Array::from_f32(top_p)).op("top_p")?)
        .op("top_p")?
        .as_dtype(Dtype::Int32)
        .op("top_p")?
        .sum_axis(-1, true)
        .op("top_p")?;
    let threshold = sorted.take_along_axis(&dropped, -1).op("top_p")?;
    let neg_inf = Array::from_f32(f32::NEG_INFINITY).as_dtype(logprobs.dtype()).op("top_p")?;
    ops::select(logprobs.lt(&threshold).op("top_p")?, &neg_inf, logprobs).op("top_p")
}

fn apply_min_p(logprobs: &Array, min_p: f32) -> Result<Array> {
    let top = logprobs.max_axis(-1, true).op("min_p")?;
    let floor = top.add(Array::from_f32(min_p.ln())).op("min_p")?;
    let neg_inf = Array::from_f32(f32::NEG_INFINITY).as_dtype(logprobs.dtype()).op("min_p")?;
    ops::select(logprobs.lt(&floor).op("min_p")?, &neg_inf, logprobs).op("min_p")
}

fn apply_top_k(logprobs: &Array, k: i32) -> Result<Array> {
    let neg = logprobs.negative().op("top_k")?;
    let order = ops::argpartition_axis(&neg, k - 1, -1).op("top_k")?;
    let vocab = logprobs.dim(-1);
    let drop = indexing::TryIndexOp::try_index(&order, (.., k..vocab)).op("top_k")?;
    let neg_inf = Array::from_f32(f32::NEG_INFINITY).as_dtype(logprobs.dtype()).op("top_k")?;
    let fill = ops::broadcast_to(&neg_inf, drop.shape()).op("top_k")?;
    logprobs.put_along_axis(&drop, &fill, -1).op("top_k")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Array {
        Array::from_slice(&[0.1f32, 2.0, -1.0, 1.5, 0.3, 1.9, -0.2, 0.0], &[1, 8])
    }

    fn draw(params: SamplingParams, n: usize) -> Result<Vec<u32>> {
        let mut s = Sampler::new(params)?;
        (0..n).map(|_| Ok(s.sample(&logits(), &[])?.item_exact::<u32>())).collect()
    }

    #[test]
    fn greedy_is_argmax() -> Result<()> {
        assert_eq!(draw(SamplingParams::default(), 3)?, [1, 1, 1]);
        Ok(())
    }

    #[test]
    fn a_seed_makes_sampling_repeatable() -> Result<()> {
        let p = SamplingParams { temperature: 1.0, seed: Some(42), ..Default::default() };
        let a = draw(p.clone(), 40)?;
        assert_eq!(a, draw(p, 40)?);
        // A real draw, not a constant: more than one token comes up.
        assert!(a.iter().any(|&t| t != a[0]));
        let other = draw(SamplingParams { temperature: 1.0, seed: Some(43), ..Default::default() }, 40)?;
        assert_ne!(a, other);
        Ok(())
    }

    #[test]
    fn filters_keep_only_the_allowed_tokens() -> Result<()> {
        // top_k = 2 keeps tokens 1 (2.0) and 5 (1.9).
        let k = draw(SamplingParams { temperature: 1.0, top_k: 2, seed: Some(1), ..Default::default() }, 50)?;
        assert_eq!(k.len(), 50);
        assert!(k.iter().all(|t| [1, 5].contains(t)), "{k:?}");
        // min_p = 0.5 keeps tokens within ln 2 of the top: 1, 5, 3.
        let m = draw(SamplingParams { temperature: 1.0, min_p: 0.5, seed: Some(2), ..Default::default() }, 50)?;
        assert_eq!(m.len(), 50);
        assert!(m.iter().all(|t| [1, 5, 3].contains(t)), "{m:?}");
        // A tiny top_p keeps only the most likely token.
        let p = draw(SamplingParams { temperature: 1.0, top_p: 0.05, seed: Some(3), ..Default::default() }, 20)?;
        assert_eq!(p.len(), 20);
        assert!(p.iter().all(|&t| t == 1), "{p:?}");
        Ok(())
    }

    #[test]
    fn repetition_penalty_moves_greedy_off_a_repeated_token() -> Result<()> {
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 1.5, ..Default::default() })?;
        // 2.0 / 1.5 < 1.9: token 5 wins once token 1 was seen.
        assert_eq!(s.sample(&logits(), &[1])?.item_exact::<u32>(), 5);
        assert_eq!(s.sample(&logits(), &[7])?.item_exact::<u32>(), 1);
        Ok(())
    }

    #[test]
    fn rejects_out_of_range_settings() {
        let bad = SamplingParams { top_p: 1.5, ..Default::default() };
        assert!(matches!(Sampler::new(bad), Err(EngineError::InvalidSetting { name: "top_p", .. })));
        let bad = SamplingParams { temperature: -1.0, ..Default::default() };
        assert!(matches!(Sampler::new(bad), Err(EngineError::InvalidSetting { name: "temperature", .. })));
    }
}
