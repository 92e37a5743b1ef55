//! `model_type: qwen3_5` and `qwen3_5_moe` (Qwen3.5's language model, dense
//! or with experts): mlx-lm 0.32.2's `qwen3_5.TextModelArgs`, read from
//! `text_config` when the file has one (the multimodal checkpoint) or from
//! the top level. Three of every `full_attention_interval` layers are gated
//! delta nets (linear attention with a fixed-size state); the rest are
//! full attention with a sigmoid output gate, per-head q/k norms and RoPE
//! over the first `partial_rotary_factor` of each head. With `num_experts`
//! above 0 every layer's MLP is a mixture of experts plus a gated shared
//! expert. The basic sizes are required (mlx-lm would fall back to an 8B
//! shape, which no real file relies on); the rest take mlx-lm's defaults.

use super::config::{Common, LayerAttention, LinearAttention, Moe, RopeScaling, TextConfig};
use super::error::{FormatError, Result};
use super::fields::{limits, Fields, CONFIG};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub common: Common,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub max_position_embeddings: i32,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub full_attention_interval: i32,
    pub partial_rotary_factor: f32,
    pub rope_theta: f32,
    pub linear: LinearAttention,
    pub num_experts: i32,
    pub num_experts_per_tok: i32,
    pub moe_intermediate_size: i32,
    pub shared_expert_intermediate_size: i32,
    pub norm_topk_prob: bool,
}

impl Config {
    pub(crate) fn from_fields(top: &Fields) -> Result<Self> {
        use limits as l;
        let nested = top.child("text_config", "text_config.")?;
        let f = nested.as_ref().unwrap_or(top);
        let common = Common::read(f)?;
        if let Some(RopeScaling::Llama3 { .. }) = common.rope_scaling {
            return Err(FormatError::UnsupportedRopeScaling { rope_type: "llama3".into() });
        }
        // mlx-lm 0.32.2's rule (qwen3_5.TextModelArgs.__post_init__):
        // `rope_parameters` decides rope_theta and partial_rotary_factor
        // whenever it is a non-empty object, and a file without the key gets
        // mlx-lm's default object (theta 100000, factor 0.25); top-level keys
        // beside it are ignored. Only an explicit null or {} leaves the
        // top-level keys in force.
        let top_level = match f.raw("rope_parameters") {
            Some(Value::Null) => true,
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        let (theta, partial) = if top_level {
            (f.positive("rope_theta", l::ROPE_THETA)?, f.positive("partial_rotary_factor", 1.0)?)
        } else {
            match f.child("rope_parameters", "rope_parameters.")? {
                Some(r) => (r.positive("rope_theta", l::ROPE_THETA)?, r.positive("partial_rotary_factor", 1.0)?),
                None => (None, None),
            }
        };
        let size = |key: &str, max: u64, default: i32| -> Result<i32> { Ok(f.size(key, max)?.unwrap_or(default)) };
        let num_experts = match f.get("num_experts") {
            // 0 is how the dense model says "no experts".
            Some(v) if v.as_u64() == Some(0) => 0,
            _ => size("num_experts", l::EXPERTS, 0)?,
        };
        let config = Self {
            num_key_value_heads: size("num_key_value_heads", l::HEADS, 8)?,
            head_dim: size("head_dim", l::HEAD_DIM, common.derived_head_dim())?,
            max_position_embeddings: size("max_position_embeddings", l::MAX_POSITION_EMBEDDINGS, 131_072)?,
            tie_word_embeddings: f.boolean("tie_word_embeddings")?.unwrap_or(false),
            attention_bias: f.boolean("attention_bias")?.unwrap_or(false),
            full_attention_interval: size("full_attention_interval", l::LAYERS, 4)?,
            partial_rotary_factor: partial.unwrap_or(0.25) as f32,
            rope_theta: theta.map_or(100_000.0, |t| t as f32),
            linear: LinearAttention {
                num_key_heads: size("linear_num_key_heads", l::HEADS, 16)?,
                num_value_heads: size("linear_num_value_heads", l::HEADS, 64)?,
                key_head_dim: size("linear_key_head_dim", l::HEAD_DIM, 192)?,
                value_head_dim: size("linear_value_head_dim", l::HEAD_DIM, 128)?,
                conv_kernel: size("linear_conv_kernel_dim", l::CONV_KERNEL, 4)?,
            },
            num_experts,
            num_experts_per_tok: size("num_experts_per_tok", l::EXPERTS, 0)?,
            moe_intermediate_size: size("moe_intermediate_size", l::INTERMEDIATE_SIZE, 0)?,
            shared_expert_intermediate_size: size("shared_expert_intermediate_size", l::INTERMEDIATE_SIZE, 0)?,
            norm_topk_prob: f.boolean("norm_topk_prob")?.unwrap_or(true),
            common,
        };
        if config.num_experts > 0 {
            for (key, v) in [
                ("num_experts_per_tok", config.num_experts_per_tok),
                ("moe_intermediate_size", config.moe_intermediate_size),
                ("shared_expert_intermediate_size", config.shared_expert_intermediate_size),
            ] {
                if v == 0 {
                    return Err(FormatError::MissingField {
                        file: CONFIG,
                        field: format!("{}{key}", f.prefix()),
                        model_type: "a qwen3_5 model with experts".into(),
                    });
                }
            }
        }
        Ok(config)
    }

    /// mlx-lm's rule: every `full_attention_interval`-th layer (one-based) is full attention.
    pub fn is_linear(&self, layer: i32) -> bool {
        (layer + 1) % self.full_attention_interval != 0
    }

    pub fn text(&self) -> TextConfig {
        let c = &self.common;
        // mlx-lm: int(head_dim * partial_rotary_factor).
        let rope_dims = (f64::from(self.head_dim) * f64::from(self.partial_rotary_factor)) as i32;
        TextConfig {
            max_position_embeddings: Some(self.max_position_embeddings),
            tie_word_embeddings: self.tie_word_embeddings,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            rope_dims,
            layer_types: (0..c.num_hidden_layers)
                .map(|i| if self.is_linear(i) { LayerAttention::Linear } else { LayerAttention::Full })
                .collect(),
            linear_attention: Some(self.linear),
            moe: (self.num_experts > 0).then(|| Moe {
                num_experts: self.num_experts,
                experts_per_token: self.num_experts_per_tok,
                expert_intermediate_size: self.moe_intermediate_size,
                norm_topk_prob: self.norm_topk_prob,
                shared_expert_intermediate_size: Some(self.shared_expert_intermediate_size),
                sparse_layers: vec![true; usize::try_from(c.num_hidden_layers).unwrap_or(0)],
            }),
            ..c.text(self.num_key_value_heads, self.head_dim, self.rope_theta)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::format::ModelConfig;

    const BASE: &str = r#""model_type":"qwen3_5","hidden_size":64,"num_hidden_layers":4,"intermediate_size":128,
        "num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"rms_norm_eps":1e-6,"vocab_size":256"#;

    fn rope(extra: &str) -> (f32, i32) {
        let text = format!("{{{BASE}{extra}}}");
        let c = ModelConfig::parse(text.as_bytes()).expect("parses");
        (c.text.rope_theta, c.text.rope_dims)
    }

    /// mlx-lm's rule, key by key (issue #30 measured a config carrying both,
    /// 1e5 nested and 1e6 top-level, diverging from mlx-lm at the 2nd greedy
    /// token while the top-level key won).
    #[test]
    fn rope_parameters_win_over_top_level_keys_as_in_mlx_lm() {
        // Both: the nested object decides, the top-level keys are ignored.
        let both = r#","rope_theta":1e6,"partial_rotary_factor":0.5,"rope_parameters":{"rope_theta":1e5,"partial_rotary_factor":0.25}"#;
        assert_eq!(rope(both), (1e5, 4));
        // No rope_parameters: mlx-lm's default object, not the top-level keys.
        assert_eq!(rope(r#","rope_theta":1e6,"partial_rotary_factor":0.5"#), (1e5, 4));
        // A nested object without the keys: mlx-lm's defaults again.
        assert_eq!(rope(r#","rope_theta":1e6,"rope_parameters":{"type":"default"}"#), (1e5, 4));
        // Only an explicit null or {} leaves the top-level keys in force.
        assert_eq!(rope(r#","rope_theta":1e6,"partial_rotary_factor":0.5,"rope_parameters":null"#), (1e6, 8));
        assert_eq!(rope(r#","rope_theta":1e6,"partial_rotary_factor":0.5,"rope_parameters":{}"#), (1e6, 8));
    }
}
