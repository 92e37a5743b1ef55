//! The user's Hugging Face access token, found where huggingface_hub finds
//! it (so `huggingface-cli login` and `HF_TOKEN` just work), held so that
//! neither Debug output nor an error can print it.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use reqwest::header::HeaderValue;

use crate::error::{HubError, Result};

/// A token file bigger than this is not a token; the cap keeps a token path
/// pointed at a device or a huge file from reading forever.
const MAX_TOKEN_FILE: u64 = 64 << 10;

/// Where a token came from: named in errors instead of the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// An environment variable (`HF_TOKEN`, or the older `HUGGING_FACE_HUB_TOKEN`).
    Env(&'static str),
    /// A token file (`HF_TOKEN_PATH`, `$HF_HOME/token`, `~/.cache/huggingface/token`).
    File(PathBuf),
    /// Handed to [`HfToken::new`] by the caller.
    Given,
}

impl fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenOrigin::Env(var) => write!(f, "the {var} environment variable"),
            TokenOrigin::File(path) => write!(f, "the token file {}", path.display()),
            TokenOrigin::Given => f.write_str("the token given to Headroom"),
        }
    }
}

/// A Hugging Face access token, ready to send as `Authorization: Bearer …`.
/// Its Debug output names only where it came from.
#[derive(Clone)]
pub struct HfToken {
    /// `Bearer <token>`, marked sensitive so the HTTP stack never logs it either.
    bearer: HeaderValue,
    origin: TokenOrigin,
}

impl fmt::Debug for HfToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HfToken").field("origin", &self.origin).field("token", &"<redacted>").finish()
    }
}

/// huggingface_hub's `_clean_token`: line breaks removed, then trimmed; empty is no token.
fn clean(raw: &str) -> Option<String> {
    let token: String = raw.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// huggingface_hub's `_is_true` for boolean environment variables.
fn is_true(value: &OsString) -> bool {
    matches!(value.to_string_lossy().to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
}

impl HfToken {
    /// A token the caller already holds (cleaned as huggingface_hub cleans it).
    pub fn new(token: &str) -> Result<Self> {
        Self::from_raw(token, TokenOrigin::Given)?
            .ok_or(HubError::InvalidToken { origin: TokenOrigin::Given.to_string(), reason: "it is empty" })
    }

    fn from_raw(raw: &str, origin: TokenOrigin) -> Result<Option<Self>> {
        let Some(token) = clean(raw) else { return Ok(None) };
        // Checked here rather than left to the request: a header value error
        // must not surface later without saying which token was at fault.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(HubError::InvalidToken {
                origin: origin.to_string(),
                reason: "it has spaces, control or non-ASCII characters",
            });
        }
        let mut bearer = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| HubError::InvalidToken {
            origin: origin.to_string(),
            reason: "it is not a valid HTTP header value",
        })?;
        bearer.set_sensitive(true);
        Ok(Some(Self { bearer, origin }))
    }

    /// This process's token, by huggingface_hub's rule (see [`HfToken::from_lookup`]).
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|var| std::env::var_os(var))
    }

    /// The token huggingface_hub would send, with `var` reading the
    /// environment (tests pass a map; setting real variables would race other
    /// test threads). In order, as `huggingface_hub.utils._auth.get_token`:
    /// `HF_TOKEN` (or, if that is unset or empty, `HUGGING_FACE_HUB_TOKEN`);
    /// else the file `HF_TOKEN_PATH`, or `$HF_HOME/token`, where `HF_HOME`
    /// defaults to `$XDG_CACHE_HOME/huggingface`, then
    /// `~/.cache/huggingface` (where `huggingface-cli login` writes).
    /// `HF_HUB_DISABLE_IMPLICIT_TOKEN` set to true means no token, as there.
    /// A missing file is no token; an unreadable one is an error naming it.
    pub fn from_lookup(var: impl Fn(&str) -> Option<OsString>) -> Result<Option<Self>> {
        // Empty variables count as unset, as HubEnv treats the cache variables.
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        if var("HF_HUB_DISABLE_IMPLICIT_TOKEN").is_some_and(|v| is_true(&v)) {
            return Ok(None);
        }
        let from_env = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"].into_iter().find_map(|name| Some((name, var(name)?)));
        if let Some((name, value)) = from_env {
            // Like huggingface_hub, a variable that cleans to nothing falls
            // through to the file, not to the older variable.
            let value = value.into_string().map_err(|_| HubError::InvalidToken {
                origin: TokenOrigin::Env(name).to_string(),
                reason: "it is not valid UTF-8",
            })?;
            if let Some(token) = Self::from_raw(&value, TokenOrigin::Env(name))? {
                return Ok(Some(token));
            }
        }
        let home = var("HOME");
        let path = match var("HF_TOKEN_PATH") {
            Some(p) => PathBuf::from(p),
            None => {
                let hf_home = match (var("HF_HOME"), var("XDG_CACHE_HOME"), &home) {
                    (Some(h), _, _) => PathBuf::from(h),
                    (None, Some(xdg), _) => Path::new(&xdg).join("huggingface"),
                    (None, None, Some(home)) => Path::new(home).join(".cache").join("huggingface"),
                    // No home at all: nowhere a login could have written a token.
                    (None, None, None) => return Ok(None),
                };
                expand_home(&hf_home, home.as_deref()).join("token")
            }
        };
        Self::from_file(path)
    }

    fn from_file(path: PathBuf) -> Result<Option<Self>> {
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(HubError::TokenFile { path, source }),
        };
        let mut text = String::new();
        if let Err(source) = file.take(MAX_TOKEN_FILE + 1).read_to_string(&mut text) {
            return Err(HubError::TokenFile { path, source });
        }
        if text.len() as u64 > MAX_TOKEN_FILE {
            let origin = TokenOrigin::File(path).to_string();
            return Err(HubError::InvalidToken { origin, reason: "the file is larger than any token" });
        }
        Self::from_raw(&text, TokenOrigin::File(path))
    }

    /// Where the token came from.
    pub fn origin(&self) -> &TokenOrigin {
        &self.origin
    }

    /// The `Authorization` header value (sensitive).
    pub(crate) fn bearer(&self) -> &HeaderValue {
        &self.bearer
    }
}

/// `os.path.expanduser` for a leading `~` (huggingface_hub expands `HF_HOME`).
fn expand_home(path: &Path, home: Option<&std::ffi::OsStr>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => Path::new(home).join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The token's text, for assertions only.
    fn secret(t: &HfToken) -> &str {
        t.bearer.to_str().unwrap().strip_prefix("Bearer ").unwrap()
    }

    fn read(vars: &[(&str, &OsString)]) -> Result<Option<HfToken>> {
        let map: HashMap<String, OsString> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).clone())).collect();
        HfToken::from_lookup(|k| map.get(k).cloned())
    }

    fn os(s: impl Into<OsString>) -> OsString {
        s.into()
    }

    fn found(r: Result<Option<HfToken>>) -> (String, TokenOrigin) {
        let t = r.unwrap().expect("a token");
        (secret(&t).to_owned(), t.origin().clone())
    }

    #[test]
    fn the_token_is_found_where_huggingface_hub_looks_in_its_order() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let login = home.join(".cache/huggingface/token");
        std::fs::create_dir_all(login.parent().unwrap()).unwrap();
        std::fs::write(&login, "hf_login\n").unwrap();
        let hf_home = tmp.path().join("hf-home");
        std::fs::create_dir_all(&hf_home).unwrap();
        std::fs::write(hf_home.join("token"), "  hf_home_token \r\n").unwrap();
        let token_path = tmp.path().join("elsewhere");
        std::fs::write(&token_path, "hf_path").unwrap();
        let xdg = tmp.path().join("xdg");
        std::fs::create_dir_all(xdg.join("huggingface")).unwrap();
        std::fs::write(xdg.join("huggingface/token"), "hf_xdg").unwrap();
        let (h, hh, tp, x) = (os(&home), os(&hf_home), os(&token_path), os(&xdg));
        let (env, old, empty, blank) = (os("hf_env"), os("hf_old"), os(""), os(" \n"));

        // `huggingface-cli login`'s file, trimmed.
        assert_eq!(found(read(&[("HOME", &h)])), ("hf_login".into(), TokenOrigin::File(login.clone())));
        // XDG_CACHE_HOME moves HF_HOME; HF_HOME wins over it; HF_TOKEN_PATH over both.
        assert_eq!(found(read(&[("HOME", &h), ("XDG_CACHE_HOME", &x)])).0, "hf_xdg");
        assert_eq!(
            found(read(&[("HOME", &h), ("XDG_CACHE_HOME", &x), ("HF_HOME", &hh)])),
            ("hf_home_token".into(), TokenOrigin::File(hf_home.join("token")))
        );
        assert_eq!(found(read(&[("HOME", &h), ("HF_HOME", &hh), ("HF_TOKEN_PATH", &tp)])).0, "hf_path");
        // The environment first; HF_TOKEN before the older name; empty is unset.
        let all = [("HOME", &h), ("HF_HOME", &hh), ("HF_TOKEN_PATH", &tp)];
        assert_eq!(
            found(read(&[&all[..], &[("HF_TOKEN", &env)]].concat())),
            ("hf_env".into(), TokenOrigin::Env("HF_TOKEN"))
        );
        assert_eq!(found(read(&[("HF_TOKEN", &env), ("HUGGING_FACE_HUB_TOKEN", &old)])).0, "hf_env");
        assert_eq!(
            found(read(&[("HF_TOKEN", &empty), ("HUGGING_FACE_HUB_TOKEN", &old)])),
            ("hf_old".into(), TokenOrigin::Env("HUGGING_FACE_HUB_TOKEN"))
        );
        // A variable of whitespace only is no token: the file is read instead.
        assert_eq!(found(read(&[("HOME", &h), ("HF_TOKEN", &blank)])).0, "hf_login");
        // `~` in HF_HOME is the home folder, as os.path.expanduser makes it.
        let tilde = os("~/.cache/huggingface");
        assert_eq!(found(read(&[("HOME", &h), ("HF_HOME", &tilde)])).0, "hf_login");
        // Opted out of implicit tokens: none, as huggingface_hub sends none.
        let yes = os("True");
        assert!(read(&[("HF_TOKEN", &env), ("HF_HUB_DISABLE_IMPLICIT_TOKEN", &yes)]).unwrap().is_none());
    }

    #[test]
    fn no_file_or_an_empty_one_is_no_token_and_an_unreadable_one_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let home = os(tmp.path());
        assert!(read(&[("HOME", &home)]).unwrap().is_none(), "no login yet");
        assert!(read(&[]).unwrap().is_none(), "no home at all");
        let empty = tmp.path().join("empty");
        std::fs::write(&empty, "\n  \n").unwrap();
        assert!(read(&[("HOME", &home), ("HF_TOKEN_PATH", &os(&empty))]).unwrap().is_none());

        // A folder where the file should be cannot be read: an error naming the path.
        let folder = tmp.path().join("a-folder");
        std::fs::create_dir_all(&folder).unwrap();
        let err = read(&[("HF_TOKEN_PATH", &os(&folder))]).unwrap_err();
        assert!(matches!(&err, HubError::TokenFile { path, .. } if *path == folder), "{err:?}");
        assert!(err.to_string().contains(&folder.display().to_string()), "{err}");

        let binary = tmp.path().join("binary");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read(&[("HF_TOKEN_PATH", &os(&binary))]), Err(HubError::TokenFile { .. })));
        let huge = tmp.path().join("huge");
        std::fs::write(&huge, vec![b'a'; (MAX_TOKEN_FILE + 10) as usize]).unwrap();
        assert!(matches!(read(&[("HF_TOKEN_PATH", &os(&huge))]), Err(HubError::InvalidToken { .. })));
    }

    #[test]
    fn a_token_that_cannot_be_a_header_is_refused_without_printing_it() {
        for bad in ["hf_a b", "hf_\u{1}x", "hf_é"] {
            let err = HfToken::new(bad).unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(matches!(err, HubError::InvalidToken { .. }) && !text.contains(bad), "{text}");
        }
        assert!(HfToken::new(" \r\n").is_err());
        let spaced = os("hf_a b");
        let err = read(&[("HF_TOKEN", &spaced)]).unwrap_err().to_string();
        assert!(err.contains("HF_TOKEN") && !err.contains("hf_a b"), "{err}");
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let token = HfToken::new("hf_SeCrEt123\n").unwrap();
        assert_eq!(secret(&token), "hf_SeCrEt123");
        let shown = format!("{token:?} {token:#?}");
        assert!(!shown.contains("SeCrEt") && shown.contains("redacted"), "{shown}");
        assert!(token.bearer().is_sensitive());
    }
}
