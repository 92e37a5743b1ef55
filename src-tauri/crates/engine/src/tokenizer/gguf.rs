//! The tokenizer a GGUF file's metadata describes, built as the same
//! [`Tokenizer`] a folder's tokenizer.json gives, so the chat template, the
//! EOS ids and the streaming detokenizer work unchanged.
//!
//! `tokenizer.ggml.model = "gpt2"` is byte-level BPE: the vocabulary and
//! merges go into the `tokenizers` crate's BPE model, and the pre-tokenizer
//! is the one `tokenizer.ggml.pre` names, as llama.cpp defines it (its
//! `llama-vocab.cpp`) and as the model's own tokenizer.json spells it:
//! SmolLM's splits digits one by one before GPT-2's byte-level regex;
//! Llama 3's and Qwen2's split with their own regex first. Control and
//! user-defined tokens become added tokens, so `<|im_start|>` in a rendered
//! template is its one id. SentencePiece vocabularies (`"llama"`) are
//! refused with the way out: the model's mlx-community folder.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use headroom_core::format::gguf::vocab::token_type;
use headroom_core::format::gguf::GgufVocab;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::Tokenizer;
use crate::error::{EngineError, Result};

/// The `tokenizer.ggml.pre` names this builds, for the refusal's message.
pub const SUPPORTED_PRE: &[&str] = &["default", "gpt2", "smollm", "llama-bpe", "qwen2"];

/// Llama 3's split (its tokenizer.json, and llama.cpp's LLAMA3 pre-tokenizer).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: Llama 3's with single digits.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl Tokenizer {
    /// The tokenizer `vocab` (read from the GGUF file `path`) describes.
    pub fn from_gguf(path: &Path, vocab: &GgufVocab) -> Result<Self> {
        let fail = |reason: String| EngineError::Tokenizer { path: path.to_owned(), source: reason.into() };
        // The tokenizers crate can panic on odd input: an error like any other.
        let built = std::panic::catch_unwind(|| build(vocab))
            .unwrap_or_else(|_| Err("the tokenizer library failed on this vocabulary (it panicked)".to_owned()));
        let inner = built.map_err(fail)?;
        let name = |id: Option<u32>| id.and_then(|id| vocab.tokens.get(usize::try_from(id).ok()?)).cloned();
        let eos_ids: BTreeSet<u32> = [vocab.eos_id, vocab.eot_id].into_iter().flatten().collect();
        Ok(Self {
            inner,
            dir: path.to_owned(),
            template: vocab.chat_template.clone(),
            bos_token: name(vocab.bos_id),
            eos_token: name(vocab.eos_id),
            eos_ids: eos_ids.into_iter().collect(),
        })
    }
}

/// The `tokenizers` tokenizer for `vocab`, or why there is none.
fn build(vocab: &GgufVocab) -> std::result::Result<tokenizers::Tokenizer, String> {
    if vocab.model != "gpt2" {
        return Err(match vocab.model.as_str() {
            "llama" => "SentencePiece GGUF tokenizers (tokenizer.ggml.model = \"llama\") are not supported yet; use the model's mlx-community folder".to_owned(),
            other => format!("tokenizer.ggml.model \"{other}\" is not supported (supported: gpt2, byte-level BPE)"),
        });
    }
    let n = vocab.tokens.len();
    if n == 0 {
        return Err("the vocabulary is empty".to_owned());
    }
    if !vocab.token_types.is_empty() && vocab.token_types.len() != n {
        return Err(format!("{} token types for {n} tokens", vocab.token_types.len()));
    }
    for (what, id) in
        [("BOS", vocab.bos_id), ("EOS", vocab.eos_id), ("EOT", vocab.eot_id), ("padding", vocab.padding_id)]
    {
        if let Some(id) = id.filter(|&id| usize::try_from(id).map_or(true, |i| i >= n)) {
            return Err(format!("the {what} id {id} is past the vocabulary of {n} tokens"));
        }
    }
    let mut ids: HashMap<String, u32> = HashMap::with_capacity(n);
    for (id, token) in vocab.tokens.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| "the vocabulary has more than 2^32 tokens".to_owned())?;
        if ids.insert(token.clone(), id).is_some() {
            return Err(format!("the token {token:?} appears twice in the vocabulary"));
        }
    }
    let mut merges = Vec::with_capacity(vocab.merges.len());
    for merge in &vocab.merges {
        let (a, b) = merge.split_once(' ').ok_or_else(|| format!("the merge {merge:?} is not two tokens"))?;
        if !ids.contains_key(a) || !ids.contains_key(b) {
            return Err(format!("the merge {merge:?} names a token the vocabulary lacks"));
        }
        merges.push((a.to_owned(), b.to_owned()));
    }
    let pre = vocab.pre.as_deref().unwrap_or("default");
    let llama3 = pre == "llama-bpe";
    let model = BPE::builder()
        .vocab_and_merges(ids.into_iter().collect::<Vocab>(), merges)
        // Llama 3's tokenizer.json takes a whole word that is a token as it
        // is, before merging (`ignore_merges`).
        .ignore_merges(llama3)
        .build()
        .map_err(|e| format!("the BPE model: {e}"))?;
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));

    let specials: Vec<AddedToken> = vocab
        .tokens
        .iter()
        .zip(&vocab.token_types)
        .filter(|(_, &t)| t == token_type::CONTROL || t == token_type::USER_DEFINED)
        .map(|(token, &t)| AddedToken::from(token.clone(), t == token_type::CONTROL).normalized(false))
        .collect();
    tokenizer.add_special_tokens(&specials);

    if vocab.add_bos == Some(true) {
        let bos = vocab.bos_id.ok_or("add_bos_token is set but there is no BOS id")?;
        let token = vocab.tokens[usize::try_from(bos).map_err(|e| e.to_string())?].clone();
        let post = TemplateProcessing::builder()
            .try_single(format!("{token} $A"))
            .and_then(|b| b.try_pair(format!("{token} $A {token} $B")))
            .map_err(|e| format!("the BOS template: {e}"))?
            .special_tokens(vec![(token, bos)])
            .build()
            .map_err(|e| format!("the BOS template: {e}"))?;
        tokenizer.with_post_processor(Some(post));
    }
    Ok(tokenizer)
}

/// The pre-tokenizer `pre` names, as the model's tokenizer.json has it.
fn pre_tokenizer(pre: &str) -> std::result::Result<PreTokenizerWrapper, String> {
    let byte_level = |use_regex| PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, use_regex));
    let split = |regex: &str| {
        Split::new(SplitPattern::Regex(regex.to_owned()), SplitDelimiterBehavior::Isolated, false)
            .map(PreTokenizerWrapper::Split)
            .map_err(|e| format!("the {pre} split pattern: {e}"))
    };
    Ok(match pre {
        "default" | "gpt2" => byte_level(true),
        "smollm" => PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level(true),
        ])),
        "llama-bpe" => PreTokenizerWrapper::Sequence(Sequence::new(vec![split(LLAMA3_SPLIT)?, byte_level(false)])),
        "qwen2" => PreTokenizerWrapper::Sequence(Sequence::new(vec![split(QWEN2_SPLIT)?, byte_level(false)])),
        other => {
            return Err(format!(
                "tokenizer.ggml.pre \"{other}\" is not supported (supported: {})",
                SUPPORTED_PRE.join(", ")
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny byte-level vocabulary: the bytes of "hello world 12" and a few merges.
    fn vocab(pre: &str) -> GgufVocab {
        let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(str::to_owned).to_vec();
        for t in [
            "h", "e", "l", "o", "Ġ", "w", "r", "d", "1", "2", "he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "Ġworl",
            "Ġworld", "12",
        ] {
            tokens.push(t.to_owned());
        }
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "1 2"];
        let mut types = vec![token_type::CONTROL; 3];
        types.resize(tokens.len(), token_type::NORMAL);
        GgufVocab {
            model: "gpt2".into(),
            pre: Some(pre.into()),
            tokens,
            token_types: types,
            merges: merges.map(str::to_owned).to_vec(),
            bos_id: Some(1),
            eos_id: Some(2),
            chat_template: Some("{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}".into()),
            ..GgufVocab::default()
        }
    }

    fn id(v: &GgufVocab, token: &str) -> u32 {
        v.tokens.iter().position(|t| t == token).map(|i| i as u32).expect("token")
    }

    #[test]
    fn merges_apply_digits_split_and_special_tokens_are_one_id() {
        let v = vocab("smollm");
        let tok = Tokenizer::from_gguf(Path::new("t.gguf"), &v).expect("builds");
        assert_eq!(tok.encode("hello world", false).expect("encode"), vec![id(&v, "hello"), id(&v, "Ġworld")]);
        // smollm splits digits one by one: "12" is never merged.
        assert_eq!(tok.encode("12", false).expect("encode"), vec![id(&v, "1"), id(&v, "2")]);
        // gpt2's default keeps the number whole, so the merge applies.
        let plain = Tokenizer::from_gguf(Path::new("t.gguf"), &vocab("gpt2")).expect("builds");
        assert_eq!(plain.encode("12", false).expect("encode"), vec![id(&v, "12")]);
        let ids = tok.encode("<|im_start|>hello<|im_end|>", false).expect("encode");
        assert_eq!(ids, vec![1, id(&v, "hello"), 2]);
        assert_eq!(tok.decode(&ids, false).expect("decode"), "<|im_start|>hello<|im_end|>");
        assert_eq!(tok.decode(&ids, true).expect("decode"), "hello");
        assert_eq!(tok.eos_ids(), &[2]);
        assert_eq!(tok.max_token_id(), (v.tokens.len() - 1) as u32);
    }

    #[test]
    fn the_chat_template_and_the_streaming_decoder_work_as_for_a_folder() {
        let v = vocab("smollm");
        let tok = Tokenizer::from_gguf(Path::new("t.gguf"), &v).expect("builds");
        let messages = [headroom_core::chat::Message::new(headroom_core::chat::Role::User, "hello world")];
        assert_eq!(tok.encode_chat(&messages, true).expect("chat"), vec![1, id(&v, "hello"), id(&v, "Ġworld"), 2]);
        let mut stream = tok.detokenizer();
        let mut text = String::new();
        for i in [id(&v, "hello"), id(&v, "Ġworld")] {
            text.push_str(&stream.step(i).expect("step"));
        }
        text.push_str(&stream.finish().expect("finish"));
        assert_eq!(text, "hello world");
    }

    #[test]
    fn add_bos_puts_the_bos_first() {
        let v = GgufVocab { add_bos: Some(true), ..vocab("smollm") };
        let tok = Tokenizer::from_gguf(Path::new("t.gguf"), &v).expect("builds");
        assert_eq!(tok.encode("hello", true).expect("encode"), vec![1, id(&v, "hello")]);
        assert_eq!(tok.encode("hello", false).expect("encode"), vec![id(&v, "hello")]);
    }

    #[test]
    fn hostile_vocabularies_are_typed_errors() {
        let base = vocab("smollm");
        let cases: Vec<(&str, GgufVocab, &str)> = vec![
            ("empty", GgufVocab { tokens: Vec::new(), token_types: Vec::new(), ..base.clone() }, "empty"),
            ("sentencepiece", GgufVocab { model: "llama".into(), ..base.clone() }, "SentencePiece"),
            ("unknown model", GgufVocab { model: "rwkv".into(), ..base.clone() }, "rwkv"),
            ("unknown pre", GgufVocab { pre: Some("tekken".into()), ..base.clone() }, "tekken"),
            ("types", GgufVocab { token_types: vec![1], ..base.clone() }, "token types"),
            ("eos past", GgufVocab { eos_id: Some(1000), ..base.clone() }, "EOS id 1000"),
            ("merge unknown", GgufVocab { merges: vec!["q z".into()], ..base.clone() }, "lacks"),
            ("merge shape", GgufVocab { merges: vec!["hello".into()], ..base.clone() }, "not two tokens"),
            (
                "duplicate",
                {
                    let mut v = base.clone();
                    v.tokens[4] = "h".into();
                    v
                },
                "twice",
            ),
            ("bos missing", GgufVocab { add_bos: Some(true), bos_id: None, ..base.clone() }, "no BOS"),
        ];
        let count = cases.len();
        for (name, v, needle) in cases {
            let err = Tokenizer::from_gguf(Path::new("bad.gguf"), &v).expect_err(name);
            assert!(matches!(err, EngineError::Tokenizer { .. }) && err.to_string().contains(needle), "{name}: {err}");
            assert!(err.to_string().contains("bad.gguf"), "{name}: the file is named: {err}");
        }
        assert_eq!(count, 10);
    }
}
