//! Prompt lookup: what to propose, and how many to propose.
//!
//! Proposals are the tokens that followed the latest earlier occurrence of
//! the conversation's last few tokens (llama.cpp's prompt lookup; mlx-lm has
//! none). They cost no memory and a scan of the token ids.
//!
//! How many to propose is decided by [`Depth`], from this machine's own
//! figures: what a plain (pipelined) step costs, what a verification pass
//! costs per proposed row, and how often proposals are accepted. It proposes
//! only the depth whose expected tokens per second beat plain decoding, and
//! none (plain decoding, pipelined) when no depth does; then it probes again
//! now and then, since a conversation may start copying later.

use std::time::Duration;

/// The longest suffix matched; longer matches are tried first (they are
/// likelier to continue the same way).
const NGRAM_MAX: usize = 4;
/// The shortest: one token alone matches everywhere and predicts little.
const NGRAM_MIN: usize = 2;

/// The proposals for what follows `seq`: up to `max` tokens that followed
/// the latest earlier occurrence of its last `NGRAM_MAX`..=`NGRAM_MIN`
/// tokens (the longest suffix that occurs earlier wins). Empty if none.
pub fn propose(seq: &[u32], max: usize) -> &[u32] {
    if max == 0 {
        return &[];
    }
    for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
        if seq.len() <= n {
            continue;
        }
        let suffix = &seq[seq.len() - n..];
        // Latest first; the suffix's own position (start len - n) excluded.
        let found = (0..seq.len() - n).rev().find(|&i| &seq[i..i + n] == suffix);
        if let Some(i) = found {
            let from = i + n;
            return &seq[from..(from + max).min(seq.len())];
        }
    }
    &[]
}

/// The depths tried, shallow to deep. What a pass costs per row depends on
/// the kernel: on Metal decode is bandwidth-bound and a pass of 17 rows
/// costs about one step; on the CPU backend the row-shared kernel unpacks
/// each weight once for all rows, and the rows' multiply-adds make a pass
/// of 5 rows cost about 1.6 steps and one of 17 about 4 (`QuantKernel`,
/// `examples/pass_cost.rs`). So each depth's cost is measured, not
/// modelled.
pub const DEPTHS: [usize; 4] = [2, 4, 8, 16];
/// Most tokens proposed in one pass.
pub const DEPTH_MAX: usize = 16;

/// Weight of a new timing in the running averages.
const WEIGHT: f64 = 0.3;
/// Decay of the acceptance counts per observation, so the estimate follows
/// an answer that starts or stops copying within a few proposals.
const DECAY: f64 = 0.8;
/// A depth must beat plain decoding by this much to be chosen: the figures
/// are noisy, and a tie is better spent pipelined.
const MARGIN: f64 = 1.03;
/// A depth whose cost is unknown is tried only while at least this share
/// of proposals would have been accepted.
const EXPLORE_AT: f64 = 0.5;
/// With prompt lookup, the first pass of all waits until plain decoding
/// has copied this many proposed tokens in a row. With the acceptance
/// counted token by token, two words in common with the prompt lift it
/// past [`EXPLORE_AT`], and a probe spent on them costs a short answer that
/// copies nothing a whole pass (a 12-token answer quoting nothing ran
/// 0.85–0.89× of plain).
const FIRST_PASS_AFTER: usize = 3;

fn average(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + WEIGHT * (new - o))
}

/// The adaptive proposal depth, with a floor of zero.
///
/// Two figures decide it, both from this machine and this answer: what a
/// pass at each depth costs (measured when one runs), and how often
/// proposals are accepted. The second is also learnt for free while
/// decoding plainly: each proposal the lookup would have made is compared
/// with the tokens plain decoding then produced ("shadow" proposals). So
/// the depth drops to zero where proposals do not pay, costs nothing there
/// but a scan of the token ids, and comes back as soon as the answer starts
/// copying. A depth is chosen when its expected tokens per second beat
/// plain decoding; one never measured is tried once when it could.
///
/// The acceptance is two figures, not one: how often a proposal's first
/// token is accepted (α₁), and how often a token is accepted after the one
/// before it was (α). Copying comes in stretches: a proposal that starts
/// right tends to run to its end, one that starts wrong fails at once. A
/// single rate, as if every token were accepted alike, averages the two:
/// it expects too much of a pass where most proposals fail at once, and
/// too little of a deep one where they run. A pass of `k` proposals is
/// expected to yield `1 + α₁ (1 + α + … + α^(k−1))` tokens.
#[derive(Debug, Clone)]
pub struct Depth {
    /// Seconds per token of plain pipelined decode.
    plain: Option<f64>,
    /// Seconds per pass at each of [`DEPTHS`].
    cost: [Option<f64>; DEPTHS.len()],
    /// Decayed counts of proposals' first tokens accepted and checked.
    first: Trials,
    /// Decayed counts of the tokens after an accepted one, accepted and
    /// checked (each accepted one, and the first rejected one).
    next: Trials,
    /// The proposal plain decoding is being compared with, and how many of
    /// its tokens matched so far.
    shadow: Vec<u32>,
    matched: usize,
    /// Whether the acceptance is learnt from plain steps (prompt lookup;
    /// a draft model's proposals are not free to shadow).
    shadowing: bool,
    /// Seconds each proposed token took to propose: a draft model's step
    /// (nothing to speak of for lookup). A depth never measured is worth
    /// trying only if it could pay after its proposals' own cost.
    propose: Option<f64>,
}

/// Decayed counts of accepted and checked proposed tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Trials {
    hits: f64,
    checked: f64,
}

impl Trials {
    /// A prior of one accepted in two: the first proposal is tried, and the
    /// figures take over within a few observations.
    const PRIOR: Self = Self { hits: 1.0, checked: 2.0 };

    fn rate(self) -> f64 {
        (self.hits / self.checked).clamp(0.0, 0.99)
    }

    fn decay(&mut self) {
        self.hits *= DECAY;
        self.checked *= DECAY;
    }

    fn count(&mut self, hit: bool) {
        self.hits += f64::from(u8::from(hit));
        self.checked += 1.0;
    }
}

impl Default for Depth {
    fn default() -> Self {
        Self {
            plain: None,
            cost: [None; DEPTHS.len()],
            first: Trials::PRIOR,
            next: Trials::PRIOR,
            shadow: Vec::new(),
            matched: 0,
            shadowing: false,
            propose: None,
        }
    }
}

impl Depth {
    /// Share of proposed tokens accepted, first or not.
    pub fn alpha(&self) -> f64 {
        let (f, n) = (self.first, self.next);
        ((f.hits + n.hits) / (f.checked + n.checked)).clamp(0.0, 0.99)
    }

    fn observe(&mut self, accepted: usize, rejected: bool) {
        self.forget();
        for i in 0..accepted {
            self.check(i, true);
        }
        if rejected {
            self.check(accepted, false);
        }
    }

    /// One observation's decay of the counts, before its tokens are counted.
    fn forget(&mut self) {
        self.first.decay();
        self.next.decay();
    }

    /// The proposal's token at `index` was checked.
    fn check(&mut self, index: usize, hit: bool) {
        if index == 0 { &mut self.first } else { &mut self.next }.count(hit);
    }

    /// What the next answer of the same model starts from: the costs
    /// measured here (a property of the model and the machine), with the
    /// acceptance back at its prior (a property of each answer).
    pub fn carry_over(&self) -> Self {
        Self { plain: self.plain, cost: self.cost, propose: self.propose, ..Self::default() }
    }

    /// Proposing `n` tokens took `dt` (part of the pass [`Self::pass`] is then told of).
    pub fn proposed(&mut self, n: usize, dt: Duration) {
        if n > 0 {
            self.propose = Some(average(self.propose, dt.as_secs_f64() / n as f64));
        }
    }

    /// Whether a plain step's cost is known yet.
    pub fn knows_plain(&self) -> bool {
        self.plain.is_some()
    }

    /// A plain pipelined step took `dt` (between two tokens).
    pub fn plain_step(&mut self, dt: Duration) {
        self.plain = Some(average(self.plain, dt.as_secs_f64()));
    }

    /// Plain decoding appended the last token of `seq`: checks it against
    /// the shadow proposal, and makes a new one when none is pending.
    ///
    /// Each token is counted as it comes (the proposal's decay is taken
    /// when it is made), so the acceptance rises while a long stretch is
    /// being copied. Counted only once the whole proposal had matched (up
    /// to 16 tokens), it stayed where the answer's first reworded words
    /// had put it for 20 tokens of a 51-token copy, all decoded plainly.
    pub fn shadow(&mut self, seq: &[u32]) {
        let Some(&token) = seq.last() else { return };
        self.shadowing = true;
        if let Some(&expected) = self.shadow.get(self.matched) {
            let hit = expected == token;
            self.check(self.matched, hit);
            self.matched += usize::from(hit);
            if hit && self.matched < self.shadow.len() {
                return;
            }
        }
        self.matched = 0;
        self.shadow.clear();
        self.shadow.extend_from_slice(propose(seq, DEPTH_MAX));
        if !self.shadow.is_empty() {
            self.forget();
        }
    }

    /// A pass asked for `depth` proposals, checked `proposed`, accepted
    /// `accepted`, and took `dt`.
    pub fn pass(&mut self, depth: usize, proposed: usize, accepted: usize, dt: Duration) {
        let i = DEPTHS.iter().position(|&d| d >= depth).unwrap_or(DEPTHS.len() - 1);
        self.cost[i] = Some(average(self.cost[i], dt.as_secs_f64()));
        self.observe(accepted, accepted < proposed);
        // The sequence moved past whatever the shadow was compared with.
        self.shadow.clear();
    }

    /// Expected tokens a pass with `k` proposals yields: the accepted run
    /// (its first token at α₁, each later one at α after the one before)
    /// plus the one the pass samples itself.
    fn expected_tokens(&self, k: usize) -> f64 {
        let run: f64 = (0..k).map(|i| self.next.rate().powi(i as i32)).sum();
        1.0 + self.first.rate() * run
    }

    /// How many tokens to propose next (0: decode plainly).
    pub fn depth(&self) -> usize {
        let Some(plain) = self.plain else {
            // No baseline yet: propose, so that both get measured.
            return DEPTHS[0];
        };
        let target = MARGIN / plain;
        let best = DEPTHS
            .iter()
            .zip(&self.cost)
            .filter_map(|(&k, c)| Some((k, self.expected_tokens(k) / (*c)?)))
            .filter(|&(_, rate)| rate > target)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let best_rate = best.map_or(target, |b| b.1);
        // Worth one try: a depth never measured that would beat the best
        // if its pass cost no more than a plain step and its proposals.
        let least = |k: usize| plain + k as f64 * self.propose.unwrap_or(0.0);
        let first = self.shadowing && self.cost.iter().all(Option::is_none);
        let explore = (self.alpha() >= EXPLORE_AT && (!first || self.matched >= FIRST_PASS_AFTER))
            .then(|| {
                DEPTHS
                    .iter()
                    .zip(&self.cost)
                    .find(|&(&k, c)| c.is_none() && self.expected_tokens(k) / least(k) > best_rate)
                    .map(|(&k, _)| k)
            })
            .flatten();
        explore.or(best.map(|b| b.0)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_longest_match() {
        // "a b c d x | a b c" → after "a b c" came "d x" (and, earlier, "d q").
        let seq = [1, 2, 3, 4, 9, 7, 1, 2, 3, 4, 5, 6, 8, 1, 2, 3];
        assert_eq!(propose(&seq, 3), &[4, 5, 6]);
        assert_eq!(propose(&seq, 1), &[4]);
        assert_eq!(propose(&seq, 0), &[] as &[u32]);
        // A longer suffix wins over a later shorter one: "7 1 2" occurs once.
        let seq = [7, 1, 2, 50, 1, 2, 60, 7, 1, 2];
        assert_eq!(propose(&seq, 2), &[50, 1]);
        // Only a single-token match: nothing (too weak to propose).
        assert_eq!(propose(&[5, 6, 7, 5], 4), &[] as &[u32]);
        // The proposal stops where the sequence does.
        assert_eq!(propose(&[1, 2, 3, 1, 2], 5), &[3, 1, 2]);
        assert_eq!(propose(&[], 5), &[] as &[u32]);
    }

    fn ms(v: f64) -> Duration {
        Duration::from_secs_f64(v / 1e3)
    }

    /// Metal-like: a pass costs about a step whatever its rows.
    #[test]
    fn depth_grows_while_proposals_are_accepted_and_cheap() {
        let mut d = Depth::default();
        assert_eq!(d.depth(), 2, "unmeasured: propose");
        d.plain_step(ms(10.0));
        let mut seen = Vec::new();
        for _ in 0..8 {
            let k = d.depth();
            seen.push(k);
            // Every proposal accepted; a pass costs 11 ms + 0.1 ms a row.
            d.pass(k, k, k, ms(11.0 + 0.1 * k as f64));
        }
        assert_eq!(&seen[..4], &[2, 4, 8, 16], "each depth tried once, deeper while accepted");
        assert_eq!(d.depth(), 16);
    }

    /// MLX's fused kernel on the CPU (3-, 5- or 6-bit matrices, or a CPU
    /// without AVX2): rows cost a step each below 8, then a pass costs five
    /// steps. Shallow depths never pay; a deep one does when copying.
    #[test]
    fn a_deep_depth_is_found_where_only_deep_passes_pay() {
        let cost = |k: usize| if k + 1 < 8 { 100.0 * (k + 1) as f64 } else { 540.0 };
        let mut d = Depth::default();
        d.plain_step(ms(100.0));
        for _ in 0..12 {
            let k = d.depth();
            assert!(k > 0, "{d:?}");
            // A long verbatim copy: 90 % of proposals accepted.
            d.pass(k, k, (k * 9) / 10, ms(cost(k)));
        }
        assert_eq!(d.depth(), 16, "{d:?}");
        // The next answer starts from these costs, not from scratch; its
        // acceptance is its own.
        let next = d.carry_over();
        assert_eq!((next.cost, next.plain, next.alpha()), (d.cost, d.plain, 0.5));
    }

    #[test]
    fn depth_falls_to_zero_when_nothing_is_accepted_and_returns_when_copying_starts() {
        let mut d = Depth::default();
        d.plain_step(ms(100.0));
        // The first proposal is rejected at once: a pass of 3 rows, 300 ms.
        d.pass(2, 2, 0, ms(300.0));
        assert_eq!(d.depth(), 0, "{d:?}");
        // Free prose: plain decoding, its shadow proposals mostly wrong.
        let mut seq: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 1, 2];
        for t in [9, 8, 7, 1, 2, 6, 5] {
            seq.push(t);
            d.shadow(&seq);
            d.plain_step(ms(100.0));
            assert_eq!(d.depth(), 0, "alpha {}", d.alpha());
        }
        // The answer starts copying a long stretch of the prompt: the
        // shadows match, and proposing comes back (deep, on this cost curve).
        let text: Vec<u32> = (100..160).collect();
        seq.extend(&text);
        for &t in &text[..20] {
            seq.push(t);
            d.shadow(&seq);
        }
        assert!(d.alpha() > 0.8, "alpha {}", d.alpha());
        assert!(d.depth() >= 4, "depth {} {d:?}", d.depth());
    }

    /// A depth that knows a plain step's cost, before an answer to a
    /// 40-token prompt (ids 100..140).
    fn answering() -> (Depth, Vec<u32>) {
        let mut d = Depth::default();
        d.plain_step(ms(100.0));
        (d, (100..140).collect())
    }

    /// Plain decoding writes `tokens`, each shadowed as it comes.
    fn decode_plainly(d: &mut Depth, seq: &mut Vec<u32>, tokens: impl IntoIterator<Item = u32>) {
        for t in tokens {
            seq.push(t);
            d.shadow(seq);
        }
    }

    #[test]
    fn a_long_copy_raises_the_acceptance_as_it_is_copied() {
        let (mut d, mut seq) = answering();
        // The answer's first words are not the prompt's: the acceptance falls.
        decode_plainly(&mut d, &mut seq, [100, 101, 7, 8]);
        assert!(d.alpha() < 0.4, "alpha {}", d.alpha());
        // Then it copies the prompt: four tokens into a 16-token proposal,
        // the copy already counts (the whole proposal is not waited for).
        decode_plainly(&mut d, &mut seq, 103..109);
        assert!(d.alpha() > 0.6, "alpha {}", d.alpha());
    }

    #[test]
    fn the_first_pass_waits_for_a_copy_of_three_tokens() {
        let (mut d, mut seq) = answering();
        // Two tokens as in the prompt, then two more of its proposal: the
        // acceptance is past one half, but two words in common are no copy.
        decode_plainly(&mut d, &mut seq, [100, 101, 102, 103]);
        assert!(d.alpha() >= EXPLORE_AT, "alpha {}", d.alpha());
        assert_eq!(d.depth(), 0);
        decode_plainly(&mut d, &mut seq, [104]);
        assert_eq!(d.depth(), DEPTHS[0]);
        // A draft model's depth (no shadows) is tried at once.
        let (draft, _) = answering();
        assert_eq!(draft.depth(), DEPTHS[0]);
    }

    #[test]
    fn a_depth_whose_proposals_alone_cost_more_than_they_pay_is_not_explored() {
        // Accepted 9 in 10 at depth 2; a pass costs 45 ms against 10 ms plain.
        let explored = |propose_ms: f64| {
            let mut d = Depth::default();
            d.plain_step(ms(10.0));
            d.proposed(2, ms(2.0 * propose_ms));
            for _ in 0..6 {
                d.pass(2, 2, 2, ms(45.0));
            }
            d.depth()
        };
        // Free proposals (lookup): deeper depths are worth one try each.
        assert!(explored(0.0) > 2, "{}", explored(0.0));
        // A draft step as dear as a plain one: no depth can pay; plain decoding.
        assert_eq!(explored(10.0), 0);
    }

    /// Copying comes in stretches: a proposal either runs to its end or
    /// fails at its first token. The expected yield follows what passes
    /// gave; one rate for every token (8 in 10 here) expects more.
    #[test]
    fn the_expected_yield_follows_stretches_of_copying() {
        let mut d = Depth::default();
        let (mut expected, mut one_rate) = (0.0, 0.0);
        for i in 0..60 {
            // Depth 8: one pass in three all accepted (9 tokens), the
            // others none (1): 11 / 3 tokens a pass.
            let accepted = if i % 3 == 0 { 8 } else { 0 };
            d.pass(8, 8, accepted, ms(10.0));
            // Over the last period (the counts decay, so each pass moves them).
            if i >= 57 {
                expected += d.expected_tokens(8) / 3.0;
                one_rate += (0..=8).map(|i| d.alpha().powi(i)).sum::<f64>() / 3.0;
            }
        }
        assert!((expected - 11.0 / 3.0).abs() < 0.3, "expected {expected} tokens a pass, passes gave 3.67: {d:?}");
        assert!(one_rate > 4.2, "one rate for every token: {one_rate}");
    }

    #[test]
    fn depth_is_zero_when_rows_cost_as_much_as_steps() {
        // Half the proposals accepted, but each row costs a whole step.
        let mut d = Depth::default();
        d.plain_step(ms(10.0));
        for _ in 0..10 {
            let k = d.depth();
            if k == 0 {
                break;
            }
            d.pass(k, k, k / 2, ms(10.0 * (k + 1) as f64));
        }
        assert_eq!(d.depth(), 0, "{d:?}");
    }
}
