//! The user's settings: the struct, its defaults and its validation. Pure;
//! `headroom-store` persists it, one row per field.

use serde::{Deserialize, Serialize};

/// The smallest context a model is loaded at: below this a chat template
/// alone does not fit.
pub const MIN_CONTEXT_LIMIT: usize = 256;
/// The largest context a model may be loaded at (the largest any supported
/// architecture names in `max_position_embeddings`).
pub const MAX_CONTEXT_LIMIT: usize = 1 << 20;
/// The most new tokens one turn may ask for.
pub const MAX_MAX_TOKENS: usize = 32_768;
/// The most memory the user may keep back for the OS (GB).
pub const MAX_OS_HEADROOM_GB: f64 = 1024.0;
/// The most disk the cloud-answer cache may use (MB).
pub const MAX_CLOUD_CACHE_MB: u64 = 100_000;
/// The most memory the prompt cache may be allowed (MB), and the most disk
/// chats' saved KV states may take (MB).
pub const MAX_PROMPT_CACHE_MB: u64 = 1 << 20;
pub const MAX_KV_DISK_MB: u64 = 1 << 20;
/// Chats' saved KV states' disk by default (MB).
pub const DEFAULT_KV_DISK_MB: u64 = 4096;

/// The longest idle time before unloading a model that can be set (a day);
/// longer is "never".
pub const MAX_IDLE_UNLOAD_MINUTES: u32 = 24 * 60;

/// Which quantized-matmul kernel a model is loaded with.
///
/// `Fused` is MLX's `quantized_matmul` in the activations' dtype for every
/// shape: what mlx-lm runs, so it gives mlx-lm's tokens (token for token on
/// MLX's CPU backend too). `Cpu` computes in f32 and multiplies prompt
/// chunks through weights dequantized once: much faster on MLX's CPU backend,
/// and more exact, so its tokens can differ from mlx-lm's. `Auto` is `Cpu`
/// on the CPU backend and `Fused` on Metal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "lowercase")]
pub enum KernelChoice {
    #[default]
    Auto,
    Fused,
    Cpu,
}

impl KernelChoice {
    pub const ALL: [KernelChoice; 3] = [KernelChoice::Auto, KernelChoice::Fused, KernelChoice::Cpu];

    /// The spelling of the settings, the CLI's `--kernel` and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Fused => "fused",
            Self::Cpu => "cpu",
        }
    }
}

/// Everything the user can set. Serialized camelCase (the UI's names, and
/// the keys of the `settings` table); a missing field takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// Tokens (prompt + reply) a model is checked and loaded at.
    pub context_limit: usize,
    /// Max new tokens per turn.
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens with this much probability.
    pub top_p: f32,
    /// Memory (GB) the fit check keeps back for the OS and other apps.
    pub os_headroom_gb: f64,
    /// An OpenAI-compatible endpoint (`https://…/v1`); `None`: no cloud.
    pub cloud_base_url: Option<String>,
    /// The model to ask at that endpoint.
    pub cloud_model: Option<String>,
    /// Prompts longer than this (tokens) go to the cloud, if one is set.
    pub local_threshold_tokens: usize,
    /// Disk (MB) for cached cloud answers; 0 turns the cache off.
    pub cloud_cache_mb: u64,
    /// Send a summary of the conversation to the cloud instead of all of it.
    pub summarise_for_cloud: bool,
    /// Port of the local OpenAI-compatible server.
    pub server_port: u16,
    /// The quantized-matmul kernel models are loaded with (applied at the next load).
    pub kernel: KernelChoice,
    /// Start Headroom when the user logs in (a login item / autostart entry).
    pub launch_at_login: bool,
    /// The system-wide shortcut that shows or hides the popover, in the
    /// accelerator syntax the app registers ("Alt+Space" is ⌥Space on a
    /// Mac); `None`: no shortcut.
    pub global_shortcut: Option<String>,
    /// Unload the model after this many minutes without use (`core::away`);
    /// `None` (JSON `null`): never.
    pub idle_unload_minutes: Option<u32>,
    /// The KV cache's bits (8 or 4; any of `kv::KV_BITS`), group size 64;
    /// `None`: the activations' float type. Applied at the next load.
    pub kv_bits: Option<u32>,
    /// Tokens a quantized KV cache stays in float before it is converted
    /// (mlx-lm's `quantized_kv_start`).
    pub quantized_kv_start: u64,
    /// The most memory (MB) the prompt cache may keep besides the chat in
    /// use; it never gets more than half of what the fit verdict leaves
    /// (`fit::prompt_cache_limit`). 0: only the chat in use is kept.
    pub prompt_cache_mb: u64,
    /// Disk (MB) for chats' KV states saved across restarts; 0 turns it off.
    pub kv_disk_mb: u64,
    /// How local answers decode (`speculative`): prompt lookup checks
    /// several proposed tokens per forward pass and switches itself off
    /// where that does not pay; greedy answers are the same either way.
    pub speculative: crate::speculative::SpeculativeMode,
    /// A Mac lending itself (`headroom lend` prints its `HOST:PORT`): a
    /// model that does not fit here shows its verdict across both Macs
    /// (`crate::split`), and can be loaded across both. `None`: this Mac alone.
    pub peer: Option<String>,
    /// A model (its id in the model list) loaded beside every other model
    /// as its draft: it proposes tokens the model checks several at a time
    /// (same answers; it switches itself off where it does not pay). It
    /// must share the model's vocabulary; its weights and KV cache are
    /// counted in every verdict. `None`: no draft.
    pub draft_model: Option<String>,
    /// "Check the hub for updates": whether the app may ask the Hugging Face
    /// hub anything in the background (the starter shelf's refresh at
    /// start). Off, nothing leaves the Mac unless the user asks for it (a
    /// pull, an explicit refresh).
    pub check_hub_updates: bool,
    /// Each model's thinking (by its id in the model list): off, on, or a
    /// token budget; a model not named thinks as its template does by
    /// default. The app's chats, `headroom generate` and the server all
    /// start from it (`crate::thinking`); a turn may ask otherwise.
    pub thinking: std::collections::BTreeMap<String, crate::thinking::Think>,
    /// Whether the app's local server asks every request for its key
    /// (`Authorization: Bearer <key>`, the key shown in Settings). On by
    /// default: any local process can reach 127.0.0.1.
    pub server_require_key: bool,
    /// Whether a server request may load another model than the one the
    /// popover holds (the popover's chat then loses its model). Off: such a
    /// request is refused with 409 `model_in_use`.
    pub server_allow_model_switch: bool,
    /// The most tool calls one popover turn may make (MCP tools); past it,
    /// the model is told the limit was reached and answers without more.
    pub tool_calls_per_turn: usize,
}

/// The most tool calls a turn may be set to make.
pub const MAX_TOOL_CALLS_PER_TURN: usize = 64;

/// The popover's shortcut out of the box: ⌥Space (Alt+Space).
pub const DEFAULT_GLOBAL_SHORTCUT: &str = "Alt+Space";

impl Default for Settings {
    fn default() -> Self {
        Self {
            context_limit: 8192,
            max_tokens: 512,
            temperature: 0.7,
            top_p: 0.95,
            os_headroom_gb: 4.0,
            cloud_base_url: None,
            cloud_model: None,
            local_threshold_tokens: 8192,
            cloud_cache_mb: 50,
            summarise_for_cloud: false,
            server_port: 8080,
            kernel: KernelChoice::Auto,
            launch_at_login: false,
            global_shortcut: Some(DEFAULT_GLOBAL_SHORTCUT.to_owned()),
            idle_unload_minutes: Some(crate::away::DEFAULT_IDLE_UNLOAD_MINUTES),
            kv_bits: None,
            quantized_kv_start: crate::kv::DEFAULT_QUANTIZED_KV_START,
            prompt_cache_mb: crate::fit::DEFAULT_PROMPT_CACHE_MAX >> 20,
            kv_disk_mb: DEFAULT_KV_DISK_MB,
            speculative: crate::speculative::SpeculativeMode::Lookup,
            peer: None,
            draft_model: None,
            check_hub_updates: true,
            thinking: std::collections::BTreeMap::new(),
            server_require_key: true,
            server_allow_model_switch: false,
            tool_calls_per_turn: 8,
        }
    }
}

/// Why a settings value was refused; the message names the field as the UI does.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("{field} must be between {min} and {max} (got {value})")]
    OutOfRange { field: &'static str, value: String, min: String, max: String },
    #[error("max tokens ({max_tokens}) must be smaller than the context limit ({context_limit}), which also holds the prompt")]
    MaxTokensOverContext { max_tokens: usize, context_limit: usize },
    #[error("cloud base URL `{url}` is not usable: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
    #[error("{field} is empty; leave it unset instead")]
    Empty { field: &'static str },
    #[error("the cloud model is set but there is no cloud base URL to ask it at")]
    CloudModelWithoutUrl,
    #[error("server port must be 1024 or above (ports below need root), got {0}")]
    PrivilegedPort(u16),
    #[error("{0}")]
    KvCache(#[from] crate::kv::KvFormatError),
    #[error("thinking: {0}")]
    Thinking(#[from] crate::thinking::ThinkError),
    #[error("the peer Mac `{0}` is not HOST:PORT (as `headroom lend` prints it, e.g. 10.0.0.2:7070)")]
    PeerAddress(String),
}

fn range<T: PartialOrd + ToString + Copy>(field: &'static str, value: T, min: T, max: T) -> Result<(), SettingsError> {
    // `!(a <= b)` rather than `a > b`: NaN is out of every range.
    if !(min <= value && value <= max) {
        return Err(SettingsError::OutOfRange {
            field,
            value: value.to_string(),
            min: min.to_string(),
            max: max.to_string(),
        });
    }
    Ok(())
}

impl Settings {
    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), SettingsError> {
        range("context limit", self.context_limit, MIN_CONTEXT_LIMIT, MAX_CONTEXT_LIMIT)?;
        range("max tokens", self.max_tokens, 1, MAX_MAX_TOKENS)?;
        if self.max_tokens >= self.context_limit {
            return Err(SettingsError::MaxTokensOverContext {
                max_tokens: self.max_tokens,
                context_limit: self.context_limit,
            });
        }
        range("temperature", self.temperature, 0.0, 2.0)?;
        range("tool calls per turn", self.tool_calls_per_turn, 1, MAX_TOOL_CALLS_PER_TURN)?;
        // top_p = 0 would keep no token at all.
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SettingsError::OutOfRange {
                field: "top p",
                value: self.top_p.to_string(),
                min: "more than 0".into(),
                max: "1".into(),
            });
        }
        range("OS headroom (GB)", self.os_headroom_gb, 0.0, MAX_OS_HEADROOM_GB)?;
        if let Some(url) = &self.cloud_base_url {
            check_url(url)?;
        }
        match &self.cloud_model {
            Some(m) if m.trim().is_empty() => return Err(SettingsError::Empty { field: "cloud model" }),
            Some(_) if self.cloud_base_url.is_none() => return Err(SettingsError::CloudModelWithoutUrl),
            _ => {}
        }
        range("local threshold (tokens)", self.local_threshold_tokens, 1, MAX_CONTEXT_LIMIT)?;
        range("cloud cache (MB)", self.cloud_cache_mb, 0, MAX_CLOUD_CACHE_MB)?;
        range("prompt cache (MB)", self.prompt_cache_mb, 0, MAX_PROMPT_CACHE_MB)?;
        range("saved chat states (MB)", self.kv_disk_mb, 0, MAX_KV_DISK_MB)?;
        if self.server_port < 1024 {
            return Err(SettingsError::PrivilegedPort(self.server_port));
        }
        if self.global_shortcut.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(SettingsError::Empty { field: "global shortcut" });
        }
        if let Some(peer) = &self.peer {
            let port = peer.rsplit_once(':').filter(|(host, _)| !host.trim().is_empty()).map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(1..))) {
                return Err(SettingsError::PeerAddress(peer.clone()));
            }
        }
        if let Some(minutes) = self.idle_unload_minutes {
            range("idle unload (minutes)", minutes, 1, MAX_IDLE_UNLOAD_MINUTES)?;
        }
        self.kv_format()?;
        for think in self.thinking.values() {
            think.validate()?;
        }
        Ok(())
    }

    /// The KV format the settings describe (group size 64, mlx-lm's).
    pub fn kv_format(&self) -> Result<crate::kv::KvFormat, crate::kv::KvFormatError> {
        match self.kv_bits {
            None => Ok(crate::kv::KvFormat::Float),
            Some(bits) => crate::kv::KvFormat::quantized(
                u64::from(bits),
                u64::from(crate::kv::DEFAULT_KV_GROUP_SIZE),
                self.quantized_kv_start,
            ),
        }
    }
}

fn check_url(url: &str) -> Result<(), SettingsError> {
    let bad = |reason| Err(SettingsError::InvalidUrl { url: url.to_owned(), reason });
    if url.trim().is_empty() {
        return Err(SettingsError::Empty { field: "cloud base URL" });
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("it needs a scheme, e.g. https://api.openai.com/v1");
    };
    if scheme != "https" && scheme != "http" {
        return bad("only http:// and https:// are supported");
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return bad("it names no host");
    }
    if url.chars().any(char::is_whitespace) {
        return bad("it contains spaces");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_host_colon_port_or_refused_saying_so() {
        for ok in ["10.0.0.2:7070", "studio.local:7070", "127.0.0.1:1"] {
            let s = Settings { peer: Some(ok.into()), ..Settings::default() };
            assert_eq!(s.validate(), Ok(()), "{ok}");
        }
        for bad in ["10.0.0.2", ":7070", "10.0.0.2:0", "10.0.0.2:99999", "host:port", ""] {
            let s = Settings { peer: Some(bad.into()), ..Settings::default() };
            assert_eq!(s.validate(), Err(SettingsError::PeerAddress(bad.into())), "{bad}");
        }
    }

    #[test]
    fn the_defaults_are_valid_and_the_issue_s_values() {
        let s = Settings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!((s.context_limit, s.max_tokens, s.local_threshold_tokens), (8192, 512, 8192));
        assert_eq!((s.os_headroom_gb, s.cloud_cache_mb, s.server_port), (4.0, 50, 8080));
        assert!(!s.summarise_for_cloud && s.cloud_base_url.is_none());
        // Launching at login is the user's choice, never the default.
        assert!(!s.launch_at_login);
        assert_eq!(s.global_shortcut.as_deref(), Some("Alt+Space"));
        assert_eq!(s.kernel, KernelChoice::Auto);
        // The app's server asks for its key and keeps the popover's model, unless told otherwise.
        assert!(s.server_require_key && !s.server_allow_model_switch);
        assert_eq!(s.idle_unload_minutes, Some(15));
        assert_eq!((s.kv_bits, s.quantized_kv_start, s.kv_format()), (None, 5000, Ok(crate::kv::KvFormat::Float)));
        let eight = Settings { kv_bits: Some(8), quantized_kv_start: 0, ..s };
        assert_eq!(eight.kv_format(), Ok(crate::kv::KvFormat::bits_from_start(8)));
        let json = serde_json::to_value(&eight).unwrap_or_default();
        assert_eq!((json["kvBits"].as_u64(), json["quantizedKvStart"].as_u64()), (Some(8), Some(0)));
    }

    #[test]
    fn idle_unload_is_minutes_or_null_for_never() {
        let never: Settings = serde_json::from_str(r#"{"idleUnloadMinutes": null}"#).unwrap();
        assert_eq!((never.idle_unload_minutes, never.validate()), (None, Ok(())));
        let five: Settings = serde_json::from_str(r#"{"idleUnloadMinutes": 5}"#).unwrap();
        assert_eq!(five.idle_unload_minutes, Some(5));
        assert!(serde_json::from_str::<Settings>(r#"{"idleUnloadMinutes": -1}"#).is_err());
        assert_eq!(serde_json::to_value(&never).unwrap_or_default()["idleUnloadMinutes"], serde_json::Value::Null);
    }

    #[test]
    fn the_kernel_is_spelled_as_the_cli_spells_it() {
        let s: Settings = serde_json::from_str(r#"{"kernel": "fused"}"#).unwrap();
        assert_eq!(s.kernel, KernelChoice::Fused);
        assert_eq!(serde_json::to_value(KernelChoice::Cpu).ok(), Some(serde_json::json!("cpu")));
        for k in KernelChoice::ALL {
            assert_eq!(serde_json::to_value(k).ok(), Some(serde_json::json!(k.as_str())));
        }
        assert!(serde_json::from_str::<Settings>(r#"{"kernel": "fast"}"#).is_err());
    }

    #[test]
    fn partial_json_takes_defaults_and_unknown_keys_are_refused() {
        let s: Settings =
            serde_json::from_str(r#"{"maxTokens": 64, "cloudBaseUrl": "http://127.0.0.1:9/v1"}"#).unwrap();
        assert_eq!(s.max_tokens, 64);
        assert_eq!(s.context_limit, 8192);
        assert_eq!(s.validate(), Ok(()));
        let err = serde_json::from_str::<Settings>(r#"{"maxTokenz": 64}"#).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("maxTokenz"));
    }

    #[test]
    fn each_bad_value_gets_an_error_that_names_it() {
        let cases: Vec<(Settings, &str)> = vec![
            (Settings { context_limit: 10, ..Settings::default() }, "context limit must be between 256"),
            (Settings { max_tokens: 0, ..Settings::default() }, "max tokens must be between 1 and 32768 (got 0)"),
            (Settings { max_tokens: 8192, ..Settings::default() }, "smaller than the context limit (8192)"),
            (Settings { temperature: -0.5, ..Settings::default() }, "temperature must be between 0 and 2 (got -0.5)"),
            (Settings { temperature: f32::NAN, ..Settings::default() }, "temperature"),
            (Settings { top_p: 0.0, ..Settings::default() }, "top p must be between more than 0 and 1"),
            (Settings { os_headroom_gb: -1.0, ..Settings::default() }, "OS headroom (GB)"),
            (Settings { cloud_base_url: Some("api.openai.com".into()), ..Settings::default() }, "needs a scheme"),
            (
                Settings { cloud_base_url: Some("ftp://x/v1".into()), ..Settings::default() },
                "only http:// and https://",
            ),
            (Settings { cloud_base_url: Some("https:///v1".into()), ..Settings::default() }, "names no host"),
            (Settings { cloud_base_url: Some(" ".into()), ..Settings::default() }, "cloud base URL is empty"),
            (Settings { cloud_model: Some("gpt".into()), ..Settings::default() }, "no cloud base URL"),
            (Settings { local_threshold_tokens: 0, ..Settings::default() }, "local threshold"),
            (Settings { cloud_cache_mb: 1 << 40, ..Settings::default() }, "cloud cache (MB)"),
            (Settings { prompt_cache_mb: 1 << 40, ..Settings::default() }, "prompt cache (MB)"),
            (Settings { kv_disk_mb: 1 << 40, ..Settings::default() }, "saved chat states (MB)"),
            (Settings { server_port: 80, ..Settings::default() }, "server port must be 1024 or above"),
            (Settings { global_shortcut: Some(" ".into()), ..Settings::default() }, "global shortcut is empty"),
            (
                Settings { idle_unload_minutes: Some(0), ..Settings::default() },
                "idle unload (minutes) must be between 1",
            ),
            (Settings { idle_unload_minutes: Some(100_000), ..Settings::default() }, "and 1440"),
            (Settings { kv_bits: Some(7), ..Settings::default() }, "KV bits must be one of 2, 3, 4, 5, 6 or 8"),
            (
                Settings { kv_bits: Some(8), quantized_kv_start: u64::MAX, ..Settings::default() },
                "quantized KV start must be at most",
            ),
        ];
        for (s, needle) in cases {
            let msg = s.validate().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains(needle), "{needle:?} in {msg:?}");
        }
    }
}
