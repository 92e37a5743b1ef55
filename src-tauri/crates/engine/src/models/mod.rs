//! The architectures: one file per `model_type`, each composing the shared
//! building blocks (decoder.rs, moe.rs, `crate::layers`) into its model,
//! and one line per file in [`architectures!`] below, the engine's only
//! list of them. Everything else sees a [`Model`]: a loaded model of any
//! architecture behind the [`Architecture`] trait.

use mlx_rs::Array;

use crate::cache::persist::StateShape;
use crate::cache::{KvCache, LayerKind};
use crate::error::{EngineError, Result};
use crate::layers::{last_position, Embedding, Linear};
use crate::quant::QuantKernel;
use crate::weights::Weights;
use headroom_core::format::WeightBytes;
use headroom_core::format::{ModelConfig, ModelType};
use headroom_core::kv::KvFormat;

pub mod decoder;
pub mod moe;

/// Declares the architectures, one line each: `file: ModelType variants`.
/// It declares each `file` as a module and makes the registry's lookup
/// ([`loader`]), a `match` over core's `ModelType`, so a model type that no
/// file runs is a compile error here, not a runtime surprise.
macro_rules! architectures {
    ($($file:ident: $($variant:ident)|+),+ $(,)?) => {
        $(pub mod $file;)+

        /// The loader of the file that runs `model_type`.
        fn loader(model_type: &ModelType) -> Loader {
            match model_type {
                $($(ModelType::$variant(_))|+ => load::<$file::Model>,)+
            }
        }
    };
}

// The registry: adding an architecture is a new file and a line here.
architectures! {
    llama: Llama | Mistral,
    qwen2: Qwen2,
    qwen3: Qwen3,
    qwen3_moe: Qwen3Moe,
    gemma3_text: Gemma3Text,
    qwen3_5: Qwen3_5 | Qwen3_5Moe,
}

/// What the engine needs of a model, whatever its architecture. Each
/// `models/<type>.rs` implements it for its `Model`, last in the file (the
/// shared decoder implements it for those built on it).
pub(crate) trait Architecture: std::fmt::Debug + Send {
    /// Builds the model from its config and the checkpoint's tensors (each
    /// taken from `w` with its shape and dtype checked; `w` refuses any
    /// left over).
    fn load(config: ModelConfig, w: &mut Weights) -> Result<Self>
    where
        Self: Sized;

    /// Runs `tokens` (`[B, L]` ids) after what `cache` holds, appending
    /// their keys/values (or recurrent state) to it; returns `logits`' positions.
    fn forward(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array>;

    /// The config it was built from.
    fn config(&self) -> &ModelConfig;

    /// How its quantized matrices multiply (all share one).
    fn kernel(&self) -> QuantKernel;

    /// The token embedding: its dtype is the activations', and one decoded
    /// token reads one row of it.
    fn embed_tokens(&self) -> &Embedding;

    /// What each layer keeps between forward passes, in order; by default
    /// a full KV cache for every layer.
    fn layer_kinds(&self) -> Vec<LayerKind> {
        vec![LayerKind::Full; usize::try_from(self.config().text.num_hidden_layers).unwrap_or(0)]
    }

    /// Every weight array.
    fn collect<'a>(&'a self, out: &mut Vec<&'a Array>);

    /// The experts' arrays (a subset of `collect`'s): all resident, only
    /// `k / experts` of them read per token. None by default.
    fn expert_arrays(&self) -> Vec<&Array> {
        Vec::new()
    }

    /// The model as the stages of a pipeline across two Macs (crate::peer);
    /// `None` for an architecture that cannot be split yet.
    fn stages(&self) -> Option<&dyn Stages> {
        None
    }

    /// [`Self::stages`], to cut the model to a layer range.
    fn stages_mut(&mut self) -> Option<&mut dyn Stages> {
        None
    }
}

/// A model's forward pass in its three stages, so that its layers can run
/// on two Macs (crate::peer): the host embeds, runs its layers, hands the
/// hidden state over and back, and applies the head; the lender runs only
/// its layers. `forward` is these three in a row, so one Mac and two
/// compute the same thing.
pub(crate) trait Stages {
    /// `tokens` (`[B, L]` ids) to the first layer's input, `[B, L, hidden]`.
    fn embed(&self, tokens: &Array) -> Result<Array>;
    /// The layers this model holds, in order, over `h`; `cache` has an
    /// entry per layer held.
    fn blocks(&self, h: Array, cache: &mut KvCache) -> Result<Array>;
    /// The final norm and the output head over the last layer's output.
    fn head(&self, h: Array, logits: Logits) -> Result<Array>;
    /// Keeps only layers `range` (of all the model's), dropping the others
    /// before their weights are read.
    fn keep_layers(&mut self, range: std::ops::Range<usize>) -> Result<()>;
}

/// A registry entry: builds one architecture's model, boxed.
type Loader = fn(ModelConfig, &mut Weights) -> Result<Box<dyn Architecture>>;

fn load<A: Architecture + 'static>(config: ModelConfig, w: &mut Weights) -> Result<Box<dyn Architecture>> {
    Ok(Box::new(A::load(config, w)?))
}

/// Wraps an MLX error with the op it came from (for `map_err`).
pub(crate) fn mlx(op: &'static str) -> impl Fn(mlx_rs::error::Exception) -> EngineError {
    move |source| EngineError::Mlx { op, source }
}

/// A cache made for another model would misplace keys; refuse it up front.
pub(crate) fn check_cache(cache: &KvCache, layers: usize) -> Result<()> {
    if cache.num_layers() == layers {
        Ok(())
    } else {
        Err(EngineError::Shape {
            what: "KV cache",
            expected: format!("{layers} layers"),
            found: vec![i32::try_from(cache.num_layers()).unwrap_or(i32::MAX)],
        })
    }
}

/// Whether the keys and values of the model `config` describes can be
/// stored as `format` (checked before a model is built, from its config).
pub(crate) fn check_kv_format(config: &ModelConfig, format: KvFormat) -> Result<()> {
    let head_dim = u64::try_from(config.text.head_dim).unwrap_or(0);
    format.check_head_dim(head_dim).map_err(|source| EngineError::KvFormat { source })?;
    KvCache::with_format(&LayerKind::for_config(&config.text), format)
        .map(drop)
        .map_err(|source| EngineError::KvFormat { source })
}

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// `[B, vocab]` for the last position: all generation needs, and it
    /// skips the output head for every other position (a vocab-wide matmul).
    Last,
    /// `[B, L, vocab]`, as mlx-lm's model returns: a pass that checks
    /// proposed tokens needs every row (and parity checks do).
    All,
}

impl Logits {
    /// What every model does after its last block: keep the last position
    /// alone when that is all the caller wants (the vocab-wide head then
    /// runs once), the final norm (each architecture's own), the output head (or the tied embedding),
    /// and the logits' shape.
    pub(crate) fn head(
        self,
        h: Array,
        norm: impl FnOnce(&Array) -> Result<Array>,
        lm_head: Option<&Linear>,
        embed: &Embedding,
    ) -> Result<Array> {
        let h = if self == Logits::Last { last_position(&h)? } else { h };
        let h = norm(&h)?;
        let out = match lm_head {
            Some(head) => head.forward(&h)?,
            None => embed.as_linear(&h)?,
        };
        match self {
            Logits::Last => out.squeeze_axes(&[1]).map_err(mlx("squeeze")),
            Logits::All => Ok(out),
        }
    }
}

/// Where a forward pass's later layers run when they are not on this Mac:
/// the peer's link (`crate::peer::host::Link`). A model knows only this
/// much of two Macs; the peer module builds on the models, not the reverse.
pub(crate) trait LaterLayers: std::fmt::Debug + Send {
    /// One forward pass: `stages`' first layers here, the rest there, the head here.
    fn forward(&self, stages: &dyn Stages, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array>;
    /// The concrete link, for what the worker reports of a turn.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A loaded model of any supported architecture, on this Mac alone or with
/// its later layers on a peer.
#[derive(Debug)]
pub struct Model(Box<dyn Architecture>, Option<Box<dyn LaterLayers>>);

impl Model {
    /// Builds the model `config` describes with the architecture the
    /// registry names for its `model_type`.
    pub(crate) fn load(config: ModelConfig, w: &mut Weights) -> Result<Self> {
        loader(&config.model_type)(config, w).map(|a| Self(a, None))
    }

    /// The model's stages (`None`: its architecture cannot be split).
    pub(crate) fn stages(&self) -> Option<&dyn Stages> {
        self.0.stages()
    }

    /// Keeps only layers `range` (before the weights are read): the
    /// host's first layers, or a lender's share.
    pub(crate) fn keep_layers(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        let model_type = self.config().model_type_name().to_owned();
        self.0.stages_mut().ok_or(EngineError::PeerUnsupported { model_type })?.keep_layers(range)
    }

    /// Hands every forward pass's later layers to the peer `link` joined.
    pub(crate) fn attach(&mut self, link: Box<dyn LaterLayers>) {
        self.1 = Some(link);
    }

    /// Where this model's later layers run, if not here.
    pub(crate) fn later_layers(&self) -> Option<&dyn LaterLayers> {
        self.1.as_deref()
    }

    /// Runs `tokens` (`[B, L]` ids) after what `cache` holds, appends their
    /// keys/values to it, and returns the logits of the last position, `[B, vocab]`.
    pub fn forward(&self, tokens: &Array, cache: &mut KvCache) -> Result<Array> {
        self.forward_with(tokens, cache, Logits::Last)
    }

    pub fn forward_with(&self, tokens: &Array, cache: &mut KvCache, logits: Logits) -> Result<Array> {
        let out = match (&self.1, self.0.stages()) {
            (Some(link), Some(stages)) => link.forward(stages, tokens, cache, logits)?,
            _ => self.0.forward(tokens, cache, logits)?,
        };
        // After the model call, as mlx-lm's generate_step does: the pass
        // that reached the start ran over the float cache.
        cache.maybe_quantize()?;
        Ok(out)
    }

    /// The shape of this model's cache stored as `format`, for a load whose
    /// caches hold at most `context_limit` positions (what a saved state
    /// must match to be restored).
    pub fn state_shape(&self, format: headroom_core::kv::KvFormat, context_limit: usize) -> StateShape {
        let text = &self.config().text;
        StateShape {
            kinds: self.layer_kinds(),
            kv_heads: text.num_key_value_heads,
            head_dim: text.head_dim,
            linear: text.linear_attention,
            format,
            dtypes: vec![self.activation_dtype(), self.embedding_dtype()],
            context_limit,
        }
    }

    pub fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    /// How the quantized matrices multiply; `None` for an unquantized model.
    pub fn quant_kernel(&self) -> Option<QuantKernel> {
        let kernel = self.0.kernel();
        self.config().quantization.as_ref().map(|_| kernel)
    }

    /// What each layer keeps between forward passes, in order.
    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        self.0.layer_kinds()
    }

    /// An empty float cache with one entry per layer of this model, each of the kind its layer needs.
    #[cfg(any(test, feature = "test-support"))]
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(&self.layer_kinds())
    }

    /// An empty cache that stores keys and values as `format`; refused when
    /// MLX cannot quantize this model's heads that way.
    pub fn new_cache_as(&self, format: KvFormat) -> Result<KvCache> {
        self.check_kv_format(format)?;
        KvCache::with_format(&self.layer_kinds(), format).map_err(|source| EngineError::KvFormat { source })
    }

    /// Whether this model's keys and values can be stored as `format`.
    pub fn check_kv_format(&self, format: KvFormat) -> Result<()> {
        check_kv_format(self.config(), format)
    }

    /// The dtype activations (and so the KV cache) take on: the embedding's
    /// float dtype, as in mlx-lm, promoted by the float vectors the residual
    /// stream meets (norm weights, biases): a GGUF file keeps its norms in
    /// f32 beside f16 scales, and its keys and values are then f32. The fit
    /// reads the same rule from the headers (`core::format::footprint`).
    pub fn activation_dtype(&self) -> mlx_rs::Dtype {
        let embed = self.0.embed_tokens().dtype();
        let width = |d: mlx_rs::Dtype| match d {
            mlx_rs::Dtype::Float32 => 4,
            mlx_rs::Dtype::Float16 | mlx_rs::Dtype::Bfloat16 => 2,
            _ => 0,
        };
        let widest = self
            .parameters()
            .into_iter()
            .filter(|a| a.ndim() == 1)
            .map(|a| a.dtype())
            .filter(|&d| width(d) > 0)
            .max_by_key(|&d| width(d));
        match widest {
            Some(d) if width(d) > width(embed) => d,
            _ => embed,
        }
    }

    /// The token embedding's float type (its scales' when quantized): what
    /// [`Self::activation_dtype`] starts from.
    pub fn embedding_dtype(&self) -> mlx_rs::Dtype {
        self.0.embed_tokens().dtype()
    }

    /// Every weight array.
    pub fn parameters(&self) -> Vec<&Array> {
        let mut out = Vec::new();
        self.0.collect(&mut out);
        out
    }

    /// The model's weights by what one decoded token reads of them.
    pub fn weight_bytes(&self) -> WeightBytes {
        let experts = self.0.expert_arrays().iter().map(|a| a.nbytes() as u64).sum::<u64>();
        WeightBytes { resident: self.nbytes() as u64, embedding: self.0.embed_tokens().nbytes(), experts }
    }

    /// The next-token logits after `prompt` (fresh cache), as f32: what
    /// parity checks compare with the reference implementation.
    #[cfg(feature = "test-support")]
    pub fn prompt_logits(&self, prompt: &[u32]) -> Result<Vec<f32>> {
        let len = i32::try_from(prompt.len()).unwrap_or(i32::MAX);
        let logits = self.forward(&Array::from_slice(prompt, &[1, len]), &mut self.new_cache())?;
        let logits = logits.as_dtype(mlx_rs::Dtype::Float32).map_err(mlx("cast logits"))?;
        Ok(logits.as_slice::<f32>().to_vec())
    }

    /// Bytes of all weights as loaded.
    pub fn nbytes(&self) -> usize {
        self.parameters().iter().map(|a| a.nbytes()).sum()
    }
}
