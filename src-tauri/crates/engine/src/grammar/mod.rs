//! Constrained decoding: a grammar (JSON schema, Lark, regex) turned into a
//! mask over the model's vocabulary with llguidance, the token table built
//! from the tokenizer the engine already loaded, and the per-turn [`Guide`]
//! that decides, token by token, what the next token may be (the grammar,
//! a lazy trigger, a thinking block and its budget).

mod guide;
#[cfg(test)]
mod tests;

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

pub use guide::{Guide, Step};

/// What the output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// A JSON schema (draft 2020-12 subset llguidance implements). Whitespace
    /// between JSON tokens is fixed unless the schema's own `x-guidance`
    /// options say otherwise, so constrained JSON always ends.
    JsonSchema(Value),
    /// A Lark grammar (llguidance's dialect; `%json {…}` embeds a schema).
    Lark(String),
    /// A regular expression the whole output must match.
    Regex(String),
}

/// A grammar and when it applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub grammar: Grammar,
    /// None: the constraint applies from the first answer token (after
    /// thinking). Some(t): output is free until the generated text contains
    /// `t`; from the token after `t` the grammar applies (a lazy grammar, as
    /// llama-server's tool-call triggers). After the grammar accepts,
    /// generation continues free (another trigger re-arms it) unless
    /// `stop_after` is set.
    pub trigger: Option<String>,
    /// End the turn (finish reason Stop) once the grammar is complete.
    pub stop_after: bool,
}

impl Constraint {
    /// The grammar from the first answer token, ending the turn when complete:
    /// what a `response_format` or `--json-schema` asks for.
    pub fn whole(grammar: Grammar) -> Self {
        Self { grammar, trigger: None, stop_after: true }
    }
}

/// A grammar the engine cannot use, naming the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The grammar is malformed or unsatisfiable.
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    /// A valid grammar using a feature the engine does not implement.
    #[error("unsupported {what} feature: {feature}")]
    Unsupported { what: &'static str, feature: String },
    /// The model's tokenizer cannot be turned into a token table.
    #[error("cannot build the grammar's token table from this tokenizer: {reason}")]
    Tokenizer { reason: String },
    /// The grammar failed while generating (the run ends; the engine goes on).
    #[error("the grammar failed during generation: {reason}")]
    Runtime { reason: String },
}

impl Grammar {
    fn what(&self) -> &'static str {
        match self {
            Grammar::JsonSchema(_) => "JSON schema",
            Grammar::Lark(_) => "Lark grammar",
            Grammar::Regex(_) => "regular expression",
        }
    }

    /// The llguidance form, with the engine's JSON defaults.
    fn top_level(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonSchema(schema) => TopLevelGrammar::from_json_schema(with_json_defaults(schema)),
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            Grammar::Regex(rx) => TopLevelGrammar::from_regex(rx),
        }
    }

    fn error(&self, message: String) -> GrammarError {
        // llguidance's words for a schema keyword or grammar construct it
        // does not implement ("Unimplemented keys: [...]", "... not supported").
        let lower = message.to_lowercase();
        if lower.contains("unimplemented") || lower.contains("not supported") || lower.contains("unsupported") {
            GrammarError::Unsupported { what: self.what(), feature: message }
        } else {
            GrammarError::Invalid { what: self.what(), reason: message }
        }
    }
}

/// The JSON options the engine uses unless the schema sets its own: no free
/// whitespace between tokens (a model that likes whitespace could otherwise
/// write it until max_tokens and never close the object), and the usual
/// one-space separators, which read as models write JSON.
fn with_json_defaults(schema: &Value) -> Value {
    let mut schema = match schema {
        // `true` is the schema that accepts any JSON value.
        Value::Bool(true) => Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    if let Value::Object(map) = &mut schema {
        let options = map.entry("x-guidance").or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(options) = options {
            for (key, value) in [
                ("whitespace_flexible", Value::Bool(false)),
                ("item_separator", Value::from(", ")),
                ("key_separator", Value::from(": ")),
            ] {
                options.entry(key).or_insert(value);
            }
        }
    }
    schema
}

/// Checks `grammar` without a model: the server refuses a bad one before
/// queueing it. Compiled against a byte-level vocabulary, so every error
/// that does not depend on the model's tokens is found here.
pub fn validate(grammar: &Grammar) -> Result<(), GrammarError> {
    static FACTORY: OnceLock<Option<ParserFactory>> = OnceLock::new();
    let factory = FACTORY.get_or_init(|| {
        let env: TokEnv = Arc::new(ApproximateTokEnv::single_byte());
        quiet(ParserFactory::new_simple(&env).ok())
    });
    let Some(factory) = factory else {
        return Err(GrammarError::Tokenizer { reason: "the byte-level check vocabulary did not build".into() });
    };
    matcher(factory, grammar).map(drop)
}

fn quiet(factory: Option<ParserFactory>) -> Option<ParserFactory> {
    factory.map(|mut f| {
        // llguidance prints warnings to stderr by default; errors come back as values.
        f.set_stderr_log_level(0);
        f
    })
}

/// A fresh matcher for `grammar`, or why there is none.
fn matcher(factory: &ParserFactory, grammar: &Grammar) -> Result<Matcher, GrammarError> {
    let parser = factory.create_parser(grammar.top_level()).map_err(|e| grammar.error(format!("{e:#}")))?;
    let matcher = Matcher::new(Ok(parser));
    match matcher.get_error() {
        Some(e) => Err(grammar.error(e)),
        None => Ok(matcher),
    }
}

/// The model's vocabulary as llguidance sees it (each token's bytes), with
/// the parser factory over it: built once per loaded model (about 0.1 s for
/// 49k tokens) and shared by its turns.
#[derive(Clone)]
pub struct Vocabulary {
    env: TokEnv,
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary").field("tokens", &self.env.tok_trie().vocab_size()).finish()
    }
}

/// The token table beside the tokenizer that encodes prompts: llguidance
/// asks it to tokenize forced text. `None`: a table with no tokenizer of
/// its own (a synthetic one, for measuring), split greedily.
struct Env {
    trie: TokTrie,
    tokenizer: Option<tokenizers::Tokenizer>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        // Text llguidance forces is always whole UTF-8 from the grammar;
        // anything else falls back to the trie's greedy split.
        let tokenizer = self.tokenizer.as_ref();
        match std::str::from_utf8(s).ok().and_then(|text| tokenizer?.encode(text, false).ok()) {
            Some(enc) => enc.get_ids().to_vec(),
            None => self.trie.greedy_tokenize(s),
        }
    }
}

impl Vocabulary {
    /// The table for `tokenizer` (its tokenizer.json form: a folder's file,
    /// or what a GGUF's metadata was built into), `eos_ids` the ids that end
    /// a turn (the grammar allows them where it may end), `n_vocab` the
    /// model's output width (at least the tokenizer's).
    pub fn new(tokenizer: &tokenizers::Tokenizer, eos_ids: &[u32], n_vocab: usize) -> Result<Self, GrammarError> {
        let json = tokenizer.to_string(false).map_err(|e| GrammarError::Tokenizer { reason: e.to_string() })?;
        let json: Value = serde_json::from_str(&json).map_err(|e| GrammarError::Tokenizer { reason: e.to_string() })?;
        let mut bytes = llguidance::token_bytes_from_tokenizer_json(&json)
            .map_err(|e| GrammarError::Tokenizer { reason: format!("{e:#}") })?;
        Self::from_token_bytes(&mut bytes, Some(tokenizer.clone()), eos_ids, n_vocab)
    }

    /// The table from each token's bytes (special tokens start with 0xFF);
    /// forced text is encoded by `tokenizer`, or split greedily without one.
    pub(crate) fn from_token_bytes(
        bytes: &mut Vec<Vec<u8>>,
        tokenizer: Option<tokenizers::Tokenizer>,
        eos_ids: &[u32],
        n_vocab: usize,
    ) -> Result<Self, GrammarError> {
        let n = bytes.len().max(n_vocab);
        // Rows past the tokenizer (padding of the embedding) are tokens no
        // grammar allows: empty bytes.
        bytes.resize(n, Vec::new());
        let vocab = u32::try_from(n).map_err(|_| GrammarError::Tokenizer { reason: format!("{n} tokens") })?;
        let eos: Vec<u32> = eos_ids.iter().copied().filter(|&e| e < vocab).collect();
        let Some(&first) = eos.first() else {
            return Err(GrammarError::Tokenizer { reason: "the tokenizer declares no end-of-turn token".into() });
        };
        let trie = TokTrie::from(&TokRxInfo::new(vocab, first), bytes).with_eos_tokens(&eos);
        let env: TokEnv = Arc::new(Env { trie, tokenizer });
        let factory = quiet(ParserFactory::new_simple(&env).ok())
            .ok_or_else(|| GrammarError::Tokenizer { reason: "llguidance refused the token table".into() })?;
        Ok(Self { env, factory: Arc::new(factory) })
    }

    /// Tokens in the table (the mask's width).
    pub fn len(&self) -> usize {
        self.env.tok_trie().vocab_size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A fresh matcher for `grammar` over this vocabulary.
    pub fn matcher(&self, grammar: &Grammar) -> Result<Matcher, GrammarError> {
        matcher(&self.factory, grammar)
    }

    /// A token's text as bytes (a special token's name without its marker).
    pub(crate) fn bytes(&self, token: u32) -> Vec<u8> {
        if (token as usize) >= self.len() {
            return Vec::new();
        }
        match self.env.tok_trie().token(token) {
            [TokTrie::SPECIAL_TOKEN_MARKER, name @ ..] => name.to_vec(),
            text => text.to_vec(),
        }
    }

    /// `text` split greedily into the table's longest tokens (measurements
    /// drive a guide with it on synthetic vocabularies).
    #[cfg(test)]
    pub(crate) fn greedy(&self, text: &str) -> Vec<u32> {
        self.env.tok_trie().greedy_tokenize(text.as_bytes())
    }

    /// `text` as token ids (the tokenizer's own split).
    pub(crate) fn tokenize(&self, text: &str) -> Vec<u32> {
        self.env.tokenize_bytes(text.as_bytes())
    }
}
