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

/// `logits - logsumexp(logits)` over the vocabulary, as mlx-lm's sampler
/// takes them.
fn logprobs(logits: &Array) -> Result<Array> {
    logits.subtract(ops::logsumexp_axis(logits, -1, true).op("logsumexp")?).op("logprobs")
}

/// Each row's argmax of the log-probabilities, read from f32 logits `[rows,
/// vocab]` without computing them, where that is certain: the row's largest
/// logit leads every other by at least [`CLEAR_LEAD`]. `None` (the caller
/// computes them, as mlx-lm does) for other dtypes, non-finite logits, or a
/// row whose top two are closer.
///
/// Why it is the same token: subtracting the row's log-sum-exp `c` rounds
/// monotonically, so only logits that round to the top one's `fl(m - c)`
/// could take the argmax from it, and `m - c` lies within `[-ln V, 0]`, so
/// two values `d` apart stay apart once `d` exceeds an f32 spacing at
/// `ln V + d` (about 3e-6 for 150,000 tokens). Why bother: over a 49,152-token
/// vocabulary the log-sum-exp is 0.85 ms a row on the CPU backend (a scalar
/// exponential per logit), 14 ms of a 17-row verification pass.
fn clear_argmax(logits: &Array) -> Result<Option<Vec<u32>>> {
    if logits.dtype() != Dtype::Float32 || logits.ndim() != 2 {
        return Ok(None);
    }
    let vocab = logits.dim(-1) as usize;
    let Ok(flat) = logits.try_as_slice::<f32>() else { return Ok(None) };
    if vocab == 0 {
        return Ok(None);
    }
    let mut best = Vec::with_capacity(flat.len() / vocab);
    for row in flat.chunks_exact(vocab) {
        let (mut top, mut at, mut second) = (f32::NEG_INFINITY, 0, f32::NEG_INFINITY);
        for (i, &v) in row.iter().enumerate() {
            if !v.is_finite() {
                return Ok(None);
            }
            if v > top {
                (second, top, at) = (top, v, i);
            } else if v > second {
                second = v;
            }
        }
        if top - second < CLEAR_LEAD {
            return Ok(None);
        }
        best.push(at as u32);
    }
    Ok(Some(best))
}

/// How far a row's top logit must lead for [`clear_argmax`]: thirty times
/// the f32 spacing the argument needs, so no vocabulary size comes near it.
const CLEAR_LEAD: f32 = 1e-4;

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
        let logprobs = logprobs(&logits)?;
        let p = &self.params;
        if p.temperature == 0.0 {
            return indexing::argmax_axis(&logprobs, -1, None).op("argmax")?.as_dtype(Dtype::Uint32).op("cast");
        }
        let temperature = p.temperature;
        let lp = self.filter(logprobs)?;
        let key = self.rng.next_key().op("random key")?;
        let scaled = lp.multiply(Array::from_f32(1.0 / temperature)).op("temperature")?;
        mlx_rs::random::categorical(&scaled, -1, None, &key).op("categorical")?.as_dtype(Dtype::Uint32).op("cast")
    }

    /// Checks `draft` against `logits` (`[1, k+1, vocab]`: row `i` follows
    /// the fed token and `draft[..i]`): how many proposals are accepted, and
    /// the token that follows them (the correction at the first rejection,
    /// or the next token after a fully accepted draft). Evaluates.
    ///
    /// Greedy: a proposal is accepted when it is the argmax, so the tokens
    /// are those plain decoding gives. Sampled: the speculative-sampling rule
    /// for a deterministic proposal, which keeps the model's distribution
    /// exactly: accept `d` with probability p(d); on rejection draw from p
    /// with `d` removed (p's residual once the point mass on `d` is taken off).
    pub fn verify(&mut self, logits: &Array, draft: &[u32], history: &[u32]) -> Result<(usize, u32)> {
        let k = draft.len();
        let rows = i32::try_from(k + 1).unwrap_or(i32::MAX);
        let vocab = logits.dim(-1);
        let logits = logits.reshape(&[rows, vocab]).op("verify rows")?;
        let logits = if self.penalty_active() && (k > 0 || !history.is_empty()) {
            // Row i's history includes the proposals before it.
            let mut h = history.to_vec();
            let mut out = Vec::with_capacity(k + 1);
            for i in 0..=k {
                let row = indexing::TryIndexOp::try_index(&logits, (i as i32..i as i32 + 1, ..)).op("verify row")?;
                out.push(if h.is_empty() { row } else { self.repetition_penalty(&row, &h)? });
                if let Some(&d) = draft.get(i) {
                    h.push(d);
                }
            }
            ops::concatenate(&out, 0).op("verify rows")?
        } else {
            logits
        };
        let p = self.params.clone();
        if p.temperature == 0.0 {
            let best = match clear_argmax(&logits)? {
                Some(best) => best,
                None => {
                    let lp = logprobs(&logits)?;
                    let best = indexing::argmax_axis(&lp, -1, None).op("argmax")?.as_dtype(Dtype::Uint32).op("cast")?;
                    best.as_slice::<u32>().to_vec()
                }
            };
            let accepted = draft.iter().zip(&best).take_while(|(d, b)| d == b).count();
            return Ok((accepted, best[accepted]));
        }
        let lp = logprobs(&logits)?;
        let lp = self.filter(lp)?;
        let scaled = lp.multiply(Array::from_f32(1.0 / p.temperature)).op("temperature")?;
        let last = indexing::TryIndexOp::try_index(&scaled, (rows - 1..rows, ..)).op("verify")?;
        let bonus_key = self.rng.next_key().op("random key")?;
        let bonus = mlx_rs::random::categorical(&last, -1, None, &bonus_key).op("categorical")?;
        if k == 0 {
            let bonus = bonus.as_dtype(Dtype::Uint32).op("cast")?;
            return Ok((0, bonus.as_slice::<u32>()[0]));
        }
        let kk = rows - 1;
        let checked = indexing::TryIndexOp::try_index(&scaled, (..kk, ..)).op("verify")?;
        let ids: Vec<i32> = draft.iter().map(|&t| t as i32).collect();
        let ids = Array::from_slice(&ids, &[kk, 1]);
        let probs = ops::softmax_axis(&checked, -1, true).op("softmax")?;
        let p_draft = probs.take_along_axis(&ids, -1).op("verify gather")?;
        let u_key = self.rng.next_key().op("random key")?;
        let u = mlx_rs::random::uniform::<_, f32>(0.0f32, 1.0f32, &[kk, 1][..], &u_key).op("uniform")?;
        let accept = u.lt(&p_draft).op("accept")?;
        let neg_inf = Array::from_f32(f32::NEG_INFINITY).as_dtype(checked.dtype()).op("verify")?;
        let fill = ops::broadcast_to(&neg_inf, ids.shape()).op("verify")?;
        let residual = checked.put_along_axis(&ids, &fill, -1).op("residual")?;
        let r_key = self.rng.next_key().op("random key")?;
        let redraw = mlx_rs::random::categorical(&residual, -1, None, &r_key).op("categorical")?;
        let (accept, redraw, bonus) = (
            accept.as_dtype(Dtype::Uint32).op("cast")?,
            redraw.as_dtype(Dtype::Uint32).op("cast")?,
            bonus.as_dtype(Dtype::Uint32).op("cast")?,
        );
        mlx_rs::transforms::eval([&accept, &redraw, &bonus]).op("verify")?;
        let accept = accept.as_slice::<u32>();
        match accept.iter().position(|&a| a == 0) {
            Some(i) => Ok((i, redraw.as_slice::<u32>()[i])),
            None => Ok((k, bonus.as_slice::<u32>()[0])),
        }
    }

    /// top_p -> min_p -> top_k on log-probabilities `[rows, vocab]`, as configured.
    fn filter(&self, mut lp: Array) -> Result<Array> {
        let p = &self.params;
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
        Ok(lp)
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

    /// Softmax of `row / t` with everything outside `keep` dropped.
    fn probs(row: &[f32], t: f32, keep: &[usize]) -> Vec<f64> {
        let e: Vec<f64> = row
            .iter()
            .enumerate()
            .map(|(i, &l)| if keep.contains(&i) { f64::from(l / t).exp() } else { 0.0 })
            .collect();
        let z: f64 = e.iter().sum();
        e.iter().map(|x| x / z).collect()
    }

    /// Pearson's chi-square of `counts` against `p` (cells with p = 0 must be empty).
    fn chi_square(counts: &[u32], p: &[f64]) -> f64 {
        let n: u32 = counts.iter().sum();
        counts
            .iter()
            .zip(p)
            .map(|(&c, &q)| {
                if q == 0.0 {
                    assert_eq!(c, 0, "a token outside the distribution came up");
                    0.0
                } else {
                    let e = q * f64::from(n);
                    (f64::from(c) - e).powi(2) / e
                }
            })
            .sum()
    }

    /// The statistical check that verification keeps the model's
    /// distribution: the first token out of a pass is distributed as p0
    /// whatever was proposed, and the token after an accepted proposal as p1.
    #[test]
    fn verification_keeps_the_sampling_distribution() -> Result<()> {
        let row0 = [0.1f32, 2.0, -1.0, 1.5, 0.3, 1.9, -0.2, 0.0];
        let row1 = [1.0f32, -0.5, 0.2, 0.9, 1.4, -1.0, 0.6, 0.1];
        let logits = Array::from_slice(&[row0, row1].concat(), &[1, 2, 8]);
        // 99.9th percentile of chi-square with 7 degrees of freedom (fewer
        // where top_k keeps fewer tokens): a seeded run is repeatable, and a
        // wrong rule (accept always, or redraw from p itself) lands far above.
        for (params, keep, limit) in [
            (SamplingParams { temperature: 1.0, seed: Some(7), ..Default::default() }, (0..8).collect(), 24.3),
            (
                SamplingParams { temperature: 0.7, top_k: 4, seed: Some(8), ..Default::default() },
                vec![1, 3, 4, 5],
                16.3,
            ),
        ] {
            let p0 = probs(&row0, params.temperature, &keep);
            let keep1: Vec<usize> = if params.top_k > 0 { vec![0, 3, 4, 6] } else { (0..8).collect() };
            let p1 = probs(&row1, params.temperature, &keep1);
            // Proposing token 3: likely under p0, not the most likely.
            let draft = 3u32;
            let mut s = Sampler::new(params)?;
            let (mut first, mut after) = ([0u32; 8], [0u32; 8]);
            for _ in 0..3000 {
                let (accepted, next) = s.verify(&logits, &[draft], &[])?;
                if accepted == 1 {
                    first[draft as usize] += 1;
                    after[next as usize] += 1;
                } else {
                    assert_ne!(next, draft, "a rejected proposal is never the correction");
                    first[next as usize] += 1;
                }
            }
            let (c0, c1) = (chi_square(&first, &p0), chi_square(&after, &p1));
            assert!(c0 < limit, "first token: chi-square {c0:.1} (counts {first:?}, p {p0:?})");
            assert!(c1 < limit, "after acceptance: chi-square {c1:.1} (counts {after:?}, p {p1:?})");
            // Acceptance happened at about p0(draft): the check saw both branches.
            let acc = f64::from(after.iter().sum::<u32>()) / 3000.0;
            assert!((acc - p0[draft as usize]).abs() < 0.05, "accepted {acc:.3} vs p {:.3}", p0[draft as usize]);
        }
        Ok(())
    }

    #[test]
    fn greedy_verification_accepts_the_argmax_run() -> Result<()> {
        let rows = [[0.0f32, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0]];
        let logits = Array::from_slice(&rows.concat(), &[1, 3, 3]);
        let mut s = Sampler::new(SamplingParams::default())?;
        assert_eq!(s.verify(&logits, &[1, 0], &[])?, (2, 2), "both accepted, then the last row's argmax");
        assert_eq!(s.verify(&logits, &[1, 2], &[])?, (1, 0), "second rejected: row 1's argmax");
        assert_eq!(s.verify(&logits, &[2, 0], &[])?, (0, 1));
        // A penalty applies per row, over the history plus the earlier proposals.
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 4.0, ..Default::default() })?;
        // With token 0 in the history, row 1 sees 2.0 / 4 < 1.0: token 2 wins there.
        assert_eq!(s.verify(&logits, &[1, 0], &[0])?, (1, 2));
        Ok(())
    }

    /// The argmax read from the logits is the argmax of the log-probabilities
    /// wherever it answers, and it declines where it cannot be sure.
    #[test]
    fn a_clear_argmax_is_the_log_probabilities_argmax_and_close_calls_go_to_mlx() -> Result<()> {
        let vocab = 49_152;
        let key = mlx_rs::random::key(3).op("key")?;
        let logits = mlx_rs::random::normal::<f32>(&[17, vocab], None, Some(4.0), &key).op("normal")?;
        let clear = clear_argmax(&logits)?.expect("random rows lead by far more than 1e-4");
        let lp =
            indexing::argmax_axis(&logprobs(&logits)?, -1, None).op("argmax")?.as_dtype(Dtype::Uint32).op("cast")?;
        assert_eq!(clear, lp.as_slice::<u32>());
        // Top two 1e-5 apart, an exact tie, a NaN, bf16: the caller computes them.
        let close = Array::from_slice(&[0.5f32, 7.0, 7.00001, 1.0], &[1, 4]);
        let tie = Array::from_slice(&[7.0f32, 1.0, 7.0, 1.0], &[1, 4]);
        let nan = Array::from_slice(&[7.0f32, f32::NAN, 1.0, 1.0], &[1, 4]);
        for declined in [&close, &tie, &nan, &logits.as_dtype(Dtype::Bfloat16).op("cast")?] {
            assert_eq!(clear_argmax(declined)?, None);
        }
        // A close call still verifies: the first of the tied top tokens, as MLX's argmax.
        let mut s = Sampler::new(SamplingParams::default())?;
        assert_eq!(s.verify(&tie.reshape(&[1, 1, 4]).op("reshape")?, &[], &[])?, (0, 0));
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
