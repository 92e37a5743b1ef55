//! What a model will cost in memory, from its config and weight headers
//! alone: the [`ModelFootprint`] the fit check consumes. One computation for
//! the engine's inspection of a folder on disk and the hub's of a repo it
//! has not downloaded, so the two can never disagree.

use crate::attention::Backend;
use crate::fit::{Experts, KvLayers, ModelFootprint};

use super::config::{LayerAttention, ModelConfig, TextConfig};
use super::safetensors::Header;

/// How the model will be loaded, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadShape {
    /// Every float tensor widened to f32 at load (the engine's `ComputeDtype::F32`).
    pub widen_floats_to_f32: bool,
    /// Whether the chosen quantized-matmul kernel multiplies prompt chunks by
    /// dequantized weights (the engine's CPU kernel); only matters for a quantized model.
    pub dequantizing_kernel: bool,
    /// The MLX backend it will compute on (which attention kernels exist).
    pub backend: Backend,
}

/// The footprint of the model `config` describes, whose weight files have
/// `headers` (in the engine's order). Counts the bytes the loader keeps:
/// tensors mlx-lm's sanitize drops are not counted, floats are widened if
/// `shape` says so. The KV cache and activations take the embedding's float
/// width (a quantized embedding dequantizes to its scales' dtype), as the
/// engine's native dtype does.
pub fn footprint(config: &ModelConfig, headers: &[Header], shape: LoadShape) -> ModelFootprint {
    let mut weight_bytes = 0u64;
    let mut layer_bytes = vec![0u64; usize::try_from(config.text.num_hidden_layers).unwrap_or(0)];
    let (mut embed_bytes, mut expert_bytes) = (0u64, 0u64);
    let mut embed_float = None;
    let mut any_float = None;
    // The widest float vector (norm weights, biases): the residual stream
    // is promoted to it (a GGUF file keeps its norms in f32 beside f16 scales).
    let mut vector_float: Option<u64> = None;
    for header in headers {
        for (name, t) in &header.tensors {
            if config.is_dropped(name) {
                continue;
            }
            let float = t.dtype.is_model_float();
            let bytes = if float && shape.widen_floats_to_f32 {
                // Elements × 4; the parser checked elements × size fits.
                t.nbytes() / t.dtype.size() * 4
            } else {
                t.nbytes()
            };
            weight_bytes = weight_bytes.saturating_add(bytes);
            if let Some(slot) = layer_index(name).and_then(|i| layer_bytes.get_mut(i)) {
                *slot = slot.saturating_add(bytes);
            }
            let embedding = is_embedding(name);
            if embedding {
                embed_bytes = embed_bytes.saturating_add(bytes);
            } else if name.contains(".switch_mlp.") {
                expert_bytes = expert_bytes.saturating_add(bytes);
            }
            if float {
                let width = if shape.widen_floats_to_f32 { 4 } else { t.dtype.size() };
                any_float.get_or_insert(width);
                if t.shape.len() == 1 {
                    vector_float = Some(vector_float.map_or(width, |w| w.max(width)));
                }
                if embedding {
                    embed_float = Some(width);
                }
            }
        }
    }
    let t = &config.text;
    // Every size is checked positive on reading.
    let n = |v: i32| u64::try_from(v).unwrap_or(0);
    let count = |kind| u64::try_from(t.layers_of(kind)).unwrap_or(0);
    let kv_bytes_per_element = if shape.widen_floats_to_f32 {
        4
    } else {
        embed_float.or(any_float).unwrap_or(4).max(vector_float.unwrap_or(0))
    };
    let mut kv_layers = vec![KvLayers::full(count(LayerAttention::Full), n(t.num_key_value_heads), n(t.head_dim))];
    if let (Some(window), sliding @ 1..) = (t.sliding_window, count(LayerAttention::Sliding)) {
        kv_layers.push(KvLayers::sliding(sliding, n(t.num_key_value_heads), n(t.head_dim), n(window)));
    }
    if let (Some(lin), linear @ 1..) = (&t.linear_attention, count(LayerAttention::Linear)) {
        kv_layers.push(KvLayers::state(linear, lin.state_bytes(kv_bytes_per_element)));
    }
    kv_layers.retain(|g| g.layers > 0);
    let experts = t.moe.as_ref().map(|m| Experts {
        count: n(m.num_experts),
        per_token: n(m.experts_per_token),
        resident_bytes: expert_bytes,
        active_bytes: expert_bytes / n(m.num_experts).max(1) * n(m.experts_per_token),
    });
    let active_weight_bytes =
        WeightBytes { resident: weight_bytes, embedding: embed_bytes, experts: expert_bytes }.active(t);
    // A prompt chunk's widest MLP activation: the dense MLP where a layer has
    // one, else the chosen experts' (and the shared expert's) side by side.
    let dense_mlp = t.moe.as_ref().is_none_or(|m| m.sparse_layers.iter().any(|s| !s));
    let moe_width = t.moe.as_ref().map_or(0, |m| {
        n(m.experts_per_token) * n(m.expert_intermediate_size) + m.shared_expert_intermediate_size.map_or(0, n)
    });
    let intermediate_size = if dense_mlp { n(t.intermediate_size).max(moe_width) } else { moe_width };
    ModelFootprint {
        weight_bytes,
        layers: n(t.num_hidden_layers),
        attention_heads: n(t.num_attention_heads),
        kv_heads: n(t.num_key_value_heads),
        head_dim: n(t.head_dim),
        hidden_size: n(t.hidden_size),
        intermediate_size,
        vocab_size: n(t.vocab_size),
        kv_bytes_per_element,
        max_context: t.max_position_embeddings.map(n),
        prefill_dequantizes: config.quantization.is_some() && shape.dequantizing_kernel,
        kv_layers,
        active_weight_bytes,
        experts,
        backend: shape.backend,
        layer_weight_bytes: layer_bytes,
    }
}

/// The layer a tensor belongs to (`model.layers.{i}.…`, also under
/// mlx-lm's `language_model.` wrapper); `None` outside the layers.
pub fn layer_index(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("language_model.").unwrap_or(name).strip_prefix("model.layers.")?;
    rest.split('.').next()?.parse().ok()
}

/// The token embedding table's tensors, in either layout (mlx-lm's
/// language-model wrapper prefixes `language_model.`).
pub fn is_embedding(name: &str) -> bool {
    name.starts_with("model.embed_tokens.") || name.starts_with("language_model.model.embed_tokens.")
}

/// The weights of a loaded (or inspected) model, by the part a decoded
/// token reads of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WeightBytes {
    /// Every weight, all resident.
    pub resident: u64,
    /// The token embedding table.
    pub embedding: u64,
    /// Every expert of every mixture-of-experts layer.
    pub experts: u64,
}

impl WeightBytes {
    /// What one decoded token reads: one embedding row (the whole table
    /// when it is also the output head), the chosen experts' share of the
    /// experts, everything else whole.
    pub fn active(&self, text: &TextConfig) -> u64 {
        let n = |v: i32| u64::try_from(v).unwrap_or(0);
        let embedding =
            if text.tie_word_embeddings { self.embedding } else { self.embedding / n(text.vocab_size).max(1) };
        let experts = text.moe.as_ref().map_or(self.experts, |m| {
            // Per expert first: every expert has the same shape.
            self.experts / n(m.num_experts).max(1) * n(m.experts_per_token)
        });
        self.resident.saturating_sub(self.embedding).saturating_sub(self.experts) + embedding + experts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::safetensors::{header_len, parse_header};

    fn header(entries: &[(&str, &str, &[u64])]) -> Header {
        let mut json = String::from("{");
        let mut at = 0u64;
        for (i, (name, dtype, shape)) in entries.iter().enumerate() {
            let size = match *dtype {
                "U32" | "F32" => 4,
                _ => 2,
            };
            let bytes = shape.iter().product::<u64>() * size;
            if i > 0 {
                json.push(',');
            }
            json.push_str(&format!(
                r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{at},{}]}}"#,
                at + bytes
            ));
            at += bytes;
        }
        json.push('}');
        let size = 8 + json.len() as u64 + at;
        let len = header_len(&(json.len() as u64).to_le_bytes(), size).unwrap();
        assert_eq!(len, json.len() as u64);
        parse_header(json.as_bytes(), size).unwrap()
    }

    #[test]
    fn the_footprint_drops_what_the_loader_drops_and_takes_the_activations_dtype() {
        let config = ModelConfig::parse(
            br#"{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,"rms_norm_eps":1e-5,
                "num_hidden_layers":2,"intermediate_size":128,"vocab_size":100,"max_position_embeddings":4096,
                "quantization":{"group_size":64,"bits":4}}"#,
        )
        .unwrap();
        let h = header(&[
            ("lm_head.weight", "BF16", &[100, 64]),
            ("model.embed_tokens.scales", "F16", &[100, 1]),
            ("model.embed_tokens.weight", "U32", &[100, 8]),
            ("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", &[8]),
            ("model.norm.weight", "F32", &[64]),
        ]);
        let fp = footprint(&config, std::slice::from_ref(&h), LoadShape::default());
        assert_eq!(fp.weight_bytes, 100 * 2 + 100 * 8 * 4 + 64 * 4);
        // The embedding's scales are F16 but the norm is F32: the residual
        // stream is promoted to f32, and so are the keys and values (measured
        // on the real GGUF model, whose norms are F32: its KV cache is f32).
        assert_eq!(fp.kv_bytes_per_element, 4);
        let f16_norm = header(&[
            ("model.embed_tokens.scales", "F16", &[100, 1]),
            ("model.embed_tokens.weight", "U32", &[100, 8]),
            ("model.norm.weight", "F16", &[64]),
        ]);
        let narrow = footprint(&config, std::slice::from_ref(&f16_norm), LoadShape::default());
        assert_eq!(narrow.kv_bytes_per_element, 2, "nothing wider than the embedding's F16");
        assert_eq!((fp.max_context, fp.head_dim, fp.kv_heads), (Some(4096), 16, 2));
        assert_eq!(fp.kv_layers, [KvLayers::full(2, 2, 16)]);
        assert!(!fp.prefill_dequantizes);
        let wide = footprint(
            &config,
            &[h],
            LoadShape { widen_floats_to_f32: true, dequantizing_kernel: true, backend: Backend::Metal },
        );
        assert_eq!(wide.weight_bytes, 100 * 4 + 100 * 8 * 4 + 64 * 4);
        assert_eq!(wide.kv_bytes_per_element, 4);
        assert!(wide.prefill_dequantizes);
        assert_eq!((fp.backend, wide.backend), (Backend::Cpu, Backend::Metal));
    }
}
