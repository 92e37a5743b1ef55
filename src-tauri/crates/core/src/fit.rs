//! The fit estimator: will this model, at this context length, fit in the
//! memory this machine can give it without swapping? Pure arithmetic over a
//! model's footprint (read from its headers by the engine) and a budget (read
//! from the OS by `headroom-memory`); every number comes back with its parts.
//!
//! Predicted peak = weights + KV cache + runtime overhead, at the moment
//! the prompt's prefill peaks: inside one prompt chunk's forward pass, with
//! the cache as long as that chunk's end. Over a float cache that is the
//! last full chunk (2,048 queries) or the last, shorter one (more keys, the
//! whole cache), whichever costs more: just past one chunk the first
//! chunk's pass peaks, with the cache it held then ([`prefill_peak_chunks`];
//! measured: the `medium` qwen2's MLX peak is 230.9 MB at 2,040, 2,591 and
//! 3,291 tokens alike):
//!
//! - weights: the exact tensor bytes from the safetensors headers, as loaded;
//! - KV cache: 2 × layers × kv_heads × positions × bytes per head and
//!   position, where positions is the context rounded up to the cache's
//!   256-position step (the engine allocates whole steps) and a head's
//!   position takes head_dim × bytes/element in the float type, or, in a
//!   quantized cache (`crate::kv`), head_dim × bits / 8 plus a scale and a
//!   bias per group. A quantized cache starts in the float type and is
//!   converted once it holds `start` positions: until then (and at the
//!   conversion, up to a prefill chunk past `start`) it is the float cache
//!   that counts, so the term is the larger of the two;
//! - overhead: what that prefill step needs besides weights and cache,
//!   fitted to measurements (below); what depends on the backend beyond
//!   the attention path (MLX's buffer cache, what sits beside MLX's peak,
//!   the wired limit) is one table per backend in `fit/backend.rs`
//!   ([`CPU`], [`METAL`]), each term with its source:
//!   * attention: what the chunk's attention call (queries × keys)
//!     allocates, by the path
//!     MLX takes for it (`crate::attention`, MLX's own dispatch rules, chosen
//!     from the model's backend as the engine chooses it). Where the scores
//!     are materialized (MLX's CPU backend; Metal's fallback for the head
//!     dims it has no fused kernel for; every backend over a quantized KV
//!     cache) it is (3 × heads + 6) / 4 × q × k × activation bytes, the
//!     scores per head and the causal mask, measured on the CPU backend
//!     (below) for the float fallback and for the quantized path alike (the
//!     same graph on every backend). Where Metal's fused kernel runs there
//!     is no score matrix: the term is the bound on the vector kernel's
//!     partial results (a few MB);
//!   * activations: 15 / 2 × chunk × (hidden + intermediate) × activation
//!     bytes (projections, the MLP's gate/up/product, the residual stream);
//!   * logits: LOGITS_FACTOR × vocabulary × 4 bytes (the last position's
//!     logits in f32 and the sampler's working copies);
//!   * dequantized weight: where the engine multiplies prompt chunks by
//!     dequantized weights (MLX's CPU backend, see the engine's
//!     `QuantKernel`), twice the largest such matrix in f32,
//!     2 × hidden × max(intermediate, heads × head_dim) × 4 bytes: one matrix
//!     is multiplied at a time, but MLX's CPU dequantize is made of
//!     whole-matrix element-wise steps, so an intermediate of the same size
//!     lives beside it (measured: MLX's peak rose by 2.0 such matrices at the
//!     7B shape). Zero on Metal, whose fused kernel never materializes a weight;
//!   * fixed: the runtime's own small allocations.
//!
//! Calibration: MLX 0.32.2 CPU backend, bf16 activations, random 4-bit demo
//! models; `headroom demo-model D --preset P --bits 4`, then
//! `headroom generate D --prompt "hello world …" --max-tokens 4 --ignore-eos --context 16384 --json`,
//! whose `peak_memory_bytes` is MLX's peak during the turn, against
//! `estimate(footprint, prompt + 3)`:
//!
//! | preset        | prompt tok | measured MB | predicted MB | error   |
//! |---------------|-----------:|------------:|-------------:|--------:|
//! | tiny          |         77 |        0.42 |         0.71 |  +67.7 % |
//! | tiny          |        389 |        2.78 |         3.00 |   +7.7 % |
//! | tiny          |       1049 |       13.59 |        13.67 |   +0.6 % |
//! | tiny          |       2069 |       44.87 |        44.59 |   -0.6 % |
//! | tiny          |       4229 |       83.42 |        82.86 |   -0.7 % |
//! | tiny          |       7829 |      126.63 |       127.27 |   +0.5 % |
//! | small         |         77 |        7.40 |         7.79 |   +5.3 % |
//! | small         |        389 |       14.75 |        15.58 |   +5.6 % |
//! | small         |       1049 |       42.12 |        42.37 |   +0.6 % |
//! | qwen2.5-0.5b  |         77 |      285.50 |       290.29 |   +1.7 % |
//!
//! (MB = 10^6 bytes.) The coefficients are a least-squares fit of these
//! points, rounded to simple fractions (the vocabulary factor rounded up: only
//! one shape has a large vocabulary). Every point from 1 MB up is within
//! ±8 %, seven of ten within ±2 %; the smallest run is off by 0.3 MB of fixed
//! cost. `calibration_points_are_reproduced` keeps it that way. These runs
//! used MLX's fused quantized matmul, the kernel Metal gets.
//!
//! The CPU backend's own kernel (f32 matmuls, prompt chunks through
//! dequantized weights; the default on Linux since issue #6) measured the
//! same way, with the dequantized-weight term (no refit; the prompts are
//! "hello world " repeated):
//!
//! | preset        | prompt tok | measured MB | predicted MB | error   |
//! |---------------|-----------:|------------:|-------------:|--------:|
//! | tiny          |        210 |        0.91 |         1.51 | +65.8 % |
//! | tiny          |       1110 |       13.30 |        15.10 | +13.5 % |
//! | tiny          |       3030 |       41.56 |        44.85 |  +7.9 % |
//! | tiny          |       6030 |      109.71 |       113.06 |  +3.1 % |
//! | tiny          |      12630 |      233.88 |       236.09 |  +0.9 % |
//! | small         |        180 |        9.44 |        11.35 | +20.3 % |
//! | small         |        750 |       22.35 |        29.68 | +32.8 % |
//! | small         |       2010 |       92.95 |       105.25 | +13.2 % |
//! | qwen2.5-0.5b  |        180 |      325.44 |       334.71 |  +2.8 % |
//!
//! Every point errs high, so the formula stays; the small models' excess is
//! the activation term, which the f32 matmuls of this kernel need less of.
//!
//! Refitted for this kernel on 2026-12-04, once MLX's CPU buffer cache was
//! capped ([`buffer_cache_limit`]) and its peaks repeated: MLX's peak over
//! the weights, cache, logits and dequantized matrices is the larger of a
//! chunk's MLP, [`CPU_KERNEL_ACTIVATION_BYTES`] × chunk × (hidden +
//! intermediate) (f32 whatever the dtype), and its attention call, not
//! their sum (within ±2.2 % of MLX's peak on the `medium` demo and SmolLM2
//! from 128 to 2,044 tokens; the sum was up to 37 % high). The attention
//! call was 7/5 of the scores term; past one chunk, where a chunk's
//! queries see two or three times their number of keys, that erred 4–11 %
//! high, so since 2026-12-05 it is [`cpu_kernel_attention_bytes`], 21/20
//! of the scores and [`CPU_ATTENTION_QUERY_SQUARE_BYTES`] × queries²
//! (MLX's peak within 2 % from 2,591 to 4,992 tokens on SmolLM2 and the
//! `medium` qwen2, `mlx_peaks_past_one_chunk_are_reproduced`). What the process holds
//! beside MLX's peak on the CPU backend (the runtime and what the capped
//! cache keeps: 11–30 MB, rising to a few hundred tokens and falling again
//! once a chunk's MLP buffers near the cache's cap) is
//! [`cpu_resident_bytes`], up to [`CPU_RESIDENT_BYTES`]; the prefill slack
//! below no longer counts there. The formula alone is then within −4.1 …
//! +4.2 % of a fresh process's recorded peak on four models of 53–98 MB of
//! weights from 128 to 4,096 tokens, and −2.4 … +3.9 % on two shapes the
//! term was not chosen on (`scripts/measure-fit.sh --calibration
//! [--calibration-pairs | --calibration-unseen]`, docs/fit-calibration.md;
//! it was −7.9 … +3.2 % with at most 20 MB there).
//!
//! Checked against the OS's figure: `scripts/measure-fit.sh` runs
//! `headroom generate --dtype f32` on demo models (on the CPU backend's
//! kernel) and compares the process's peak RSS (`ru_maxrss`) with this
//! estimate at the positions the turn held plus the process's baseline
//! (86.1 MB: binary, libmlx, tokenizer; measured on the tiny model, and not
//! part of this estimate because in the app it is spent before any model is
//! chosen):
//!
//! | case (f32 activations)          | positions | predicted + baseline MB | peak RSS MB | error   | MLX peak MB |
//! |---------------------------------|----------:|------------------------:|------------:|--------:|------------:|
//! | medium (~100 M params), 4-bit   |       262 |                   216.9 |       210.2 |  +3.2 % |       107.1 |
//! | medium (~100 M params), 4-bit   |      2054 |                   640.0 |       532.1 | +20.3 % |       375.0 |
//! | qwen2.5-7b shape, 4-bit         |        32 |                  5443.3 |      5515.1 |  -1.3 % |      5339.7 |
//!
//! At the user's size the weights dominate and the estimate is within 1.5 %
//! (with MLX's fused kernel the same case measured 4918.3 MB, -0.4 %: the
//! CPU kernel's dequantized weights cost about 540 MB at this shape). With
//! f32 activations and a long prompt the overhead errs high: the activation
//! term was fitted on bf16 through the fused kernel, which needs more than
//! this kernel's f32 matmuls do; glibc's arenas add 24–46 MB of RSS on top,
//! varying from run to run. Erring high costs some usable context; erring
//! low is the failure the guard exists to prevent, so
//! `process_rss_measurements_stay_within_bounds` allows 5 % under and 25 %
//! over. (Re-measured 2026-12-05 with the capped cache and the refitted
//! terms, `measure-fit.sh --skip-7b`: 202.8 and 469.8 MB, −0.5 % and
//! −0.2 % over a baseline of 72.4 MB, the tiny run's RSS less its
//! prediction.)
//!
//! The architectures of issue #17, same script (`scripts/measure-fit.sh
//! --archs-only --models-dir target/fit-models`; the `small` demo of each,
//! 12 layers × 256, 4-bit, f32; baseline 87.9 MB). Before the two terms
//! below, the MLX-level estimate was close to MLX's own peak (−1 … +8 % at
//! ~4000 tokens) but the process held 33–75 MB more than MLX's peak, so the
//! estimate erred low against RSS by up to 16 % (qwen3_moe −10.9 %, qwen3_5
//! −13.4 %, qwen3_5_moe −16.3 % at ~4000 tokens; qwen3_5_moe −7.0 % at ~256):
//!
//! | case (4005 / 261 prompt tokens)  | predicted + baseline MB | peak RSS MB | error   | MLX peak MB |
//! |----------------------------------|------------------------:|------------:|--------:|------------:|
//! | qwen3_moe, ~256                  |                   113.9 |       113.5 |  +0.4 % |        22.0 |
//! | qwen3_moe, ~4000                 |                   473.2 |       454.8 |  +4.1 % |       314.2 |
//! | gemma3_text, ~256                |                   109.1 |       105.3 |  +3.5 % |        14.4 |
//! | gemma3_text, ~4000               |                   472.9 |       420.0 | +12.6 % |       299.2 |
//! | qwen3_5, ~256                    |                   116.0 |       111.6 |  +3.9 % |        13.9 |
//! | qwen3_5, ~4000                   |                   538.4 |       462.5 | +16.4 % |       306.0 |
//! | qwen3_5_moe, ~256                |                   122.9 |       121.8 |  +0.8 % |        22.0 |
//! | qwen3_5_moe, ~4000               |                   538.4 |       469.6 | +14.6 % |       314.2 |
//!
//! The two terms: the prefill slack (half the attention block of the chunk
//! before the largest; only when a prompt spans chunks) and the recurrence
//! (RECURRENCE_BYTES_PER_TOKEN × linear layers × chunk). Both are RSS that
//! MLX's own counter does not see, so the MLX-peak calibration above leaves
//! them out. It is not glibc's heap (`MALLOC_MMAP_THRESHOLD_=131072` or
//! `MALLOC_ARENA_MAX=1`: unchanged), not OpenBLAS's threads
//! (`OPENBLAS_NUM_THREADS=1`: unchanged). It is MLX's own buffer cache: the
//! CPU allocator keeps freed buffers up to its cache limit, which the engine
//! sets from the fit's spare (`buffer_cache_limit`), where mlx-lm keeps
//! MLX's default (32 MB on the CPU); and a cached buffer is reused only for
//! a request within two pages of its size (MLX's `BufferCache`). Heaptrack
//! on `headroom generate` at 4027 prompt tokens (bf16, CPU kernel) found
//! MLX's allocator holding 288 MB at the heap's peak on gemma3_text small
//! against an MLX peak of 165 MB, and 201 MB against 169 MB on the dense
//! `small`: cached buffers, not active ones. A gemma-style model alternates
//! window and full layers whose attention blocks differ in size once a
//! prompt passes one chunk, so each kind's freed block waits in the cache
//! while the other computes. Since 2026-12-04 the CPU backend caps that
//! cache at MLX's default and the slack counts on Metal only (its cache
//! follows the budget there); not yet measured on Metal (where attention
//! needs less: the estimate errs high).
//!
//! On each machine the formula is then calibrated by what that machine
//! measured for the model ([`check_with`], `crate::calibration`): every load
//! and turn is recorded, and the nearest whole-prompt turn corrects the
//! formula, in full at its own context and less with distance.

use serde::Serialize;

mod backend;
pub use backend::{
    cpu_resident_bytes, terms, BackendTerms, BesidePeak, BufferCache, Wired, CPU, CPU_BUFFER_CACHE_BYTES,
    CPU_CACHE_HELD_BYTES, CPU_RESIDENT_BYTES, CPU_RUNTIME_BYTES, METAL, MIN_BUFFER_CACHE_BYTES,
};

use crate::attention::{
    attention_path, quantized_query_block, vector_partials_bytes, AttentionPath, AttentionShape, Backend,
};
use crate::calibration::{self, Calibration, Measured};
use crate::kv::KvFormat;

/// Bytes in one GiB.
pub const GIB: u64 = 1 << 30;

/// What the OS keeps for itself unless the user says otherwise.
pub const DEFAULT_OS_HEADROOM: u64 = 4 * GIB;

/// Tokens per prefill chunk (the engine's `PREFILL_CHUNK`).
pub const PREFILL_CHUNK: u64 = 2048;

/// Positions the KV cache grows by (the engine's `KV_STEP`).
pub const KV_STEP: u64 = 256;

/// The smallest context worth loading a model for: below this a chat is not
/// useful, so a model that cannot fit even here "cannot fit".
pub const MIN_CONTEXT: u64 = 512;

/// Within this fraction of the budget a fit is "tight".
pub const TIGHT_FRACTION: f64 = 0.10;

/// What a model needs, read from its config and weight headers (no weights loaded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct ModelFootprint {
    /// Exact bytes of every tensor the engine will hold, as loaded.
    pub weight_bytes: u64,
    pub layers: u64,
    pub attention_heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub vocab_size: u64,
    /// Bytes per element of the KV cache and the activations (2 for bf16/f16, 4 for f32).
    pub kv_bytes_per_element: u64,
    /// The model's own context ceiling (`max_position_embeddings`), if it names one.
    pub max_context: Option<u64>,
    /// Whether prompt chunks multiply by dequantized (f32) weights: a
    /// quantized model on MLX's CPU backend.
    pub prefill_dequantizes: bool,
    /// The KV cache by kind of layer: each group's cost per position, and
    /// how many positions it keeps. The estimate sums them, so a sliding-window
    /// or constant-state layer kind is one more group, not a new formula
    /// for every caller.
    pub kv_layers: Vec<KvLayers>,
    /// The MLX backend the model computes on: which attention kernels exist
    /// (`crate::attention`), so what attention allocates.
    pub backend: Backend,
    /// Weight bytes one decoded token reads: one row of the embedding
    /// table (the whole table again where it is also the output head),
    /// every attention, norm and dense-MLP weight, the router and shared
    /// expert, and only the chosen experts' share of the expert weights.
    /// What the bandwidth roofline divides by; `weight_bytes` is what must
    /// be resident.
    pub active_weight_bytes: u64,
    /// A mixture-of-experts model's experts (`None` for a dense model).
    pub experts: Option<Experts>,
    /// Each layer's weight bytes, by layer index (what a split across two
    /// Macs places on each: `crate::split`).
    #[serde(skip)]
    #[ts(skip)]
    pub layer_weight_bytes: Vec<u64>,
}

impl ModelFootprint {
    /// This model with `draft` loaded beside it (speculative decoding): the
    /// draft's weights and its KV cache (its layers, in the same format at
    /// the same context) added. Its activations are not: the draft runs
    /// between the model's passes, never beside them, and its catch-up
    /// prefill is narrower than the model's; nor are the verification
    /// passes' (at most 17 rows, against the prefill chunk's 2,048 that the
    /// overhead term already counts).
    pub fn with_draft(&self, draft: &ModelFootprint) -> Self {
        let mut both = self.clone();
        both.weight_bytes = both.weight_bytes.saturating_add(draft.weight_bytes);
        both.active_weight_bytes = both.active_weight_bytes.saturating_add(draft.active_weight_bytes);
        both.kv_layers.extend(draft.kv_layers.iter().cloned());
        both.max_context = match (self.max_context, draft.max_context) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        both
    }

    /// Whether this model's KV cache can be stored as `kv`: MLX quantizes
    /// the heads in whole groups, and mlx-lm quantizes no sliding window
    /// (the engine refuses the same; `crate::kv`). A remedies list offers
    /// only the formats this accepts.
    pub fn check_kv(&self, kv: KvFormat) -> Result<(), crate::kv::KvFormatError> {
        kv.check_head_dim(self.head_dim)?;
        if kv.quant().is_some() && self.kv_layers.iter().any(|g| g.kind() == KvKind::Window) {
            return Err(crate::kv::KvFormatError::SlidingWindow);
        }
        Ok(())
    }
}

/// The experts of a mixture-of-experts model, for the fit report and the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Experts {
    /// Experts per MoE layer.
    pub count: u64,
    /// Experts the router picks for each token.
    pub per_token: u64,
    /// Bytes of every expert's weights together (all resident).
    pub resident_bytes: u64,
    /// Bytes of the experts one token reads (`per_token / count` of them).
    pub active_bytes: u64,
}

/// Layers of one kind whose cache keeps `kv_heads × head_dim` keys and as
/// many values per position, or (linear attention) a state of
/// `state_bytes` per layer whatever the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct KvLayers {
    pub layers: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// At most this many positions (a sliding window); `None`: the whole context.
    pub window: Option<u64>,
    /// A constant-size state per layer (linear attention); 0 for attention layers.
    pub state_bytes: u64,
}

/// Which part of the KV cache a group is, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum KvKind {
    Full,
    Window,
    State,
}

impl KvLayers {
    /// Full-attention layers: the cache grows with the whole context.
    pub fn full(layers: u64, kv_heads: u64, head_dim: u64) -> Self {
        Self { layers, kv_heads, head_dim, window: None, state_bytes: 0 }
    }

    /// Sliding-window layers: the cache stops growing at `window` positions.
    pub fn sliding(layers: u64, kv_heads: u64, head_dim: u64, window: u64) -> Self {
        Self { layers, kv_heads, head_dim, window: Some(window), state_bytes: 0 }
    }

    /// Linear-attention layers: `state_bytes` each, whatever the context.
    pub fn state(layers: u64, state_bytes: u64) -> Self {
        Self { layers, kv_heads: 0, head_dim: 0, window: None, state_bytes }
    }

    pub fn kind(&self) -> KvKind {
        match (self.window, self.state_bytes) {
            (_, s) if s > 0 => KvKind::State,
            (Some(_), _) => KvKind::Window,
            (None, _) => KvKind::Full,
        }
    }

    /// Positions a sliding layer holds at its peak: while a prompt chunk is
    /// appended, the window's last `window - 1` positions and the chunk
    /// (mlx-lm's rotating cache concatenates them), then `window`.
    pub fn window_peak_positions(window: u64) -> u64 {
        window.saturating_add(PREFILL_CHUNK - 1)
    }

    /// Bytes this group's cache holds at `positions` (already rounded to the
    /// cache's step) with `bytes_per_element` per key or value element.
    pub fn bytes(&self, positions: u64, bytes_per_element: u64) -> u64 {
        self.bytes_as(positions, KvFormat::Float, bytes_per_element)
    }

    /// [`Self::bytes`] with keys and values stored as `format` (the float
    /// type being `float_bytes` wide). Only full-attention layers are ever
    /// quantized; sliding windows and linear states stay in the float type,
    /// as in mlx-lm 0.32.2 (`crate::kv`).
    pub fn bytes_as(&self, positions: u64, format: KvFormat, float_bytes: u64) -> u64 {
        let format = if self.kind() == KvKind::Full { format } else { KvFormat::Float };
        let kept = self.window.map_or(positions, |w| positions.min(Self::window_peak_positions(w)));
        2u64.saturating_mul(self.layers)
            .saturating_mul(self.kv_heads)
            .saturating_mul(kept)
            .saturating_mul(format.bytes_per_head_position(self.head_dim, float_bytes))
            .saturating_add(self.layers.saturating_mul(self.state_bytes))
    }
}

/// The runtime overhead, by term (see the module docs for each formula).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Overhead {
    /// Tokens in the prefill chunk whose forward pass peaks (at most
    /// PREFILL_CHUNK).
    pub chunk_tokens: u64,
    /// That chunk's attention block: queries × keys, and the path MLX takes
    /// for it.
    pub attention_queries: u64,
    pub attention_keys: u64,
    pub attention_path: AttentionPath,
    pub attention_bytes: u64,
    pub activation_bytes: u64,
    pub logits_bytes: u64,
    /// The largest weight matrix dequantized for a prompt chunk (0 unless
    /// `ModelFootprint::prefill_dequantizes`).
    pub dequantized_weight_bytes: u64,
    /// Resident memory beyond MLX's own peak while a prompt of more than one
    /// chunk is read: half the attention block of the chunk before the
    /// largest one (0 for a prompt of one chunk). MLX's buffer cache holding
    /// freed blocks (module docs): 0 on the CPU backend, where it is capped.
    pub prefill_slack_bytes: u64,
    /// The linear-attention recurrence over a prompt chunk, token by token
    /// (0 without linear layers). Resident, but not in MLX's own peak.
    pub recurrence_bytes: u64,
    /// The runtime's cost: [`FIXED_OVERHEAD`], and on the CPU backend what
    /// the process holds beside MLX's peak (`cpu_resident_bytes`, at most
    /// [`CPU_RESIDENT_BYTES`]).
    pub fixed_bytes: u64,
    pub total_bytes: u64,
}

/// The predicted peak at one context length, with its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Estimate {
    pub context_tokens: u64,
    /// How the KV cache stores keys and values.
    pub kv_format: KvFormat,
    /// Whether a quantized cache has been converted by this context (a
    /// float cache never is).
    pub kv_quantized: bool,
    /// Positions the KV cache allocates (context rounded up to KV_STEP).
    pub kv_positions: u64,
    pub weight_bytes: u64,
    /// The whole cache at this context, as stored then: the three parts below together.
    pub kv_cache_bytes: u64,
    /// Full-attention layers, growing with the context (quantized once converted).
    pub kv_full_bytes: u64,
    /// Sliding-window layers, capped at their window.
    pub kv_window_bytes: u64,
    /// Linear-attention layers' constant state.
    pub kv_state_bytes: u64,
    /// The float cache a quantized one is converted from (0 if it never is,
    /// or stays float): it is held until the conversion, so the peak counts
    /// the larger of the two.
    pub kv_before_conversion_bytes: u64,
    /// Positions the prompt has reached when the peak happens: the end of
    /// the prompt chunk whose forward pass peaks. The context, unless the
    /// last full chunk (2,048 queries) peaks higher than the shorter last
    /// one, while the cache holds only the positions up to it.
    pub peak_positions: u64,
    /// The KV cache the peak counts: the cache at [`Self::peak_positions`],
    /// or for a quantized cache the larger of it and the float cache
    /// before the conversion.
    pub kv_at_peak_bytes: u64,
    pub overhead: Overhead,
    pub predicted_peak_bytes: u64,
}

impl Estimate {
    /// The KV term the peak counts.
    pub fn kv_peak_bytes(&self) -> u64 {
        self.kv_at_peak_bytes
    }
}

/// Resident bytes per prompt token per linear-attention layer beyond MLX's
/// own peak: the recurrence runs token by token (as mlx-lm's does off
/// Metal), ~20 small operations a token, all built before the chunk is
/// evaluated. With [`RECURRENCE_FIXED_BYTES`], fitted to what the `medium`
/// qwen3_5 held beyond the rest of the formula on the capped CPU cache
/// (9 linear layers, 128 to 2,048 rows a chunk: within 4 MB;
/// docs/fit-calibration.md, "Past one prompt chunk"). It was 4 KiB, from
/// RSS with MLX's cache uncapped.
pub const RECURRENCE_BYTES_PER_TOKEN: u64 = 3 << 10;

/// The recurrence's part that does not grow with the chunk (a model with
/// linear-attention layers only; see [`RECURRENCE_BYTES_PER_TOKEN`]).
pub const RECURRENCE_FIXED_BYTES: u64 = 5_000_000;

/// The fixed overhead term (the least-squares constant was ~0).
pub const FIXED_OVERHEAD: u64 = 256 << 10;

/// Bytes per prompt token × (hidden + intermediate) that a prompt chunk's
/// MLP holds on the CPU backend's own kernel (prompt chunks through
/// dequantized weights): its matmuls run in f32 whatever the model's
/// dtype, so this does not scale with the activation bytes. Fitted to MLX's
/// peak on four models (docs/fit-calibration.md).
pub const CPU_KERNEL_ACTIVATION_BYTES: u64 = 9;

/// Bytes per query² that an attention call on the CPU backend's own kernel
/// holds beside its scores (`cpu_kernel_attention_bytes`). Fitted to MLX's
/// peak where one chunk's queries see twice or more their number of keys
/// (docs/fit-calibration.md, "Past one prompt chunk"); in a first chunk
/// (queries = keys) it stands where the mask term was.
pub const CPU_ATTENTION_QUERY_SQUARE_BYTES: u64 = 6;

/// Multiples of vocabulary × 4 bytes the logits and sampler hold.
pub const LOGITS_FACTOR: u64 = 3;

/// The largest (queries × keys) block a prefill of `context` tokens in
/// chunks of [`PREFILL_CHUNK`] computes: full chunk j sees 2048·j keys, the
/// last (partial) chunk sees them all.
pub fn largest_attention_block(context: u64) -> (u64, u64) {
    let full = context / PREFILL_CHUNK;
    let rest = context % PREFILL_CHUNK;
    let last_full = (PREFILL_CHUNK, full * PREFILL_CHUNK);
    let partial = (rest, context);
    if full == 0 || partial.0.saturating_mul(partial.1) > last_full.0.saturating_mul(last_full.1) {
        partial
    } else {
        last_full
    }
}

/// Bytes the scores of a materialized attention call over `queries` ×
/// `keys` take with the mask and the softmax beside them: the CPU
/// measurements' fit (module docs).
pub fn materialized_attention_bytes(heads: u64, queries: u64, keys: u64, dtype_bytes: u64) -> u64 {
    queries.saturating_mul(keys).saturating_mul(dtype_bytes).saturating_mul(heads.saturating_mul(3).saturating_add(6))
        / 4
}

/// What an unfused attention call over `queries` × `keys` holds at MLX's
/// peak on the CPU backend's own kernel: 21/20 of its scores (`heads` ×
/// queries × keys of `dtype_bytes`) and [`CPU_ATTENTION_QUERY_SQUARE_BYTES`]
/// × queries². Fitted to MLX's peaks with as many keys as queries and with
/// two or three times as many (at 3,291 to 3,964 tokens, the prompt's
/// second chunk): a term in queries × keys alone erred 5–11 % high there
/// (docs/fit-calibration.md).
pub fn cpu_kernel_attention_bytes(heads: u64, queries: u64, keys: u64, dtype_bytes: u64) -> u64 {
    let scores = queries.saturating_mul(keys).saturating_mul(dtype_bytes).saturating_mul(heads);
    (scores.saturating_mul(21) / 20)
        .saturating_add(queries.saturating_mul(queries).saturating_mul(CPU_ATTENTION_QUERY_SQUARE_BYTES))
}

/// One attention call of `model` with `queries` over `keys`, as the engine makes it.
fn attention_shape(model: &ModelFootprint, queries: u64, keys: u64) -> AttentionShape {
    AttentionShape {
        queries,
        keys,
        heads: model.attention_heads,
        kv_heads: model.kv_heads,
        head_dim: model.head_dim,
        value_head_dim: model.head_dim,
        causal: queries > 1,
    }
}

/// The attention term: the costliest call a chat of `context` tokens
/// makes, by the path MLX takes for it on the model's backend. Over a float
/// cache that is the largest prompt chunk; over a quantized cache (converted
/// from `start` positions on) a later chunk of a chat may attend over the
/// quantized cache with as many as `PREFILL_CHUNK` queries, which
/// materializes its scores on every backend.
fn attention_term(model: &ModelFootprint, context: u64, kv: KvFormat) -> (u64, u64, AttentionPath, u64) {
    let b = model.kv_bytes_per_element;
    let (q, k) = largest_attention_block(context);
    let path = attention_path(model.backend, &attention_shape(model, q, k), false);
    let mut worst = (q, k, path, attention_cost(model, q, k, path));
    if let Some(quant) = kv.quant() {
        if context > quant.start {
            // The engine takes the chunk's queries in blocks (`attention::quantized_query_block`).
            let rows = quantized_query_block(model.attention_heads, context, b);
            let q = PREFILL_CHUNK.min(context - quant.start).min(rows);
            let bytes = attention_cost(model, q, context, AttentionPath::Quantized);
            if bytes > worst.3 {
                worst = (q, context, AttentionPath::Quantized, bytes);
            }
        }
    }
    worst
}

/// The predicted peak of `model` holding `context` tokens in a KV cache stored as `kv`.
pub fn estimate(model: &ModelFootprint, context: u64, kv: KvFormat) -> Estimate {
    let b = model.kv_bytes_per_element;
    let kv_positions = context.div_ceil(KV_STEP).saturating_mul(KV_STEP);
    let part = |kind: KvKind, positions: u64, format: KvFormat| {
        model
            .kv_layers
            .iter()
            .filter(|g| g.kind() == kind)
            .fold(0u64, |sum, g| sum.saturating_add(g.bytes_as(positions, format, b)))
    };
    let whole = |positions: u64, format: KvFormat| {
        [KvKind::Full, KvKind::Window, KvKind::State]
            .into_iter()
            .fold(0u64, |sum, kind| sum.saturating_add(part(kind, positions, format)))
    };
    let kv_quantized = kv.converts_at(context);
    let stored = if kv_quantized { kv } else { KvFormat::Float };
    let (kv_full_bytes, kv_window_bytes, kv_state_bytes) = (
        part(KvKind::Full, kv_positions, stored),
        part(KvKind::Window, kv_positions, stored),
        part(KvKind::State, kv_positions, stored),
    );
    let kv_cache_bytes = kv_full_bytes.saturating_add(kv_window_bytes).saturating_add(kv_state_bytes);
    let kv_before_conversion_bytes = match kv.quant() {
        Some(q) if kv_quantized => {
            // Converted after the forward pass that reached `start`: at most
            // a prompt chunk past it.
            let at = context.min(q.start.saturating_add(PREFILL_CHUNK)).max(1);
            whole(at.div_ceil(KV_STEP).saturating_mul(KV_STEP), KvFormat::Float)
        }
        _ => 0,
    };
    // The peak is reached inside one prompt chunk's forward pass, with the
    // cache as long as that chunk's end: over a float cache, the last full
    // chunk (most queries) or the last, shorter one (most keys, the whole
    // cache), whichever costs more (measured: the medium qwen2's MLX peak
    // is 230.9 MB at 2,591 and at 3,291 tokens, its first chunk's, as at
    // 2,040). Over a quantized cache, the costliest attention call with
    // the cache as the peak holds it.
    let float_moment = |(q, k): (u64, u64)| {
        let path = attention_path(model.backend, &attention_shape(model, q, k), false);
        let kv_bytes = whole(k.div_ceil(KV_STEP).saturating_mul(KV_STEP), KvFormat::Float);
        let bytes = attention_cost(model, q, k, path);
        ChunkMoment { rows: q, end: k, q, k, path, bytes, float_block: (q, k), kv_bytes }
    };
    let (last, earlier) = if kv_quantized {
        let (q, k, path, bytes) = attention_term(model, context, kv);
        let kv_bytes = kv_cache_bytes.max(kv_before_conversion_bytes);
        let float_block = largest_attention_block(context);
        (ChunkMoment { rows: PREFILL_CHUNK.min(context), end: context, q, k, path, bytes, float_block, kv_bytes }, None)
    } else {
        let (last, earlier) = prefill_peak_chunks(context);
        (float_moment(last), earlier.map(float_moment))
    };
    let at = |m: ChunkMoment| {
        let o = chunk_overhead(model, &m);
        (m, o)
    };
    let (moment, overhead) = at(last);
    // Ties go to the last chunk: its cache is the context's.
    let (moment, overhead) = match earlier.map(at) {
        Some((m, o))
            if m.kv_bytes.saturating_add(o.total_bytes) > moment.kv_bytes.saturating_add(overhead.total_bytes) =>
        {
            (m, o)
        }
        _ => (moment, overhead),
    };
    Estimate {
        context_tokens: context,
        kv_format: kv,
        kv_quantized,
        kv_positions,
        weight_bytes: model.weight_bytes,
        kv_cache_bytes,
        kv_full_bytes,
        kv_window_bytes,
        kv_state_bytes,
        kv_before_conversion_bytes,
        peak_positions: moment.end,
        kv_at_peak_bytes: moment.kv_bytes,
        overhead,
        predicted_peak_bytes: model.weight_bytes.saturating_add(moment.kv_bytes).saturating_add(overhead.total_bytes),
    }
}

/// One prompt chunk's forward pass, where a peak may be reached.
struct ChunkMoment {
    /// The chunk's tokens (its MLP's and recurrence's rows).
    rows: u64,
    /// Positions the prompt has reached at the chunk's end.
    end: u64,
    /// The attention call that costs most in it, its path and its bytes
    /// (before the CPU kernel's own terms).
    q: u64,
    k: u64,
    path: AttentionPath,
    bytes: u64,
    /// The chunk's attention block over a float cache (the prefill slack's).
    float_block: (u64, u64),
    /// The KV cache held then.
    kv_bytes: u64,
}

/// The prompt chunks that can hold the peak of a prefill of `context`
/// tokens in chunks of [`PREFILL_CHUNK`], as (queries, keys): the last one,
/// and, when it is shorter than a full chunk, the last full chunk before it
/// (each full chunk sees more keys than the one before).
pub fn prefill_peak_chunks(context: u64) -> ((u64, u64), Option<(u64, u64)>) {
    let full = context / PREFILL_CHUNK;
    let rest = context % PREFILL_CHUNK;
    let last_full = (PREFILL_CHUNK, full.saturating_mul(PREFILL_CHUNK));
    match (full, rest) {
        (0, _) => ((context, context), None),
        (_, 0) => (last_full, None),
        _ => ((rest, context), Some(last_full)),
    }
}

/// What an attention call of `queries` over `keys` allocates by `path`.
fn attention_cost(model: &ModelFootprint, queries: u64, keys: u64, path: AttentionPath) -> u64 {
    if path.materializes_scores() {
        materialized_attention_bytes(model.attention_heads, queries, keys, model.kv_bytes_per_element)
    } else {
        // Decode is where the fused kernel keeps anything beside its output.
        vector_partials_bytes(model.attention_heads, 1, model.head_dim, model.kv_bytes_per_element)
    }
}

/// The overhead terms of one chunk's forward pass.
fn chunk_overhead(model: &ModelFootprint, m: &ChunkMoment) -> Overhead {
    let b = model.kv_bytes_per_element;
    // The chunk before this one saw the keys before its queries; half its
    // attention block covers what the process holds beyond MLX's peak once
    // a prompt spans chunks (scripts/measure-fit.sh --archs-only). Measured
    // where the scores are materialized; a fused kernel has none.
    let (block_q, block_k) = m.float_block;
    let earlier_keys = block_k.saturating_sub(block_q);
    // The float cache's path for it (a quantized cache is float until its start).
    let float_path = crate::attention::sdpa_path(model.backend, &attention_shape(model, block_q, block_k));
    // That slack was MLX's buffer cache holding freed blocks; where the
    // cache is capped, what it holds is in `cpu_resident_bytes`.
    let prefill_slack_bytes = if float_path.materializes_scores() && !buffer_cache_capped(model.backend) {
        materialized_attention_bytes(model.attention_heads, PREFILL_CHUNK.min(earlier_keys), earlier_keys, b) / 2
    } else {
        0
    };
    let linear_layers: u64 = model.kv_layers.iter().filter(|g| g.kind() == KvKind::State).map(|g| g.layers).sum();
    let recurrence_bytes = if linear_layers == 0 {
        0
    } else {
        linear_layers.saturating_mul(m.rows).saturating_mul(RECURRENCE_BYTES_PER_TOKEN) + RECURRENCE_FIXED_BYTES
    };
    let mlp = m.rows.saturating_mul(model.hidden_size + model.intermediate_size);
    let (attention_bytes, activation_bytes) = if model.prefill_dequantizes {
        // The CPU kernel's MLX peak is the larger of a chunk's attention
        // call and its MLP, not their sum: each frees its temporaries
        // before the other runs (measured on four models, 128–3,960
        // tokens: MLX's peak within 2 % in one chunk). So the activations
        // count only what the MLP needs beyond the attention call.
        let attention = if m.path == AttentionPath::Unfused {
            cpu_kernel_attention_bytes(model.attention_heads, m.q, m.k, b)
        } else {
            m.bytes.saturating_mul(7) / 5
        };
        (attention, mlp.saturating_mul(CPU_KERNEL_ACTIVATION_BYTES).saturating_sub(attention))
    } else {
        (m.bytes, mlp.saturating_mul(b).saturating_mul(15) / 2)
    };
    let logits_bytes = model.vocab_size.saturating_mul(4 * LOGITS_FACTOR);
    // The output head multiplies one position (the last) and so stays fused.
    let dequantized_weight_bytes = if model.prefill_dequantizes {
        let widest = model.intermediate_size.max(model.attention_heads.saturating_mul(model.head_dim));
        model.hidden_size.saturating_mul(widest).saturating_mul(2 * 4)
    } else {
        0
    };
    let fixed_bytes = if buffer_cache_capped(model.backend) {
        let mlp_bytes = mlp.saturating_mul(CPU_KERNEL_ACTIVATION_BYTES);
        // The kernel's matmuls are f32 whatever the dtype.
        let widest_bytes = m.rows.saturating_mul(model.intermediate_size).saturating_mul(4);
        FIXED_OVERHEAD + cpu_resident_bytes(mlp_bytes, widest_bytes)
    } else {
        FIXED_OVERHEAD
    };
    let total_bytes = attention_bytes
        .saturating_add(activation_bytes)
        .saturating_add(logits_bytes)
        .saturating_add(dequantized_weight_bytes)
        .saturating_add(prefill_slack_bytes)
        .saturating_add(recurrence_bytes)
        .saturating_add(fixed_bytes);
    Overhead {
        chunk_tokens: m.rows,
        attention_queries: m.q,
        attention_keys: m.k,
        attention_path: m.path,
        attention_bytes,
        activation_bytes,
        logits_bytes,
        dequantized_weight_bytes,
        prefill_slack_bytes,
        recurrence_bytes,
        fixed_bytes,
        total_bytes,
    }
}

/// What the budget is made of, as read from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, ts_rs::TS)]
pub struct BudgetInputs {
    /// Memory the OS reports available now.
    pub available_bytes: u64,
    /// What unloading the currently loaded model (and clearing MLX's cache) would give back.
    pub freed_by_unload_bytes: u64,
    /// What to leave to the OS and other apps (default [`DEFAULT_OS_HEADROOM`]).
    pub os_headroom_bytes: u64,
    /// macOS: Metal's recommended working-set size, a hard ceiling for GPU memory.
    pub gpu_working_set_bytes: Option<u64>,
}

impl BudgetInputs {
    /// Inputs with the default OS headroom, nothing loaded and no GPU limit.
    pub fn new(available_bytes: u64) -> Self {
        Self {
            available_bytes,
            freed_by_unload_bytes: 0,
            os_headroom_bytes: DEFAULT_OS_HEADROOM,
            gpu_working_set_bytes: None,
        }
    }
}

/// Which limit set the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    /// available + freed by unload − OS headroom.
    Memory,
    /// The GPU working-set limit was lower.
    GpuWorkingSet,
}

/// The bytes a model may use, with its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct Budget {
    #[serde(flatten)]
    pub inputs: BudgetInputs,
    /// available + freed by unload − OS headroom (0 if negative).
    pub from_memory_bytes: u64,
    /// min(from_memory, GPU working set).
    pub budget_bytes: u64,
    pub limited_by: BudgetLimit,
}

impl Budget {
    pub fn new(inputs: BudgetInputs) -> Self {
        let from_memory_bytes = inputs
            .available_bytes
            .saturating_add(inputs.freed_by_unload_bytes)
            .saturating_sub(inputs.os_headroom_bytes);
        let (budget_bytes, limited_by) = match inputs.gpu_working_set_bytes {
            Some(gpu) if gpu < from_memory_bytes => (gpu, BudgetLimit::GpuWorkingSet),
            _ => (from_memory_bytes, BudgetLimit::Memory),
        };
        Self { inputs, from_memory_bytes, budget_bytes, limited_by }
    }
}

/// The answer to "can I load this?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ts_rs::TS)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Fits with more than [`TIGHT_FRACTION`] of the budget to spare.
    Fits,
    /// Fits, but within [`TIGHT_FRACTION`] of the budget.
    Tight,
    /// Over the budget by `by_bytes` at the requested context; a smaller context fits.
    WouldSwap { by_bytes: u64 },
    /// Over the budget by `by_bytes` even at [`MIN_CONTEXT`].
    CannotFit { by_bytes: u64 },
}

impl Verdict {
    /// Whether loading should be refused (unless the user overrides).
    pub fn refuses(self) -> bool {
        matches!(self, Verdict::WouldSwap { .. } | Verdict::CannotFit { .. })
    }
}

/// Everything `headroom fit` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ts_rs::TS)]
pub struct FitReport {
    pub footprint: ModelFootprint,
    pub estimate: Estimate,
    pub budget: Budget,
    pub verdict: Verdict,
    /// budget − predicted peak (negative: over budget).
    pub spare_bytes: i64,
    /// The largest context whose predicted peak is within the budget, capped
    /// at the model's own ceiling; `None` if not even [`MIN_CONTEXT`] fits.
    pub largest_context_that_fits: Option<u64>,
    /// The KV format in words ("16-bit float", "8-bit (group 64)").
    pub kv_label: String,
    /// The formula's own predicted peak at this context; the estimate's
    /// `predicted_peak_bytes` is this, calibrated when `calibration` is set.
    pub formula_peak_bytes: u64,
    /// The peak measured for this model on this machine that the prediction
    /// rests on (`crate::calibration`); `None`: the formula alone.
    pub calibration: Option<Calibration>,
    /// What the prediction rests on, in words ("measured here at 4K: 9.8 GB", "estimated").
    pub basis: String,
    /// The measurements it was checked against, for the remedies' checks of
    /// the same model (another KV format, a shorter context).
    #[serde(skip)]
    pub measured: Vec<Measured>,
}

/// The verdict for `model` at `context` tokens, its KV cache stored as
/// `kv`, within `inputs`, by the formula alone ([`check_with`] without
/// measurements).
pub fn check(model: &ModelFootprint, context: u64, kv: KvFormat, inputs: BudgetInputs) -> FitReport {
    check_with(model, context, kv, inputs, &[])
}

/// The verdict for `model` at `context` tokens, its KV cache stored as
/// `kv`, within `inputs`, every peak calibrated by the peaks `measured` for
/// this model on this machine (`crate::calibration`: the measurement
/// nearest `context` corrects the formula, less with distance; the same
/// calibration for the verdict, the smallest context and the largest that
/// fits, so they agree). Pure: a caller weighing remedies (another context,
/// another KV format) calls it once per option against the same inputs.
pub fn check_with(
    model: &ModelFootprint,
    context: u64,
    kv: KvFormat,
    inputs: BudgetInputs,
    measured: &[Measured],
) -> FitReport {
    let budget = Budget::new(inputs);
    let formula = |c: u64| estimate(model, c, kv).predicted_peak_bytes;
    let mut est = estimate(model, context, kv);
    let calibration = calibration::calibration(formula, kv, context, measured);
    let peak_at = |c: u64| {
        let f = formula(c);
        calibration.map_or(f, |cal| cal.apply(c, f))
    };
    let formula_peak_bytes = est.predicted_peak_bytes;
    est.predicted_peak_bytes = peak_at(context);
    let limit = budget.budget_bytes;
    let peak = est.predicted_peak_bytes;
    let verdict = if peak > limit {
        let at_min = peak_at(MIN_CONTEXT.min(context));
        if at_min > limit {
            Verdict::CannotFit { by_bytes: at_min - limit }
        } else {
            Verdict::WouldSwap { by_bytes: peak - limit }
        }
    } else if (limit - peak) as f64 <= TIGHT_FRACTION * limit as f64 {
        Verdict::Tight
    } else {
        Verdict::Fits
    };
    let spare_bytes = i64::try_from(limit).unwrap_or(i64::MAX).saturating_sub(i64::try_from(peak).unwrap_or(i64::MAX));
    FitReport {
        footprint: model.clone(),
        estimate: est,
        budget,
        verdict,
        spare_bytes,
        largest_context_that_fits: largest_context_by(model, |c| peak_at(c) <= limit),
        kv_label: kv.label(crate::kv::float_name(model.kv_bytes_per_element)),
        formula_peak_bytes,
        calibration,
        basis: calibration::basis_label(calibration.as_ref()),
        measured: measured.to_vec(),
    }
}

/// MLX's buffer-cache limit for a model loaded with this verdict, by the
/// backend's rule ([`BackendTerms::buffer_cache`], with its sources in
/// `fit/backend.rs`): on Metal what the budget leaves after the model's
/// predicted peak, at least [`MIN_BUFFER_CACHE_BYTES`], so everything a long
/// chat can grow (the cache included) stays inside what the verdict
/// approved; on the CPU backend [`CPU_BUFFER_CACHE_BYTES`] whatever the
/// spare. Every load (app, CLI, server) sets it from its fit report, less
/// what the prompt cache was given of the same spare
/// ([`prompt_cache_limit`]). The price of the CPU's cap is prefill speed:
/// 2,048 tokens of SmolLM2 at 106–108 tok/s against 122–130 uncapped
/// (about −14 %; decode 22.3–23.7 against 21.9–22.8 tok/s)
/// (docs/fit-calibration.md, "The capped cache").
pub fn buffer_cache_limit(report: &FitReport, prompt_cache_bytes: u64) -> u64 {
    match terms(report.footprint.backend).buffer_cache {
        BufferCache::Capped { bytes } => bytes,
        BufferCache::FollowsSpare { min_bytes } => spare(report).saturating_sub(prompt_cache_bytes).max(min_bytes),
    }
}

/// Whether MLX's buffer cache is held at a fixed size on this backend
/// ([`buffer_cache_limit`]). The estimate follows the same answer: a capped
/// cache is [`cpu_resident_bytes`] beside MLX's peak, an uncapped one the
/// prefill slack ([`BackendTerms::beside_peak`]).
fn buffer_cache_capped(backend: Backend) -> bool {
    terms(backend).beside_peak == BesidePeak::CappedCache
}

/// budget − predicted peak, 0 when over.
fn spare(report: &FitReport) -> u64 {
    report.budget.budget_bytes.saturating_sub(report.estimate.predicted_peak_bytes)
}

/// The prompt cache's default ceiling (the settings change it): enough for
/// a few 7B chats at 8K context in bf16 (about 0.45 GB each), and a bound
/// that mlx-lm's and Ollama's unbounded or fixed caches lacked (mlx-lm
/// #1390, ollama #18133).
pub const DEFAULT_PROMPT_CACHE_MAX: u64 = 4 * GIB;

/// What the prompt cache may keep besides the latest request's KV state
/// (which the estimate already counts, at the context limit): half of what
/// the budget leaves after the model's predicted peak, at most `max_bytes`,
/// nothing for a model that would swap. The other half stays slack and
/// MLX's buffer cache ([`buffer_cache_limit`]), so the verdict's approval
/// covers the model, the chat in use and every cached prompt together.
pub fn prompt_cache_limit(report: &FitReport, max_bytes: u64) -> u64 {
    (spare(report) / 2).min(max_bytes)
}

/// MLX's wired limit for a model loaded with this verdict, on Metal (`None`:
/// leave MLX's default, 0, which wires nothing; always on a backend whose
/// [`BackendTerms::wired`] is [`Wired::Nothing`]).
///
/// Wired memory is kept resident: macOS can neither page nor compress it,
/// so it is taken from everything else on the Mac. MLX refuses (and through
/// mlx-c's default handler exits the process) when asked for more than the
/// GPU's recommended working set (`metal::set_wired_limit` in MLX 0.32.2's
/// `mlx/backend/metal/allocator.cpp`), and mlx-lm raises it to that working
/// set around each generation (`wired_limit` in `mlx_lm/generate.py`). The
/// rule here is stricter than mlx-lm's: wire the model's predicted peak
/// (weights + KV cache + overhead), never more than the working set, and
/// only when the verdict leaves the OS headroom free after it (spare ≥ 0:
/// the budget is available memory, plus what the unload frees, minus the
/// headroom the user keeps for the OS, 4 GB by default). A model that would
/// swap gets nothing wired, so what the OS needs can still be paged in.
pub fn wired_limit(report: &FitReport) -> Option<u64> {
    if terms(report.footprint.backend).wired == Wired::Nothing {
        return None;
    }
    let working_set = report.budget.inputs.gpu_working_set_bytes?;
    (report.spare_bytes >= 0).then(|| report.estimate.predicted_peak_bytes.min(working_set))
}

/// The largest context (at least [`MIN_CONTEXT`]) whose predicted peak, the
/// KV cache stored as `kv`, is within `budget_bytes`, capped at the model's
/// ceiling. The peak grows with the context (a quantized cache's conversion
/// included: the float cache it replaces is never larger than the float
/// cache at a longer context), so a binary search finds it.
pub fn largest_context_that_fits(model: &ModelFootprint, kv: KvFormat, budget_bytes: u64) -> Option<u64> {
    largest_context_by(model, |c| estimate(model, c, kv).predicted_peak_bytes <= budget_bytes)
}

/// The largest context (at least [`MIN_CONTEXT`], at most the model's
/// ceiling) for which `fits` holds, `fits` being monotone in the context.
fn largest_context_by(model: &ModelFootprint, fits: impl Fn(u64) -> bool) -> Option<u64> {
    if !fits(MIN_CONTEXT) {
        return None;
    }
    let ceiling = model.max_context.unwrap_or(1 << 24).max(MIN_CONTEXT);
    if fits(ceiling) {
        return Some(ceiling);
    }
    let (mut lo, mut hi) = (MIN_CONTEXT, ceiling); // fits(lo), !fits(hi)
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The `medium` demo model's shape (`headroom demo-model --preset medium`:
/// a 12-layer qwen2, 12 query and 4 KV heads of 64) with a KV cache of
/// `kv_bytes_per_element`, as the CPU kernel runs it, and no weights: for
/// the fit's tests and the engine's, which check the estimate against MLX's
/// own counters.
#[cfg(any(test, feature = "test-support"))]
pub fn medium_demo(kv_bytes_per_element: u64) -> ModelFootprint {
    ModelFootprint {
        layers: 12,
        attention_heads: 12,
        kv_heads: 4,
        head_dim: 64,
        hidden_size: 768,
        intermediate_size: 3072,
        vocab_size: 1024,
        kv_bytes_per_element,
        max_context: Some(4096),
        prefill_dequantizes: true,
        kv_layers: vec![KvLayers::full(12, 4, 64)],
        ..ModelFootprint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::KvFormat::Float;

    const MB: u64 = 1 << 20;

    #[test]
    fn a_draft_adds_its_weights_and_its_kv_cache_at_every_context() {
        let target = qwen7b();
        // A 0.5B-like draft: 24 layers, 2 KV heads of 64.
        let draft = ModelFootprint {
            weight_bytes: 300 * MB,
            active_weight_bytes: 300 * MB,
            kv_layers: vec![KvLayers::full(24, 2, 64)],
            max_context: Some(131_072),
            ..qwen7b()
        };
        let both = target.with_draft(&draft);
        for context in [512, 8192, 32768] {
            let (t, d, b) =
                (estimate(&target, context, Float), estimate(&draft, context, Float), estimate(&both, context, Float));
            assert_eq!(b.weight_bytes, t.weight_bytes + d.weight_bytes, "{context}");
            assert_eq!(b.kv_cache_bytes, t.kv_cache_bytes + d.kv_cache_bytes, "{context}");
            assert!(b.predicted_peak_bytes >= t.predicted_peak_bytes + d.weight_bytes + d.kv_cache_bytes, "{context}");
        }
        assert_eq!(both.max_context, Some(32768), "the tighter ceiling");
        assert_eq!(both.layers, target.layers, "the model's own layers (a split counts them)");
    }

    /// Qwen2.5-7B-Instruct-4bit's shape (weights as mlx-community ships them).
    fn qwen7b() -> ModelFootprint {
        ModelFootprint {
            weight_bytes: 4_283_105_280,
            layers: 28,
            attention_heads: 28,
            kv_heads: 4,
            head_dim: 128,
            hidden_size: 3584,
            intermediate_size: 18944,
            vocab_size: 152_064,
            kv_bytes_per_element: 2,
            max_context: Some(32768),
            // As on a Mac (Metal's fused kernel).
            prefill_dequantizes: false,
            kv_layers: vec![KvLayers::full(28, 4, 128)],
            backend: Backend::Cpu,
            active_weight_bytes: 4_283_105_280,
            experts: None,
            layer_weight_bytes: Vec::new(),
        }
    }

    #[test]
    fn the_cpu_cache_holds_the_least_of_its_three_bounds() {
        const MB: u64 = 1_000_000;
        // A short prompt: twice its MLP (the `medium` qwen2 at 128 tokens).
        let mlp = |rows: u64| 9 * rows * (768 + 3072);
        let widest = |rows: u64| rows * 3072 * 4;
        assert_eq!(cpu_resident_bytes(mlp(128), widest(128)), CPU_RUNTIME_BYTES + 2 * mlp(128));
        // Mid-range: what the cache was seen to hold at most.
        assert_eq!(cpu_resident_bytes(mlp(512), widest(512)), CPU_RESIDENT_BYTES);
        // A full chunk: the cap less its 25 MB widest buffer.
        assert_eq!(
            cpu_resident_bytes(mlp(2048), widest(2048)),
            CPU_RUNTIME_BYTES + CPU_BUFFER_CACHE_BYTES - widest(2048)
        );
        assert!(cpu_resident_bytes(mlp(2048), widest(2048)) < CPU_RUNTIME_BYTES + 9 * MB);
        // A buffer beyond the cap: the runtime alone, never an underflow.
        assert_eq!(cpu_resident_bytes(u64::MAX, u64::MAX), CPU_RUNTIME_BYTES);
    }

    #[test]
    fn estimate_adds_its_named_parts_exactly() {
        let m = qwen7b();
        let e = estimate(&m, 8192, Float);
        assert_eq!(e.kv_positions, 8192);
        // 2 × 28 × 4 × 128 × 8192 × 2
        assert_eq!(e.kv_cache_bytes, 469_762_048);
        assert_eq!(e.overhead.chunk_tokens, 2048);
        assert_eq!((e.overhead.attention_queries, e.overhead.attention_keys), (2048, 8192));
        // 2048 × 8192 × 2 × (3 × 28 + 6) / 4
        assert_eq!(e.overhead.attention_bytes, 754_974_720);
        // 2048 × (3584 + 18944) × 2 × 15 / 2
        assert_eq!(e.overhead.activation_bytes, 692_060_160);
        assert_eq!(e.overhead.logits_bytes, 152_064 * 4 * LOGITS_FACTOR);
        // On the CPU backend MLX's cache is capped: no slack, the resident
        // bytes instead; a 2,048-row chunk's widest buffer (2048 × 18944 ×
        // 4, 155 MB) leaves no room under the 32 MiB cap, so the runtime's.
        assert_eq!(e.overhead.prefill_slack_bytes, 0);
        assert_eq!(e.overhead.fixed_bytes, FIXED_OVERHEAD + CPU_RUNTIME_BYTES);
        assert_eq!(e.overhead.recurrence_bytes, 0);
        // On Metal, where the float path falls back (head dim 256), the chunk
        // before the largest block: 2048 queries × 6144 keys, halved.
        let wide = ModelFootprint { backend: Backend::Metal, head_dim: 256, ..qwen7b() };
        let w = estimate(&wide, 8192, Float);
        assert_eq!(w.overhead.prefill_slack_bytes, 2048 * 6144 * 2 * 90 / 4 / 2);
        assert_eq!(w.overhead.fixed_bytes, FIXED_OVERHEAD);
        assert_eq!(
            e.overhead.total_bytes,
            e.overhead.attention_bytes
                + e.overhead.activation_bytes
                + e.overhead.logits_bytes
                + e.overhead.prefill_slack_bytes
                + e.overhead.fixed_bytes
        );
        // One chunk: no slack; linear layers: their recurrence per chunk token.
        assert_eq!(estimate(&wide, 2048, Float).overhead.prefill_slack_bytes, 0);
        let hybrid =
            ModelFootprint { kv_layers: vec![KvLayers::full(7, 4, 128), KvLayers::state(21, 1 << 20)], ..qwen7b() };
        assert_eq!(
            estimate(&hybrid, 300, Float).overhead.recurrence_bytes,
            21 * 300 * RECURRENCE_BYTES_PER_TOKEN + RECURRENCE_FIXED_BYTES
        );
        assert_eq!(e.predicted_peak_bytes, m.weight_bytes + e.kv_cache_bytes + e.overhead.total_bytes);
    }

    #[test]
    fn kv_rounds_up_to_the_cache_step_and_small_contexts_use_a_small_chunk() {
        let e = estimate(&qwen7b(), 300, Float);
        assert_eq!(e.kv_positions, 512);
        assert_eq!(e.kv_cache_bytes, 2 * 28 * 4 * 128 * 512 * 2);
        assert_eq!(e.overhead.chunk_tokens, 300);
        assert_eq!(e.overhead.attention_bytes, 300 * 300 * 2 * 90 / 4);
    }

    #[test]
    fn the_largest_attention_block_follows_the_chunking() {
        assert_eq!(largest_attention_block(100), (100, 100));
        assert_eq!(largest_attention_block(2048), (2048, 2048));
        // 2048 × 2048 > 100 × 2148
        assert_eq!(largest_attention_block(2148), (2048, 2048));
        assert_eq!(largest_attention_block(4096), (2048, 4096));
        // 1685 × 7829 > 2048 × 6144
        assert_eq!(largest_attention_block(7829), (1685, 7829));
        // Absurd contexts saturate instead of overflowing.
        assert!(largest_attention_block(u64::MAX).1 > 1 << 63);
        assert!(estimate(&qwen7b(), u64::MAX, Float).predicted_peak_bytes > 1 << 63);
    }

    /// SmolLM2-135M-Instruct Q4_1 (the default model) as the CPU kernel runs it.
    fn smollm2() -> ModelFootprint {
        ModelFootprint {
            weight_bytes: 98_346_240,
            layers: 30,
            attention_heads: 9,
            kv_heads: 3,
            head_dim: 64,
            hidden_size: 576,
            intermediate_size: 1536,
            vocab_size: 49152,
            kv_bytes_per_element: 4,
            max_context: Some(8192),
            prefill_dequantizes: true,
            kv_layers: vec![KvLayers::full(30, 3, 64)],
            backend: Backend::Cpu,
            active_weight_bytes: 98_346_240,
            experts: None,
            layer_weight_bytes: Vec::new(),
        }
    }

    /// The `medium` demo as the CPU kernel runs it.
    fn medium(weight_bytes: u64, dtype_bytes: u64) -> ModelFootprint {
        ModelFootprint { weight_bytes, ..medium_demo(dtype_bytes) }
    }

    #[test]
    fn the_peak_is_the_prompt_chunk_that_costs_most_with_the_cache_it_holds_then() {
        assert_eq!(prefill_peak_chunks(100), ((100, 100), None));
        assert_eq!(prefill_peak_chunks(2048), ((2048, 2048), None));
        assert_eq!(prefill_peak_chunks(2592), ((544, 2592), Some((2048, 2048))));
        assert_eq!(prefill_peak_chunks(4096), ((2048, 4096), None));
        assert_eq!(prefill_peak_chunks(4992), ((896, 4992), Some((2048, 4096))));
        let m = smollm2();
        // Just past one chunk the first chunk's pass peaks, with the cache
        // it held then: the figure at 2,048 (measured: MLX's peak 386.8 MB
        // at 2,592 tokens, 387.2 at 2,044).
        let (at_2048, at_2592) = (estimate(&m, 2048, Float), estimate(&m, 2592, Float));
        assert_eq!((at_2592.peak_positions, at_2592.overhead.chunk_tokens), (2048, 2048));
        assert_eq!(at_2592.kv_at_peak_bytes, at_2048.kv_cache_bytes);
        assert!(at_2592.kv_cache_bytes > at_2592.kv_at_peak_bytes);
        assert_eq!(at_2592.predicted_peak_bytes, at_2048.predicted_peak_bytes);
        assert_eq!(
            at_2592.predicted_peak_bytes,
            m.weight_bytes + at_2592.kv_peak_bytes() + at_2592.overhead.total_bytes
        );
        // At 3,964 the second, shorter chunk: 1,916 queries over every key, the whole cache.
        let e = estimate(&m, 3964, Float);
        assert_eq!((e.peak_positions, e.overhead.attention_queries, e.overhead.attention_keys), (3964, 1916, 3964));
        assert_eq!(e.kv_at_peak_bytes, e.kv_cache_bytes);
        // 1916 × 3964 × 4 × 9 × 21/20 + 6 × 1916²
        assert_eq!(e.overhead.attention_bytes, 1916 * 3964 * 4 * 9 * 21 / 20 + 6 * 1916 * 1916);
        assert_eq!(e.overhead.attention_bytes, cpu_kernel_attention_bytes(9, 1916, 3964, 4));
        // The predicted peak never falls as the context grows, on either backend.
        let hybrid =
            ModelFootprint { kv_layers: vec![KvLayers::full(7, 4, 128), KvLayers::state(21, 1 << 20)], ..qwen7b() };
        for model in [m, qwen7b(), qwen14b(Backend::Metal), qwen14b(Backend::Cpu), hybrid] {
            let mut last = 0;
            for context in (1..=20_000).step_by(61) {
                let peak = estimate(&model, context, Float).predicted_peak_bytes;
                assert!(peak >= last, "{} layers: {peak} at {context} < {last} before", model.layers);
                last = peak;
            }
        }
    }

    /// MLX's peak on the CPU kernel past one prompt chunk, measured
    /// (2026-12-05, docs/fit-calibration.md "Past one prompt chunk"): the
    /// formula less what it counts beside MLX is within 2 % of each.
    #[test]
    fn mlx_peaks_past_one_chunk_are_reproduced() {
        let medium = medium(59_346_432, 2);
        for (model, positions, mlx_peak) in [
            (smollm2(), 2592, 386_845_008u64),
            (smollm2(), 3292, 428_949_617),
            (smollm2(), 3964, 608_627_985),
            (smollm2(), 4992, 637_992_716),
            (medium.clone(), 2591, 230_886_954),
            (medium.clone(), 3291, 230_886_988),
            (medium, 3960, 338_536_089),
        ] {
            let e = estimate(&model, positions, Float);
            let beside_mlx = e.overhead.fixed_bytes - FIXED_OVERHEAD + e.overhead.recurrence_bytes;
            let predicted = e.predicted_peak_bytes - beside_mlx;
            let error = predicted as f64 / mlx_peak as f64 - 1.0;
            assert!(
                error.abs() <= 0.02,
                "{} layers at {positions}: {predicted} vs MLX's {mlx_peak} ({:+.1} %)",
                model.layers,
                error * 100.0
            );
        }
    }

    #[test]
    fn budget_is_available_plus_freed_minus_headroom_capped_by_the_gpu() {
        let b = Budget::new(BudgetInputs {
            available_bytes: 10 * GIB,
            freed_by_unload_bytes: 5 * GIB,
            os_headroom_bytes: DEFAULT_OS_HEADROOM,
            gpu_working_set_bytes: None,
        });
        assert_eq!((b.from_memory_bytes, b.budget_bytes, b.limited_by), (11 * GIB, 11 * GIB, BudgetLimit::Memory));
        let b = Budget::new(BudgetInputs { gpu_working_set_bytes: Some(9 * GIB), ..b.inputs });
        assert_eq!((b.budget_bytes, b.limited_by), (9 * GIB, BudgetLimit::GpuWorkingSet));
        // Less available than the headroom: nothing, not an underflow.
        let b = Budget::new(BudgetInputs::new(3 * GIB));
        assert_eq!(b.budget_bytes, 0);
    }

    #[test]
    fn a_peak_measured_here_moves_the_verdict_the_largest_context_and_says_so() {
        let m = qwen7b();
        let formula = |c| estimate(&m, c, Float).predicted_peak_bytes;
        let inputs = BudgetInputs::new(formula(8192) + formula(8192) / 10 + DEFAULT_OS_HEADROOM);
        let plain = check(&m, 8192, Float, inputs);
        assert_eq!((plain.verdict, plain.calibration, plain.basis.as_str()), (Verdict::Tight, None, "estimated"));
        assert_eq!(plain.formula_peak_bytes, plain.estimate.predicted_peak_bytes);

        // This Mac took 2 GiB more than the formula at 6,889 tokens: 8K now
        // swaps, by at least half of that (8K is 2^¼ times that context: 50 %
        // of the correction counts there).
        let seen = [Measured { kv: Float, context_tokens: 6889, peak_bytes: formula(6889) + 2 * GIB }];
        let r = check_with(&m, 8192, Float, inputs, &seen);
        let cal = r.calibration.unwrap_or_else(|| panic!("calibrated"));
        assert_eq!((cal.at_context, cal.offset_bytes, cal.formula_bytes), (6889, 2 * GIB as i64, formula(6889)));
        assert_eq!((cal.for_context, cal.weight_percent), (8192, 50));
        assert!(r.estimate.predicted_peak_bytes >= formula(8192) + GIB, "{}", r.estimate.predicted_peak_bytes);
        assert_eq!(r.estimate.predicted_peak_bytes, cal.apply(8192, formula(8192)));
        assert_eq!(r.formula_peak_bytes, formula(8192));
        assert!(matches!(r.verdict, Verdict::WouldSwap { .. }), "{:?}", r.verdict);
        assert!(r.basis.starts_with("measured here at 6889: "), "{}", r.basis);
        assert!(r.basis.ends_with(", counted 50 % at 8K"), "{}", r.basis);
        let largest = r.largest_context_that_fits.unwrap_or_default();
        let budget = r.budget.budget_bytes;
        let at = |c| cal.apply(c, formula(c));
        assert!(at(largest) <= budget && at(largest + 1) > budget, "{largest}");
        // A measurement of another KV format does not count.
        let q8 = KvFormat::bits_from_start(8);
        let other = [Measured { kv: q8, ..seen[0] }];
        assert_eq!(check_with(&m, 8192, Float, inputs, &other).verdict, Verdict::Tight);
    }

    #[test]
    fn verdicts_fits_tight_would_swap_cannot_fit() {
        let m = qwen7b();
        let peak = estimate(&m, 8192, Float).predicted_peak_bytes;
        let headroom = DEFAULT_OS_HEADROOM;

        // Exactly 20 % spare: fits.
        let budget = peak + peak / 4; // spare = peak/4 = 20 % of budget
        let r = check(&m, 8192, Float, BudgetInputs::new(budget + headroom));
        assert_eq!(r.verdict, Verdict::Fits);
        assert_eq!(r.spare_bytes, i64::try_from(budget - peak).unwrap_or_default());

        // 5 % spare: tight.
        let budget = peak * 20 / 19;
        let r = check(&m, 8192, Float, BudgetInputs::new(budget + headroom));
        assert_eq!(r.verdict, Verdict::Tight);

        // Exactly the peak: tight, not swapping.
        assert_eq!(check(&m, 8192, Float, BudgetInputs::new(peak + headroom)).verdict, Verdict::Tight);

        // One MB short: would swap by exactly 1 MB, and a smaller context fits.
        let r = check(&m, 8192, Float, BudgetInputs::new(peak - MB + headroom));
        assert_eq!(r.verdict, Verdict::WouldSwap { by_bytes: MB });
        assert!(r.verdict.refuses());
        assert_eq!(r.spare_bytes, -i64::try_from(MB).unwrap_or_default());
        let largest = r.largest_context_that_fits.unwrap_or_default();
        assert!((MIN_CONTEXT..8192).contains(&largest), "{largest}");
        assert!(estimate(&m, largest, Float).predicted_peak_bytes <= peak - MB);
        assert!(estimate(&m, largest + 1, Float).predicted_peak_bytes > peak - MB);

        // Less than the weights: cannot fit at any context, by the minimal-context shortfall.
        let min_peak = estimate(&m, MIN_CONTEXT, Float).predicted_peak_bytes;
        let r = check(&m, 8192, Float, BudgetInputs::new(m.weight_bytes + headroom));
        assert_eq!(r.verdict, Verdict::CannotFit { by_bytes: min_peak - m.weight_bytes });
        assert_eq!(r.largest_context_that_fits, None);
    }

    #[test]
    fn unloading_the_current_model_can_turn_a_refusal_into_a_fit() {
        let m = qwen7b();
        let peak = estimate(&m, 4096, Float).predicted_peak_bytes;
        let inputs = BudgetInputs::new(peak / 2 + DEFAULT_OS_HEADROOM);
        assert!(check(&m, 4096, Float, inputs).verdict.refuses());
        let inputs = BudgetInputs { freed_by_unload_bytes: peak, ..inputs };
        assert_eq!(check(&m, 4096, Float, inputs).verdict, Verdict::Fits);
    }

    #[test]
    fn largest_context_is_capped_at_the_model_ceiling() {
        let m = qwen7b();
        assert_eq!(largest_context_that_fits(&m, Float, 1 << 50), Some(32768));
        let m = ModelFootprint { max_context: None, ..m };
        assert_eq!(largest_context_that_fits(&m, Float, 1 << 60), Some(1 << 24));
    }

    #[test]
    fn the_32gb_mac_mini_rule_of_thumb_holds_for_7b_and_14b() {
        // A 32 GB Mac mini with 16 GB available (a browser open) and 4 GB
        // headroom: a 7B 4-bit model at 8k fits; a 14B (8.3 GB of weights)
        // at 32k (6.4 GB of KV alone) does not.
        let avail = 16 * GIB;
        assert_eq!(check(&qwen7b(), 8192, Float, BudgetInputs::new(avail)).verdict, Verdict::Fits);
        let m14 = ModelFootprint {
            weight_bytes: 8_310_000_000,
            layers: 48,
            attention_heads: 40,
            kv_heads: 8,
            hidden_size: 5120,
            intermediate_size: 13824,
            kv_layers: vec![KvLayers::full(48, 8, 128)],
            ..qwen7b()
        };
        assert!(check(&m14, 32768, Float, BudgetInputs::new(avail)).verdict.refuses());
    }

    /// Qwen2.5-14B's shape at 4 bits (the example).
    fn qwen14b(backend: Backend) -> ModelFootprint {
        ModelFootprint {
            weight_bytes: 8_310_000_000,
            layers: 48,
            attention_heads: 40,
            kv_heads: 8,
            hidden_size: 5120,
            intermediate_size: 13824,
            vocab_size: 152_064,
            kv_layers: vec![KvLayers::full(48, 8, 128)],
            backend,
            ..qwen7b()
        }
    }

    /// On Metal the fused kernel takes every attention call of a 14B-shaped
    /// model (head dim 128, causal mode, queries <= keys; GQA 5 at decode),
    /// so the 3.9 GB of scores the CPU fallback needs at 32K is not counted
    /// and the 18 GB verdict turns from "would swap" into a fit.
    #[test]
    fn metal_counts_no_score_matrix_where_mlx_fuses_attention() {
        let (cpu, metal) = (qwen14b(Backend::Cpu), qwen14b(Backend::Metal));
        let e_cpu = estimate(&cpu, 32768, Float);
        let e_metal = estimate(&metal, 32768, Float);
        assert_eq!(e_cpu.overhead.attention_path, AttentionPath::Unfused);
        // (3 × 40 + 6) / 4 × 2048 × 32768 × 2 bytes.
        assert_eq!(e_cpu.overhead.attention_bytes, 4_227_858_432);
        assert_eq!(e_metal.overhead.attention_path, AttentionPath::Fused);
        // MLX's vector kernel's partials at most: 40 heads × 1024 blocks × (128 × 2 + 8) bytes.
        assert_eq!(e_metal.overhead.attention_bytes, 40 * 1024 * (128 * 2 + 8));
        assert_eq!(e_cpu.kv_cache_bytes, e_metal.kv_cache_bytes);
        // An 18 GB budget: 22 GB available less the 4 GB kept for the OS.
        let avail = BudgetInputs::new(22 * GIB);
        let Verdict::WouldSwap { by_bytes } = check(&cpu, 32768, Float, avail).verdict else {
            panic!("the CPU figures must swap here")
        };
        // The scores alone make it swap (the figures: by 0.75 GB
        // because of 3.94 GB of scores; here 8.31 GB of weights).
        assert!(by_bytes > 0 && by_bytes < e_cpu.overhead.attention_bytes, "{by_bytes}");
        assert!(!check(&metal, 32768, Float, avail).verdict.refuses());
        // Head dim 256 (Gemma's): MLX leaves prompt chunks unfused on Metal, so the scores count.
        let wide =
            ModelFootprint { head_dim: 256, kv_layers: vec![KvLayers::full(48, 8, 256)], ..qwen14b(Backend::Metal) };
        assert_eq!(estimate(&wide, 32768, Float).overhead.attention_path, AttentionPath::Unfused);
    }

    /// The KV term in 8 and 4 bits, and the remedies example: at 32K
    /// on a 16 GB budget the 14B swaps with a bf16 cache and fits at 8 bits.
    #[test]
    fn a_quantized_cache_costs_its_bits_and_turns_a_swap_into_a_fit() {
        let m = qwen14b(Backend::Metal);
        let bf16 = estimate(&m, 32768, Float);
        let q8 = estimate(&m, 32768, KvFormat::bits_from_start(8));
        let q4 = estimate(&m, 32768, KvFormat::bits_from_start(4));
        assert_eq!(bf16.kv_cache_bytes, 2 * 48 * 8 * 128 * 32768 * 2);
        assert_eq!(q8.kv_cache_bytes * 32, bf16.kv_cache_bytes * 17); // 0.53125
        assert_eq!(q4.kv_cache_bytes * 32, bf16.kv_cache_bytes * 9); // 0.28125
        assert!(q8.kv_quantized && !bf16.kv_quantized);
        // Converted after the first chunk: the float cache it replaced was one chunk long.
        assert_eq!(q8.kv_before_conversion_bytes, 2 * 48 * 8 * 128 * 2048 * 2);
        assert_eq!(q8.kv_peak_bytes(), q8.kv_cache_bytes);
        // Quantized attention materializes scores, in blocks the engine keeps to 64 MiB.
        assert_eq!(q8.overhead.attention_path, AttentionPath::Quantized);
        assert!(q8.overhead.attention_bytes <= 3 * crate::attention::QUANTIZED_SCORES_BLOCK_BYTES);
        let avail = BudgetInputs::new(16 * GIB);
        let r = check(&m, 32768, Float, avail);
        assert!(r.verdict.refuses(), "{:?}", r.verdict);
        let r8 = check(&m, 32768, KvFormat::bits_from_start(8), avail);
        assert!(!r8.verdict.refuses(), "{:?}", r8.verdict);
        assert_eq!(r8.kv_label, "8-bit (group 64)");
        assert_eq!(r.kv_label, "16-bit float");
        // The largest context grows with fewer bits.
        let limit = r.budget.budget_bytes;
        let l16 = largest_context_that_fits(&m, Float, limit).unwrap_or(0);
        let l8 = largest_context_that_fits(&m, KvFormat::bits_from_start(8), limit).unwrap_or(0);
        assert!(l16 < 32768 && l8 >= 32768, "{l16} {l8}");
        // A cache that converts late holds its float form until then: below
        // the start it costs bf16; past it, never less than the float cache at the start.
        let late = KvFormat::quantized(8, 64, 5000).unwrap_or_default();
        assert_eq!(estimate(&m, 4096, late).kv_cache_bytes, estimate(&m, 4096, Float).kv_cache_bytes);
        let e = estimate(&m, 32768, late);
        assert_eq!(e.kv_before_conversion_bytes, 2 * 48 * 8 * 128 * 7168 * 2);
        assert!(e.predicted_peak_bytes >= q8.predicted_peak_bytes);
    }

    /// Sliding windows and linear states stay in the float type (mlx-lm
    /// quantizes neither), and a model with windows is refused a quantized cache.
    #[test]
    fn only_full_attention_layers_are_quantized() {
        let g = KvLayers::sliding(40, 8, 256, 1024);
        let s = KvLayers::state(30, 1 << 20);
        let q8 = KvFormat::bits_from_start(8);
        assert_eq!(g.bytes_as(8192, q8, 2), g.bytes(8192, 2));
        assert_eq!(s.bytes_as(8192, q8, 2), s.bytes(8192, 2));
        assert!(KvLayers::full(8, 8, 256).bytes_as(8192, q8, 2) < KvLayers::full(8, 8, 256).bytes(8192, 2));
        let gemma = ModelFootprint { head_dim: 256, kv_layers: vec![g, KvLayers::full(8, 8, 256)], ..qwen7b() };
        assert_eq!(gemma.check_kv(q8), Err(crate::kv::KvFormatError::SlidingWindow));
        assert_eq!(gemma.check_kv(Float), Ok(()));
        let qwen35 = ModelFootprint { kv_layers: vec![s, KvLayers::full(10, 2, 256)], head_dim: 256, ..qwen7b() };
        assert_eq!(qwen35.check_kv(q8), Ok(()));
        let tiny = ModelFootprint { head_dim: 16, ..qwen7b() };
        assert!(matches!(tiny.check_kv(q8), Err(crate::kv::KvFormatError::HeadDim { .. })));
    }

    /// The buffer cache gets what the budget leaves after the peak (at least
    /// 256 MB); the wired limit is the peak, under the working set, and only
    /// for a verdict that keeps the OS headroom free.
    #[test]
    fn buffer_cache_and_wired_limits_follow_the_verdict() {
        let m = qwen14b(Backend::Metal);
        let peak = estimate(&m, 8192, Float).predicted_peak_bytes;
        let inputs = BudgetInputs { gpu_working_set_bytes: Some(22 * GIB), ..BudgetInputs::new(24 * GIB) };
        let r = check(&m, 8192, Float, inputs);
        assert_eq!(buffer_cache_limit(&r, 0), r.budget.budget_bytes - peak);
        assert_eq!(wired_limit(&r), Some(peak));
        // The prompt cache takes half the spare (at most its ceiling), the buffer cache the rest.
        let spare = r.budget.budget_bytes - peak;
        assert_eq!(prompt_cache_limit(&r, u64::MAX), spare / 2);
        assert_eq!(prompt_cache_limit(&r, GIB), GIB.min(spare / 2));
        let pc = prompt_cache_limit(&r, u64::MAX);
        assert_eq!(buffer_cache_limit(&r, pc) + pc, spare);
        // Would swap: nothing wired, and the buffer cache at its floor.
        let tight = BudgetInputs { gpu_working_set_bytes: Some(22 * GIB), ..BudgetInputs::new(8 * GIB) };
        let r = check(&m, 8192, Float, tight);
        assert!(r.verdict.refuses());
        assert_eq!((wired_limit(&r), buffer_cache_limit(&r, 0)), (None, MIN_BUFFER_CACHE_BYTES));
        assert_eq!(prompt_cache_limit(&r, u64::MAX), 0, "nothing is cached on a budget the model is over");
        // No GPU (Linux): nothing wired.
        assert_eq!(wired_limit(&check(&m, 8192, Float, BudgetInputs::new(64 * GIB))), None);
        // On the CPU backend the buffer cache stays at MLX's default, however roomy the budget.
        let cpu = check(&qwen14b(Backend::Cpu), 8192, Float, BudgetInputs::new(64 * GIB));
        assert!(cpu.spare_bytes > 4 * GIB as i64);
        assert_eq!(buffer_cache_limit(&cpu, 0), CPU_BUFFER_CACHE_BYTES);
        assert_eq!(buffer_cache_limit(&check(&qwen14b(Backend::Cpu), 8192, Float, tight), 0), CPU_BUFFER_CACHE_BYTES);
    }

    /// The measurements in the module docs: (footprint, prompt tokens, MLX peak bytes).
    fn calibration_points() -> Vec<(ModelFootprint, u64, u64)> {
        let demo =
            |weight_bytes, layers, attention_heads, head_dim, hidden_size, intermediate_size, vocab_size, max| {
                ModelFootprint {
                    weight_bytes,
                    layers,
                    attention_heads,
                    kv_heads: 2,
                    head_dim,
                    hidden_size,
                    intermediate_size,
                    vocab_size,
                    kv_bytes_per_element: 2,
                    max_context: Some(max),
                    // Measured with MLX's fused kernel.
                    prefill_dequantizes: false,
                    kv_layers: vec![KvLayers::full(layers, 2, head_dim)],
                    ..ModelFootprint::default()
                }
            };
        let tiny = demo(79_488, 2, 4, 16, 64, 128, 1024, 4096);
        let small = demo(5_404_160, 12, 8, 32, 256, 768, 1024, 4096);
        let q05 = demo(277_996_288, 24, 14, 64, 896, 4864, 151_936, 32768);
        let mut points = Vec::new();
        for (prompt, peak) in [
            (77, 421_838),
            (389, 2_783_470),
            (1049, 13_594_894),
            (2069, 44_873_384),
            (4229, 83_416_750),
            (7829, 126_626_094),
        ] {
            points.push((tiny.clone(), prompt, peak));
        }
        for (prompt, peak) in [(77, 7_397_102), (389, 14_750_334), (1049, 42_117_102)] {
            points.push((small.clone(), prompt, peak));
        }
        for (prompt, peak) in Q05_POINTS {
            points.push((q05.clone(), *prompt, *peak));
        }
        points
    }

    /// qwen2.5-0.5b-shaped demo: (prompt tokens, MLX peak bytes).
    const Q05_POINTS: &[(u64, u64)] = &[(77, 285_495_802)];

    #[test]
    fn calibration_points_are_reproduced() {
        for (model, prompt, measured) in calibration_points() {
            // The turn held prompt + 3 positions (4 tokens generated, the last never fed).
            // What the OS sees beside MLX's buffers is not in MLX's peak.
            let e = estimate(&model, prompt + 3, Float);
            let resident = e.overhead.fixed_bytes - FIXED_OVERHEAD;
            let beside_mlx = e.overhead.prefill_slack_bytes + e.overhead.recurrence_bytes + resident;
            let predicted = e.predicted_peak_bytes - beside_mlx;
            let error = predicted as f64 / measured as f64 - 1.0;
            // Within 10 %, or within half a MB on the smallest runs (where the
            // fixed term dominates and no decision hinges on it).
            assert!(
                error.abs() <= 0.10 || predicted.abs_diff(measured) <= MB / 2,
                "{} layers, {prompt} tokens: predicted {predicted}, measured {measured} ({:+.1} %)",
                model.layers,
                error * 100.0
            );
        }
    }

    /// `scripts/measure-fit.sh`'s run in the module docs: (footprint with f32
    /// activations, positions held, peak RSS bytes), and the baseline.
    #[test]
    fn process_rss_measurements_stay_within_bounds() {
        const BASELINE: u64 = 72_400_000;
        let medium = medium(66_001_920, 4);
        let q7b_f32 = ModelFootprint {
            weight_bytes: 4_760_885_248,
            kv_bytes_per_element: 4,
            prefill_dequantizes: true,
            ..qwen7b()
        };
        for (model, positions, rss) in
            [(&medium, 262, 202_800_000u64), (&medium, 2054, 469_800_000), (&q7b_f32, 32, 5_515_100_000)]
        {
            let predicted = estimate(model, positions, Float).predicted_peak_bytes + BASELINE;
            let error = predicted as f64 / rss as f64 - 1.0;
            // 5 % under, 25 % over (module docs): −0.5 % and −0.2 % on the
            // `medium` here. (With a flat 20 MB beside MLX's peak the tiny
            // run's prediction counted more than it holds, the baseline came
            // out 10 MB low and this read −7.1 %; `cpu_resident_bytes`
            // counts what a short prompt holds.)
            assert!(
                (-0.05..=0.25).contains(&error),
                "{} layers at {positions}: {predicted} vs {rss} ({:+.1} %)",
                model.layers,
                error * 100.0
            );
        }
    }

    #[test]
    fn every_part_is_serialized() {
        let r = check(&qwen7b(), 2048, Float, BudgetInputs::new(16 * GIB));
        let v = serde_json::to_value(&r).unwrap_or_default();
        for path in [
            "/estimate/weight_bytes",
            "/estimate/kv_cache_bytes",
            "/estimate/overhead/attention_bytes",
            "/estimate/overhead/logits_bytes",
            "/estimate/predicted_peak_bytes",
            "/budget/available_bytes",
            "/budget/freed_by_unload_bytes",
            "/budget/os_headroom_bytes",
            "/budget/budget_bytes",
            "/verdict/kind",
            "/largest_context_that_fits",
        ] {
            assert!(v.pointer(path).is_some(), "{path} in {v}");
        }
    }
}
