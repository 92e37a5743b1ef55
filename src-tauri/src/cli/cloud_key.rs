//! `headroom cloud-key set|delete|status --url URL`: the API key of a cloud
//! endpoint, in the OS keychain or, where none runs, a user-only file.

use std::io::{Read, Write};

use clap::{Args, Subcommand};
use headroom_cloud::{ApiKey, KeyStorage, KeyStore};

use super::CliError;
use crate::state::Locations;

#[derive(Debug, Clone, Args)]
pub struct CloudKeyArgs {
    #[command(subcommand)]
    pub action: CloudKeyAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CloudKeyAction {
    /// Store the key for URL, read from stdin (so it stays out of the shell
    /// history and the process list), replacing any earlier one.
    Set {
        /// The endpoint's base URL, e.g. https://api.openai.com/v1
        #[arg(long)]
        url: String,
    },
    /// Remove the key stored for URL.
    Delete {
        #[arg(long)]
        url: String,
    },
    /// Say whether a key is stored for URL, and where (never prints it).
    Status {
        #[arg(long)]
        url: String,
    },
}

/// The key store of the app's data folder (`$HEADROOM_DATA_DIR` first).
pub(crate) fn key_store() -> Result<KeyStore, CliError> {
    let locations = Locations::from_env(|| crate::platform_app_data_dir().ok_or(CliError::NoDataDir))?;
    Ok(KeyStore::new(&locations.data_dir))
}

pub fn run(args: &CloudKeyArgs) -> Result<(), CliError> {
    let store = key_store()?;
    cloud_key(args, &store, &mut std::io::stdin().lock(), &mut std::io::stdout().lock())
}

/// Where a key went, in the words the UI uses too.
pub fn storage_words(storage: KeyStorage, store: &KeyStore) -> String {
    match storage {
        KeyStorage::Keychain => "the OS keychain".to_owned(),
        KeyStorage::File => {
            format!("{} (readable only by you; no OS keychain service is running here)", store.file_path().display())
        }
    }
}

fn cloud_key(args: &CloudKeyArgs, store: &KeyStore, input: &mut dyn Read, out: &mut dyn Write) -> Result<(), CliError> {
    match &args.action {
        CloudKeyAction::Set { url } => {
            let mut key = String::new();
            input.read_to_string(&mut key)?;
            let key = key.trim();
            if key.is_empty() {
                return Err(CliError::NoKeyOnStdin);
            }
            let storage = store.set(url, &ApiKey::new(key))?;
            writeln!(out, "Stored the API key for {url} in {}.", storage_words(storage, store))?;
        }
        CloudKeyAction::Delete { url } => {
            if store.delete(url)? {
                writeln!(out, "Deleted the API key for {url}.")?;
            } else {
                writeln!(out, "No API key was stored for {url}.")?;
            }
        }
        CloudKeyAction::Status { url } => match store.get(url)? {
            Some((_, storage)) => {
                writeln!(out, "An API key for {url} is stored in {}.", storage_words(storage, store))?
            }
            None => writeln!(out, "No API key is stored for {url}.")?,
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(store: &KeyStore, action: CloudKeyAction, stdin: &str) -> Result<String, CliError> {
        let mut out = Vec::new();
        cloud_key(&CloudKeyArgs { action }, store, &mut stdin.as_bytes(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn set_status_delete_round_trip_without_printing_the_key() {
        let tmp = headroom_test_support::scratch("cli-cloud-key");
        let dir = tmp.join("data");
        let store = KeyStore::file_only(&dir);
        let url = "http://127.0.0.1:9/v1".to_owned();
        let said = call(&store, CloudKeyAction::Set { url: url.clone() }, "sk-abc\n").unwrap();
        assert!(said.contains("readable only by you") && !said.contains("sk-abc"), "{said}");
        assert_eq!(store.get(&url).ok().flatten().map(|(k, _)| k), Some(ApiKey::new("sk-abc")));
        let said = call(&store, CloudKeyAction::Status { url: url.clone() }, "").unwrap();
        assert!(said.starts_with("An API key for") && !said.contains("sk-abc"), "{said}");
        let said = call(&store, CloudKeyAction::Delete { url: url.clone() }, "").unwrap();
        assert!(said.starts_with("Deleted"), "{said}");
        let said = call(&store, CloudKeyAction::Delete { url: url.clone() }, "").unwrap();
        assert!(said.starts_with("No API key was stored"), "{said}");
        let r = call(&store, CloudKeyAction::Set { url }, " \n");
        assert!(matches!(r, Err(CliError::NoKeyOnStdin)), "{r:?}");
    }
}
