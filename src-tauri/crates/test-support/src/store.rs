//! A fresh store: a migrated database in a scratch folder of its own.

use std::ops::Deref;
use std::path::Path;

use headroom_store::Store;

use crate::Scratch;

/// A [`Store`] on a new database, and the folder it lives in; it derefs to
/// the store. Dropping it closes the store, then removes the folder (the
/// fields drop in this order).
#[derive(Debug)]
pub struct FreshStore {
    store: Store,
    dir: Scratch,
}

impl FreshStore {
    /// The data folder the database is in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Deref for FreshStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

/// Opens (and migrates) a store in a new scratch folder named after `tag`.
///
/// # Panics
///
/// When the store cannot be opened: a test cannot run without it.
pub async fn fresh_store(tag: &str) -> FreshStore {
    let dir = Scratch::new(tag);
    let store = Store::open(&dir).await.expect("a store in a scratch folder");
    FreshStore { store, dir }
}
