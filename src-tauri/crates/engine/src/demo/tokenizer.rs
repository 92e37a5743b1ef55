//! The demo models' tokenizer: a real byte-level BPE vocabulary trained with
//! the `tokenizers` crate from the text in `assets/demo/`, set up like the
//! real thing (Qwen2.5's pipeline for ChatML models, Llama 3's for the
//! others) so that loading it exercises the same code paths as a download.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde_json::{json, Map, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::normalizers::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::sequence::Sequence as PostSequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::{config, Arch, DemoError};

/// The training text: written for this project (see assets/demo/README.md).
const CORPUS: [&str; 3] = [
    include_str!("../../../../../assets/demo/english.txt"),
    include_str!("../../../../../assets/demo/code.txt"),
    include_str!("../../../../../assets/demo/multilingual.txt"),
];

/// Tokens learned by BPE (the 256 byte symbols included); the special tokens
/// come after them, as in Qwen and Llama 3, and the model's vocabulary is
/// rounded up past both, so a few embedding rows are never used, as in real
/// checkpoints.
const BPE_VOCAB_SIZE: usize = 1000;

/// Qwen2's split pattern (single digits).
const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's split pattern (digits in groups of up to three).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// ChatML, as Qwen2.5 renders it without tools: a default system turn when
/// the conversation has none.
const CHATML_TEMPLATE: &str = r#"{%- for message in messages %}
    {%- if loop.first and message['role'] != 'system' %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

/// ChatML with a think block, as Qwen3's thinking releases render it: the
/// generation prompt opens `<think>`, or holds an empty block when
/// `enable_thinking` is false.
const CHATML_THINKING_TEMPLATE: &str = r#"{%- for message in messages %}
    {%- if loop.first and message['role'] != 'system' %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
"#;

/// Meta's Llama 3 Instruct template.
const LLAMA3_TEMPLATE: &str = r#"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"#;

/// Which family's tokenizer setup and chat format a model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    /// Qwen: NFC, Qwen2 split, ChatML, no BOS.
    ChatMl,
    /// Llama 3: Llama-3 split, header/eot turns, BOS added by the post-processor.
    Llama3,
}

impl Flavor {
    pub(super) fn of(arch: Arch) -> Self {
        match arch {
            Arch::Llama | Arch::Mistral => Flavor::Llama3,
            _ => Flavor::ChatMl,
        }
    }

    /// The special tokens, in id order after the learned vocabulary.
    pub(super) fn special_tokens(self) -> &'static [&'static str] {
        match self {
            Flavor::ChatMl => &["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            Flavor::Llama3 => {
                &["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
            }
        }
    }

    pub(super) fn chat_template(self) -> &'static str {
        match self {
            Flavor::ChatMl => CHATML_TEMPLATE,
            Flavor::Llama3 => LLAMA3_TEMPLATE,
        }
    }

    fn index(self) -> usize {
        match self {
            Flavor::ChatMl => 0,
            Flavor::Llama3 => 1,
        }
    }
}

/// A trained tokenizer, serialised as tokenizer.json.
#[derive(Debug, Clone)]
pub(super) struct TrainedTokenizer {
    pub(super) json: String,
    /// Tokens including the special ones.
    pub(super) vocab_size: usize,
    /// `(content, id)` of each special token.
    pub(super) specials: Vec<(&'static str, u32)>,
}

impl TrainedTokenizer {
    pub(super) fn special_id(&self, content: &str) -> Option<u32> {
        self.specials.iter().find(|(c, _)| *c == content).map(|&(_, id)| id)
    }
}

/// The tokenizer for `flavor`, trained once per process (it is deterministic).
pub(super) fn trained(flavor: Flavor) -> Result<&'static TrainedTokenizer, DemoError> {
    static CACHE: [OnceLock<TrainedTokenizer>; 2] = [OnceLock::new(), OnceLock::new()];
    let cell = &CACHE[flavor.index()];
    if let Some(t) = cell.get() {
        return Ok(t);
    }
    let t = train(flavor)?;
    Ok(cell.get_or_init(|| t))
}

fn tok_err(e: impl Into<tokenizers::Error>) -> DemoError {
    DemoError::Tokenizer { source: e.into() }
}

/// Trains the BPE vocabulary from scratch (no cache).
pub(super) fn train(flavor: Flavor) -> Result<TrainedTokenizer, DemoError> {
    let pattern = match flavor {
        Flavor::ChatMl => QWEN2_PATTERN,
        Flavor::Llama3 => LLAMA3_PATTERN,
    };
    let split = Split::new(SplitPattern::Regex(pattern.to_owned()), SplitDelimiterBehavior::Isolated, false)
        .map_err(tok_err)?;
    // The split regex already separates words; ByteLevel only maps bytes to
    // its printable alphabet (`use_regex: false`), exactly as Qwen2.5 and
    // Llama 3 configure it.
    let byte_level = ByteLevel::new(false, flavor == Flavor::Llama3, false);

    let mut tokenizer = Tokenizer::new(BPE::default());
    if flavor == Flavor::ChatMl {
        tokenizer.with_normalizer(Some(NFC));
    }
    tokenizer.with_pre_tokenizer(Some(PreSequence::new(vec![split.into(), byte_level.into()])));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    // Every byte gets a token, so any text can be encoded (no <unk>).
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let mut trainer: tokenizers::models::TrainerWrapper = BpeTrainer::builder()
        .vocab_size(BPE_VOCAB_SIZE)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(alphabet)
        .build()
        .into();
    // Whole files, not lines, so that newlines and indentation get merges.
    tokenizer.train(&mut trainer, CORPUS.iter()).map_err(tok_err)?;

    let specials: Vec<AddedToken> = flavor.special_tokens().iter().map(|s| AddedToken::from(*s, true)).collect();
    tokenizer.add_special_tokens(&specials);
    let mut ids = Vec::new();
    for s in flavor.special_tokens() {
        let id = tokenizer.token_to_id(s).ok_or_else(|| tok_err(format!("special token {s} was not added")))?;
        ids.push((*s, id));
    }

    let post = ByteLevel::new(flavor == Flavor::Llama3, false, flavor == Flavor::Llama3);
    match flavor {
        Flavor::ChatMl => {
            tokenizer.with_post_processor(Some(post));
        }
        Flavor::Llama3 => {
            let (bos, bos_id) = ids[0];
            let template = TemplateProcessing::builder()
                .try_single(format!("{bos} $A"))
                .map_err(tok_err)?
                .try_pair(format!("{bos} $A {bos}:1 $B:1"))
                .map_err(tok_err)?
                .special_tokens(vec![(bos, bos_id)])
                .build()
                .map_err(|e| tok_err(e.to_string()))?;
            tokenizer.with_post_processor(Some(PostSequence::new(vec![post.into(), template.into()])));
        }
    }

    let json = tokenizer.to_string(true).map_err(tok_err)?;
    Ok(TrainedTokenizer { json, vocab_size: tokenizer.get_vocab_size(true), specials: ids })
}

/// tokenizer_config.json as the model's HF repository has it.
pub(super) fn tokenizer_config_json(
    flavor: Flavor,
    tok: &TrainedTokenizer,
    thinking: bool,
) -> Result<String, DemoError> {
    let template = if thinking { CHATML_THINKING_TEMPLATE } else { flavor.chat_template() };
    let mut added = Map::new();
    for (content, id) in &tok.specials {
        added.insert(
            id.to_string(),
            json!({
                "content": content,
                "lstrip": false,
                "normalized": false,
                "rstrip": false,
                "single_word": false,
                "special": true,
            }),
        );
    }
    let c = match flavor {
        Flavor::ChatMl => json!({
            "add_bos_token": false,
            "add_prefix_space": false,
            "added_tokens_decoder": added,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": Value::Null,
            "chat_template": template,
            "clean_up_tokenization_spaces": false,
            "eos_token": "<|im_end|>",
            "errors": "replace",
            "model_max_length": 32768,
            "pad_token": "<|endoftext|>",
            "split_special_tokens": false,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": Value::Null,
        }),
        // Like Llama 3: the BOS comes from tokenizer.json's post-processor.
        Flavor::Llama3 => json!({
            "added_tokens_decoder": added,
            "bos_token": "<|begin_of_text|>",
            "chat_template": flavor.chat_template(),
            // Llama 3 says true; transformers 5 ignores that for BPE, with a warning.
            "clean_up_tokenization_spaces": false,
            "eos_token": "<|eot_id|>",
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 131072,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }),
    };
    config::to_pretty(&c, "tokenizer_config.json")
}
