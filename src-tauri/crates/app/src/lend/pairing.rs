//! The lender's pairings: the code it shows, the tokens it gave (kept in
//! its data folder, this user's only), and the wrong codes it took, counted
//! per source address, so that one host guessing cannot turn pairing off
//! for another.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::LendError;

/// Wrong pairing codes a lender takes from one address before it stops
/// pairing with that address until it is started again.
pub const PAIRING_ATTEMPTS: u32 = 5;
/// The addresses whose wrong codes are remembered at once: a flood of
/// sources beyond it is refused pairing rather than grown without bound.
const SOURCES: usize = 4096;

/// The code, the tokens, the wrong codes per source.
#[derive(Debug)]
pub struct Pairing {
    code: String,
    tokens: Vec<String>,
    wrong: HashMap<IpAddr, u32>,
    file: PathBuf,
}

/// What a pairing attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paired {
    /// The right code: the token to present from now on.
    Token(String),
    /// Refused, and why (in the host's words).
    Refused(String),
}

impl Pairing {
    /// The pairings kept in `file`, with a fresh code.
    pub fn new(file: PathBuf) -> Result<Self, LendError> {
        let tokens = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let digits = random_bytes::<4>()?;
        let code = format!("{:06}", u32::from_le_bytes(digits) % 1_000_000);
        Ok(Self { code, tokens, wrong: HashMap::new(), file })
    }

    /// The code this lender shows.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Whether `token` is one this lender gave.
    pub fn knows(&self, token: &str) -> bool {
        self.tokens.iter().any(|t| same(t.as_bytes(), token.as_bytes()))
    }

    /// A new token for the right code from `from`; a refusal for a wrong
    /// one, or for a source that gave [`PAIRING_ATTEMPTS`] wrong ones.
    pub fn pair(&mut self, from: IpAddr, code: &str) -> Result<Paired, LendError> {
        let wrong = self.wrong.get(&from).copied().unwrap_or(0);
        if wrong >= PAIRING_ATTEMPTS || (wrong == 0 && self.wrong.len() >= SOURCES) {
            return Ok(Paired::Refused(format!(
                "{PAIRING_ATTEMPTS} wrong pairing codes from {from}: pairing is off for that address until this Mac lends itself again"
            )));
        }
        if !same(code.trim().as_bytes(), self.code.as_bytes()) {
            *self.wrong.entry(from).or_insert(0) += 1;
            return Ok(Paired::Refused("wrong pairing code".to_owned()));
        }
        let token: String = random_bytes::<16>()?.iter().map(|b| format!("{b:02x}")).collect();
        self.tokens.push(token.clone());
        let json = serde_json::to_vec(&self.tokens)
            .map_err(|e| LendError::Keep { path: self.file.clone(), source: std::io::Error::other(e) })?;
        crate::peers::write_private(&self.file, &json)
            .map_err(|source| LendError::Keep { path: self.file.clone(), source })?;
        Ok(Paired::Token(token))
    }
}

/// Compares in time that does not depend on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `N` bytes from the OS's random source.
fn random_bytes<const N: usize>() -> Result<[u8; N], LendError> {
    use std::io::Read;
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut out)).map_err(LendError::Random)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_codes_are_counted_per_source_and_another_source_still_pairs() {
        let dir = headroom_test_support::scratch("lend-pairing");
        let mut pairing = Pairing::new(dir.join("lent-to.json")).unwrap();
        let code = pairing.code().to_owned();
        let wrong = if code == "000000" { "111111" } else { "000000" };
        let (guesser, host) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 2]));
        for _ in 0..PAIRING_ATTEMPTS {
            assert_eq!(pairing.pair(guesser, wrong).unwrap(), Paired::Refused("wrong pairing code".into()));
        }
        // The guesser is off, even with the right code now.
        let Paired::Refused(off) = pairing.pair(guesser, &code).unwrap() else {
            panic!("paired after five wrong codes")
        };
        assert!(off.contains("pairing is off for that address"), "{off}");
        let Paired::Token(token) = pairing.pair(host, &code).unwrap() else { panic!("another source was refused") };
        assert!(pairing.knows(&token) && !pairing.knows("00"));
        // Kept for the next run.
        assert!(Pairing::new(dir.join("lent-to.json")).unwrap().knows(&token));
    }
}
