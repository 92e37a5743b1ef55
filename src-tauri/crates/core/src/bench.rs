//! The benchmark's arithmetic: mean ± sample standard deviation of repeated
//! runs, the summary of one context depth, the memory-bandwidth roofline of
//! decoding, and the rated memory bandwidth of Apple-silicon chips. Pure, so
//! the figures `headroom bench` prints are tested exactly.

use serde::{Deserialize, Serialize};

use crate::format::{LayerAttention, TextConfig, WeightBytes};
use crate::kv::KvFormat;

use crate::stats::Rates;

/// Mean and sample standard deviation (n − 1 in the denominator, as
/// llama-bench reports) of a set of measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct MeanSd {
    pub mean: f64,
    /// `None` with a single value: one run says nothing about the spread.
    pub sd: Option<f64>,
    /// How many values went in.
    pub n: usize,
}

impl MeanSd {
    /// `None` for no values; non-finite values are a caller bug and are
    /// left out rather than poisoning the mean.
    pub fn of(values: &[f64]) -> Option<Self> {
        let values: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = (n > 1).then(|| {
            let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        Some(Self { mean, sd, n })
    }

    /// Standard deviation over mean (0 for a single value): the spread the
    /// issue asks to stay within a few percent.
    pub fn relative_sd(&self) -> f64 {
        match self.sd {
            Some(sd) if self.mean != 0.0 => sd / self.mean.abs(),
            _ => 0.0,
        }
    }
}

impl std::fmt::Display for MeanSd {
    /// `123.45 ± 1.20`, the way llama-bench prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digits = f.precision().unwrap_or(2);
        match self.sd {
            Some(sd) => write!(f, "{:.digits$} ± {:.digits$}", self.mean, sd),
            None => write!(f, "{:.digits$}", self.mean),
        }
    }
}

/// The four speed figures of a depth over its counted runs (warm-up excluded).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct RateSummary {
    pub ttft_ms: Option<MeanSd>,
    pub prefill_tps: Option<MeanSd>,
    pub decode_tps: Option<MeanSd>,
    pub e2e_tps: Option<MeanSd>,
}

impl RateSummary {
    /// Each figure over the runs where it is defined (a one-token run has no
    /// decode rate, and that is not a zero).
    pub fn of(runs: &[Rates]) -> Self {
        let pick = |f: fn(&Rates) -> Option<f64>| MeanSd::of(&runs.iter().filter_map(f).collect::<Vec<_>>());
        Self {
            ttft_ms: pick(|r| r.ttft_ms),
            prefill_tps: pick(|r| r.prefill_tps),
            decode_tps: pick(|r| r.decode_tps),
            e2e_tps: pick(|r| r.e2e_tps),
        }
    }
}

/// What one benchmark case runs: prefill `prompt_tokens` after `depth`
/// positions already in the KV cache, then decode `gen_tokens`, batch 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchShape {
    pub depth: usize,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
}

impl BenchShape {
    /// Cache positions a decoded token attends to, averaged over the decode:
    /// token i (0-based) of the n generated is produced by feeding token i − 1
    /// at position depth + p + i − 1, so the decode steps (i = 1 … n − 1)
    /// read depth + p … depth + p + n − 2 positions; their mean is this.
    pub fn mean_decode_context(&self) -> f64 {
        let start = (self.depth + self.prompt_tokens) as f64;
        start + (self.gen_tokens.saturating_sub(2)) as f64 / 2.0
    }
}

/// Bytes one decode step must read from memory (batch 1): the weights it
/// uses, the keys and values of every position each attention layer sees,
/// and the linear-attention layers' state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
pub struct DecodeTraffic {
    /// Weight bytes one token reads ([`WeightBytes::active`]); equal to the
    /// resident bytes for a dense model but for one embedding row. (Results
    /// stored before experts were counted hold the resident bytes here.)
    pub weight_bytes: u64,
    /// Every weight, resident in memory; 0 in results stored before it was kept.
    #[serde(default)]
    pub resident_weight_bytes: u64,
    /// 2 (keys and values) × full-attention layers × kv_heads × head_dim × bytes per element.
    pub kv_bytes_per_position: u64,
    /// The same for the sliding-window layers, which read at most `window` positions.
    #[serde(default)]
    pub window_kv_bytes_per_position: u64,
    #[serde(default)]
    pub window: u64,
    /// The linear-attention layers' state, read and written back each token.
    #[serde(default)]
    pub state_bytes: u64,
    /// Experts per MoE layer and those one token uses (0 for a dense model).
    #[serde(default)]
    pub experts: u64,
    #[serde(default)]
    pub experts_per_token: u64,
}

impl DecodeTraffic {
    /// A dense model with full attention in every layer.
    pub fn new(weight_bytes: u64, layers: u64, kv_heads: u64, head_dim: u64, kv_elem_bytes: u64) -> Self {
        Self {
            weight_bytes,
            resident_weight_bytes: weight_bytes,
            kv_bytes_per_position: 2 * layers * kv_heads * head_dim * kv_elem_bytes,
            window_kv_bytes_per_position: 0,
            window: 0,
            state_bytes: 0,
            experts: 0,
            experts_per_token: 0,
        }
    }

    /// Any supported model: its layers by kind, its experts, from the config
    /// and its weights' bytes; `state_bytes` is the linear layers' state
    /// together (the cache knows it; the config gives its shape). The
    /// full-attention layers' keys and values are read as stored, `kv`
    /// (a quantized cache reads its packed values and its scales and biases,
    /// `kv_elem_bytes` wide); sliding-window layers stay in the float type
    /// (never quantized: `crate::kv`).
    pub fn of(text: &TextConfig, weights: WeightBytes, kv_elem_bytes: u64, state_bytes: u64, kv: KvFormat) -> Self {
        let n = |v: i32| u64::try_from(v).unwrap_or(0);
        let per_layer = 2 * n(text.num_key_value_heads) * n(text.head_dim) * kv_elem_bytes;
        let per_full_layer =
            2 * n(text.num_key_value_heads) * kv.bytes_per_head_position(n(text.head_dim), kv_elem_bytes);
        let layers = |kind| u64::try_from(text.layers_of(kind)).unwrap_or(0);
        Self {
            weight_bytes: weights.active(text),
            resident_weight_bytes: weights.resident,
            kv_bytes_per_position: per_full_layer * layers(LayerAttention::Full),
            window_kv_bytes_per_position: per_layer * layers(LayerAttention::Sliding),
            window: text.sliding_window.map_or(0, n),
            state_bytes,
            experts: text.moe.as_ref().map_or(0, |m| n(m.num_experts)),
            experts_per_token: text.moe.as_ref().map_or(0, |m| n(m.experts_per_token)),
        }
    }

    /// Everything resident (the active weights for results stored before it was kept).
    pub fn resident_bytes(&self) -> u64 {
        self.resident_weight_bytes.max(self.weight_bytes)
    }

    /// KV and state bytes read at `context` positions.
    pub fn cache_bytes(&self, context: f64) -> f64 {
        self.kv_bytes_per_position as f64 * context
            + self.window_kv_bytes_per_position as f64 * context.min(self.window as f64)
            + 2.0 * self.state_bytes as f64
    }

    /// Weight bytes + KV bytes at `context` positions.
    pub fn bytes_per_token(&self, context: f64) -> f64 {
        self.weight_bytes as f64 + self.cache_bytes(context)
    }
}

/// How close a measured decode rate runs to the memory-bandwidth bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Roofline {
    /// Bytes read per decoded token at the case's mean decode context.
    pub bytes_per_token: f64,
    /// Bandwidth used for the bound, bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Bandwidth ÷ bytes per token: no decoder can beat it on this machine.
    pub bound_tps: f64,
    /// The measured mean decode rate.
    pub achieved_tps: f64,
    /// achieved ÷ bound, in percent.
    pub achieved_percent: f64,
}

impl Roofline {
    /// `None` when there is nothing to divide by (no bandwidth, no bytes).
    pub fn new(
        traffic: &DecodeTraffic,
        shape: &BenchShape,
        bandwidth_bytes_per_s: f64,
        achieved_tps: f64,
    ) -> Option<Self> {
        let bytes_per_token = traffic.bytes_per_token(shape.mean_decode_context());
        if !(bytes_per_token > 0.0 && bandwidth_bytes_per_s > 0.0 && achieved_tps.is_finite()) {
            return None;
        }
        let bound_tps = bandwidth_bytes_per_s / bytes_per_token;
        Some(Self {
            bytes_per_token,
            bandwidth_bytes_per_s,
            bound_tps,
            achieved_tps,
            achieved_percent: 100.0 * achieved_tps / bound_tps,
        })
    }
}

/// One row of the rated-bandwidth table: a chip, the CPU core count that
/// tells its bandwidth variants apart (`None`: every variant has the same),
/// and the figure Apple publishes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ts_rs::TS)]
pub struct RatedBandwidth {
    /// As `machdep.cpu.brand_string` names it, without "Apple ".
    pub chip: &'static str,
    pub cpu_cores: Option<u32>,
    /// GB/s (10^9 bytes per second), unified-memory bandwidth.
    pub gb_per_s: f64,
    /// Where the figure comes from.
    pub source: &'static str,
}

const M1_PR: &str = "https://www.apple.com/newsroom/2020/11/apple-unleashes-m1/";
const M1_PRO_MAX_PR: &str =
    "https://www.apple.com/newsroom/2021/10/introducing-m1-pro-and-m1-max-the-most-powerful-chips-apple-has-ever-built/";
const M1_ULTRA_PR: &str =
    "https://www.apple.com/newsroom/2022/03/apple-unveils-m1-ultra-the-worlds-most-powerful-chip-for-a-personal-computer/";
const M2_PR: &str =
    "https://www.apple.com/newsroom/2022/06/apple-unveils-m2-with-breakthrough-performance-and-capabilities/";
const M2_PRO_MAX_PR: &str = "https://www.apple.com/newsroom/2023/01/apple-unveils-m2-pro-and-m2-max-next-generation-chips-for-next-level-workflows/";
const M2_ULTRA_PR: &str = "https://www.apple.com/newsroom/2023/06/apple-introduces-m2-ultra/";
const M3_PR: &str = "https://www.apple.com/newsroom/2023/10/apple-unveils-m3-m3-pro-and-m3-max-the-most-advanced-chips-for-a-personal-computer/";
const M3_MAX_SPECS: &str = "https://support.apple.com/en-us/117737";
const M4_PR: &str = "https://www.apple.com/newsroom/2024/05/apple-introduces-m4-chip/";
const M4_PRO_MAX_PR: &str = "https://www.apple.com/newsroom/2024/10/apple-introduces-m4-pro-and-m4-max/";
const M4_MAX_SPECS: &str = "https://www.apple.com/macbook-pro/specs/";

// Verification (2026-11-29, through reports quoting Apple's announcements;
// apple.com itself could not be reached from this machine): M2 Pro 200 and
// M2 Max 400 ("twice that of M2 Pro, 4x that of M2", so M2 100: neowin.net,
// bgr.com on the Jan 2023 release); M4 120, M4 Pro 273, M4 Max 546 (16-core
// CPU) (macrumors.com 2024-10-30, mactrast.com on the Oct 2024 release).
// Not verified here, taken from the Apple pages cited per row: M1 68.25,
// M1 Pro/Max/Ultra, M2 Ultra, M3 / M3 Pro / M3 Max and the 14-core M4 Max's 410.
/// Apple's published unified-memory bandwidth per chip. Where a chip comes
/// in two bandwidths, the CPU core count of the variant tells them apart
/// (M3 Max: 14-core CPU with 300 GB/s, 16-core with 400 GB/s; M4 Max:
/// 14-core with 410 GB/s, 16-core with 546 GB/s).
pub const APPLE_SILICON: &[RatedBandwidth] = &[
    RatedBandwidth { chip: "M1", cpu_cores: None, gb_per_s: 68.25, source: M1_PR },
    RatedBandwidth { chip: "M1 Pro", cpu_cores: None, gb_per_s: 200.0, source: M1_PRO_MAX_PR },
    RatedBandwidth { chip: "M1 Max", cpu_cores: None, gb_per_s: 400.0, source: M1_PRO_MAX_PR },
    RatedBandwidth { chip: "M1 Ultra", cpu_cores: None, gb_per_s: 800.0, source: M1_ULTRA_PR },
    RatedBandwidth { chip: "M2", cpu_cores: None, gb_per_s: 100.0, source: M2_PR },
    RatedBandwidth { chip: "M2 Pro", cpu_cores: None, gb_per_s: 200.0, source: M2_PRO_MAX_PR },
    RatedBandwidth { chip: "M2 Max", cpu_cores: None, gb_per_s: 400.0, source: M2_PRO_MAX_PR },
    RatedBandwidth { chip: "M2 Ultra", cpu_cores: None, gb_per_s: 800.0, source: M2_ULTRA_PR },
    RatedBandwidth { chip: "M3", cpu_cores: None, gb_per_s: 100.0, source: M3_PR },
    RatedBandwidth { chip: "M3 Pro", cpu_cores: None, gb_per_s: 150.0, source: M3_PR },
    RatedBandwidth { chip: "M3 Max", cpu_cores: Some(14), gb_per_s: 300.0, source: M3_MAX_SPECS },
    RatedBandwidth { chip: "M3 Max", cpu_cores: Some(16), gb_per_s: 400.0, source: M3_MAX_SPECS },
    RatedBandwidth { chip: "M4", cpu_cores: None, gb_per_s: 120.0, source: M4_PR },
    RatedBandwidth { chip: "M4 Pro", cpu_cores: None, gb_per_s: 273.0, source: M4_PRO_MAX_PR },
    RatedBandwidth { chip: "M4 Max", cpu_cores: Some(14), gb_per_s: 410.0, source: M4_MAX_SPECS },
    RatedBandwidth { chip: "M4 Max", cpu_cores: Some(16), gb_per_s: 546.0, source: M4_MAX_SPECS },
];

/// The rated bandwidth of the chip named `brand` (e.g. "Apple M2 Pro", as
/// `sysctl machdep.cpu.brand_string` prints it) with `cpu_cores` cores.
/// `None` for an unknown chip, or a two-variant chip whose core count
/// matches neither variant (better no figure than a wrong one).
pub fn rated_bandwidth(brand: &str, cpu_cores: u32) -> Option<&'static RatedBandwidth> {
    let chip = brand.trim().strip_prefix("Apple ").unwrap_or(brand.trim());
    APPLE_SILICON.iter().find(|row| row.chip == chip && row.cpu_cores.is_none_or(|cores| cores == cpu_cores))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd_are_exact() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sum of squares 32, sample variance 32/7.
        let m = MeanSd::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).expect("values");
        assert_eq!(m.mean, 5.0);
        assert_eq!(m.n, 8);
        assert_eq!(m.sd, Some((32.0f64 / 7.0).sqrt()));
        assert_eq!(format!("{m}"), "5.00 ± 2.14");
        assert_eq!(format!("{m:.1}"), "5.0 ± 2.1");
        assert!((m.relative_sd() - (32.0f64 / 7.0).sqrt() / 5.0).abs() < 1e-15);

        let one = MeanSd::of(&[3.5]).expect("values");
        assert_eq!((one.mean, one.sd, one.relative_sd()), (3.5, None, 0.0));
        assert_eq!(format!("{one}"), "3.50");
        assert_eq!(MeanSd::of(&[]), None);
        assert_eq!(MeanSd::of(&[f64::NAN, 1.0, 3.0]).map(|m| (m.mean, m.n)), Some((2.0, 2)));
    }

    #[test]
    fn summary_skips_undefined_rates_instead_of_counting_zeros() {
        let run = |decode: Option<f64>| Rates {
            ttft_ms: Some(10.0),
            prefill_tps: Some(100.0),
            decode_tps: decode,
            e2e_tps: Some(50.0),
        };
        let s = RateSummary::of(&[run(Some(20.0)), run(None), run(Some(30.0))]);
        assert_eq!(s.decode_tps.map(|m| (m.mean, m.n)), Some((25.0, 2)));
        assert_eq!(s.ttft_ms.map(|m| (m.mean, m.sd, m.n)), Some((10.0, Some(0.0), 3)));
        assert_eq!(RateSummary::of(&[]).decode_tps, None);
    }

    #[test]
    fn roofline_divides_bandwidth_by_the_bytes_of_one_token() {
        // 24 layers × 2 KV heads × 64 dims × 2 bytes × 2 (K and V) = 12288 bytes a position.
        let traffic = DecodeTraffic::new(1_000_000_000, 24, 2, 64, 2);
        assert_eq!(traffic.kv_bytes_per_position, 12_288);
        // p = 512, n = 129 at depth 4096: decode reads 4608 … 4735 positions, mean 4671.5.
        let shape = BenchShape { depth: 4096, prompt_tokens: 512, gen_tokens: 129 };
        assert_eq!(shape.mean_decode_context(), 4671.5);
        let bytes = 1_000_000_000.0 + 12_288.0 * 4671.5;
        assert_eq!(traffic.bytes_per_token(4671.5), bytes);

        let r = Roofline::new(&traffic, &shape, 100e9, 40.0).expect("roofline");
        assert_eq!(r.bytes_per_token, bytes);
        assert_eq!(r.bound_tps, 100e9 / bytes);
        assert_eq!(r.achieved_percent, 100.0 * 40.0 / (100e9 / bytes));
        // A 1 GB model on 100 GB/s: at most ~94 tok/s here; 40 is about 42 % of it.
        assert!((r.bound_tps - 94.57).abs() < 0.01 && (r.achieved_percent - 42.30).abs() < 0.01, "{r:?}");

        assert_eq!(Roofline::new(&traffic, &shape, 0.0, 40.0), None);
        assert_eq!(
            Roofline::new(
                &DecodeTraffic::new(0, 0, 0, 0, 2),
                &BenchShape { depth: 0, prompt_tokens: 0, gen_tokens: 1 },
                1e9,
                1.0
            ),
            None
        );
    }

    #[test]
    fn rated_bandwidth_looks_up_the_chip_and_its_variant() {
        assert_eq!(rated_bandwidth("Apple M1", 8).map(|r| r.gb_per_s), Some(68.25));
        assert_eq!(rated_bandwidth("Apple M2 Pro", 12).map(|r| r.gb_per_s), Some(200.0));
        assert_eq!(rated_bandwidth("M4 Pro", 14).map(|r| r.gb_per_s), Some(273.0));
        assert_eq!(rated_bandwidth("Apple M3 Max", 14).map(|r| r.gb_per_s), Some(300.0));
        assert_eq!(rated_bandwidth("Apple M3 Max", 16).map(|r| r.gb_per_s), Some(400.0));
        assert_eq!(rated_bandwidth("Apple M4 Max", 16).map(|r| r.gb_per_s), Some(546.0));
        // A Max with an unexpected core count, an unknown chip, an Intel CPU: no figure.
        assert_eq!(rated_bandwidth("Apple M4 Max", 12), None);
        assert_eq!(rated_bandwidth("Apple M9", 8), None);
        assert_eq!(rated_bandwidth("Intel(R) Core(TM) i7-9750H", 12), None);
        // "M1" must not match "M1 Pro" by prefix.
        assert_eq!(rated_bandwidth("Apple M1 Pro", 10).map(|r| r.gb_per_s), Some(200.0));
        for row in APPLE_SILICON {
            assert!(row.source.starts_with("https://") && row.gb_per_s > 0.0, "{row:?}");
        }
    }
}
