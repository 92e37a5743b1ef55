//! headroom-store: the app's SQLite database (sqlx). Sessions, messages,
//! per-turn stats, benchmark runs, the memory timeline and settings; the
//! only crate that depends on sqlx. Every method is async; callers on plain
//! threads drive them with a tokio runtime handle's `block_on`.

pub mod bench;
pub mod cloud_cache;
pub mod error;
pub mod export;
pub mod measurements;
pub mod sessions;
pub mod settings;
pub mod timeline;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

pub use error::{Result, StoreError};
pub use export::SessionExport;
pub use sessions::{
    in_context, title_from, LastTurn, MessageStatus, Route, SearchHit, Session, SessionSummary, StoredMessage,
    TurnOutcome, TurnStart, TurnStatsRecord,
};
pub use timeline::{MemoryPoint, RateRow, StoredRate, StoredSlowdown};

use error::Context;

/// The database file inside the data folder.
pub const DB_FILE: &str = "headroom.db";

/// Every migration in the top-level `migrations/` folder, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../../migrations");

/// A cheap, cloneable handle to the database (a connection pool).
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    path: PathBuf,
}

/// Waits for the exclusive lock on `path` (created if missing), on a
/// blocking thread; it is released when the returned file is dropped.
async fn setup_lock(path: &Path) -> Result<std::fs::File> {
    let lock_path = path.to_owned();
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
    locked.map_err(|source| StoreError::Lock { path: path.to_owned(), source })
}

/// Milliseconds since the Unix epoch, the unit of every stored time.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Creates `dir` (and its missing parents) readable by this user only:
/// it holds every chat, and the chats' KV states (their token ids).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

impl Store {
    /// Opens (creating if needed) `dir/headroom.db`, runs the migrations it
    /// lacks, and marks as `interrupted` any answer a dead process left
    /// `streaming`.
    pub async fn open(dir: &Path) -> Result<Self> {
        create_private_dir(dir).map_err(|source| StoreError::CreateDir { path: dir.to_owned(), source })?;
        let path = dir.join(DB_FILE);
        let store = {
            // Two processes opening a new database together (the app and a
            // CLI command) race twice: switching it to WAL ("database is
            // locked", which no busy timeout covers) and its first migration
            // (sqlx takes no lock for SQLite: "table … already exists"). An
            // OS lock on a file beside it makes them take turns; the second
            // finds nothing left to do. The OS drops it if a process dies.
            let _turn = setup_lock(&path.with_extension("db-setup-lock")).await?;
            let store = Self::open_file(&path).await?;
            MIGRATOR.run(&store.pool).await.map_err(|source| StoreError::Migrate { path: path.clone(), source })?;
            store
        };
        let recovered = store.recover_streaming().await?;
        if recovered > 0 {
            tracing::info!(recovered, "answers left streaming by a process that ended were marked interrupted");
        }
        Ok(store)
    }

    /// The pool on `path` with the settings every connection needs, without
    /// migrating (tests use it to build a database at an older version).
    pub async fn open_file(path: &Path) -> Result<Self> {
        let options = SqliteConnectOptions::from_str("sqlite:")
            .map_err(|source| StoreError::Open { path: path.to_owned(), source })?
            .filename(path)
            .create_if_missing(true)
            // Readers (the UI listing sessions) never wait for the writer
            // streaming an answer, and a killed process loses nothing committed.
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL is durable against a process crash under WAL; only a
            // power cut can lose the last commits.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            // The app and a CLI run may write at the same moment.
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open { path: path.to_owned(), source })?;
        Ok(Self { pool, path: path.to_owned() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pool, for crates that keep tables of their own in this database
    /// (their migrations live in `migrations/` too).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Closes every connection (checkpointing the WAL); later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Every row of every table (the migrations' bookkeeping aside), each
    /// value as an SQL literal (`quote()`), one line per row, tables by name
    /// and rows by rowid: what "unchanged" means when the database is
    /// compared before and after something that must not have touched it.
    pub async fn dump(&self) -> Result<String> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             AND name NOT LIKE '_sqlx_%' ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .ctx("list the tables")?;
        let mut out = String::new();
        for table in tables {
            let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
                .bind(&table)
                .fetch_all(&self.pool)
                .await
                .ctx("list a table's columns")?;
            let values: Vec<String> = columns.iter().map(|c| format!("quote(\"{c}\")")).collect();
            // Names come from the database's own catalogue, not from input.
            let sql = format!("SELECT {} FROM \"{table}\" ORDER BY rowid", values.join(" || ',' || "));
            let rows: Vec<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_all(&self.pool).await.ctx("dump a table")?;
            for row in rows {
                out.push_str(&format!("{table}: {row}\n"));
            }
        }
        Ok(out)
    }

    /// A writer that is still alive rewrites its row as `streaming` at its
    /// next save (at most about a second later), so a second process opening
    /// the database mid-answer only flips it briefly.
    async fn recover_streaming(&self) -> Result<u64> {
        let done =
            sqlx::query("UPDATE messages SET status = 'interrupted', updated_at = ?1 WHERE status = 'streaming'")
                .bind(now_ms())
                .execute(&self.pool)
                .await
                .ctx("mark unfinished answers interrupted")?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::ops::Deref;

    use headroom_test_support::Scratch;

    /// A store on a new database in a scratch folder that goes with it.
    /// (`headroom_test_support::fresh_store` opens the store of the crate it
    /// links, a different type in this crate's own tests.)
    #[derive(Debug)]
    pub struct TestStore {
        store: super::Store,
        _dir: Scratch,
    }

    impl Deref for TestStore {
        type Target = super::Store;

        fn deref(&self) -> &super::Store {
            &self.store
        }
    }

    pub async fn store(tag: &str) -> TestStore {
        let dir = Scratch::new(&format!("store-{tag}"));
        TestStore { store: super::Store::open(&dir).await.unwrap(), _dir: dir }
    }

    #[tokio::test]
    async fn a_dump_shows_every_row_and_every_change() {
        let store = store("dump").await;
        let empty = store.dump().await.unwrap();
        let t = store.begin_turn("s", "hi 'there'", None, crate::Route::Local).await.unwrap();
        let dump = store.dump().await.unwrap();
        assert_ne!(dump, empty);
        assert!(dump.contains("messages: ") && dump.contains("'hi ''there'''"), "{dump}");
        assert_eq!(store.dump().await.ok(), Some(dump.clone()), "reading changes nothing");
        store.save_partial(t.assistant_message_id, "x").await.unwrap();
        assert_ne!(store.dump().await.ok(), Some(dump));
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::*;
    use headroom_test_support::scratch;

    const TABLES: [&str; 8] = [
        "sessions",
        "messages",
        "turn_stats",
        "bench_runs",
        "memory_timeline",
        "settings",
        "rate_timeline",
        "slowdowns",
    ];

    #[cfg(unix)]
    #[tokio::test]
    async fn a_new_data_folder_is_this_users_only() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("private");
        let dir = root.join("data");
        let _store = Store::open(&dir).await.unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "it holds every chat");
    }

    async fn applied(store: &Store) -> Vec<i64> {
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_fresh_database_gets_every_migration_wal_and_foreign_keys() {
        let dir = scratch("store-fresh");
        let store = Store::open(&dir).await.unwrap();
        assert!(dir.join(DB_FILE).is_file());
        let all: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        assert_eq!(all.first(), Some(&1));
        assert_eq!(applied(&store).await, all);
        for table in TABLES {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1")
                .bind(table)
                .fetch_one(store.pool())
                .await
                .unwrap_or(0);
            assert_eq!(n, 1, "table {table}");
        }
        // Every pooled connection, not just the first: hold several at once.
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(store.pool().acquire().await.unwrap());
        }
        for conn in &mut conns {
            let mode: String =
                sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut **conn).await.unwrap_or_default();
            let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(&mut **conn).await.unwrap_or(0);
            assert_eq!((mode.as_str(), fk), ("wal", 1));
        }
        drop(conns);
        // Foreign keys are enforced, not just declared.
        let orphan = sqlx::query("INSERT INTO messages (session_id, role, content, status, created_at, updated_at) VALUES ('none', 'user', 'x', 'complete', 0, 0)")
            .execute(store.pool())
            .await;
        assert!(orphan.is_err_and(|e| e.to_string().contains("FOREIGN KEY")));
        let bad_status = sqlx::query("INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('', 't', 0, 0)")
            .execute(store.pool())
            .await;
        assert!(bad_status.is_err(), "an empty session id is refused by the schema");
    }

    #[tokio::test]
    async fn a_database_at_migration_1_is_brought_up_to_date_and_keeps_its_rows() {
        let dir = scratch("store-existing");
        let old = Store::open_file(&dir.join(DB_FILE)).await.unwrap();
        MIGRATOR.run_to(1, old.pool()).await.unwrap();
        assert_eq!(applied(&old).await, [1]);
        // Rows as version 1 wrote them, in plain SQL: today's queries name
        // columns that version 1 does not have.
        for sql in [
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('kept', 'Kept', 1, 1)",
            "INSERT INTO messages (session_id, role, content, model, status, created_at, updated_at)
             VALUES ('kept', 'user', 'from the old version', 'm', 'complete', 1, 1)",
            "INSERT INTO messages (session_id, role, content, model, status, created_at, updated_at)
             VALUES ('kept', 'assistant', 'half an ans', 'm', 'streaming', 1, 1)",
        ] {
            sqlx::query(sql).execute(old.pool()).await.unwrap();
        }
        let answer_id: i64 = sqlx::query_scalar("SELECT max(id) FROM messages").fetch_one(old.pool()).await.unwrap();
        old.close().await;

        let store = Store::open(&dir).await.unwrap();
        assert_eq!(applied(&store).await, MIGRATOR.iter().map(|m| m.version).collect::<Vec<_>>());
        let msgs = store.messages("kept").await.unwrap();
        assert_eq!(msgs[0].content, "from the old version");
        // The old process died mid-answer: the reopen says so.
        assert_eq!((msgs[1].id, msgs[1].content.as_str()), (answer_id, "half an ans"));
        assert_eq!(msgs[1].status, MessageStatus::Interrupted);
        // Opening an up-to-date database again changes nothing.
        store.close().await;
        let again = Store::open(&dir).await.unwrap();
        assert_eq!(again.messages("kept").await.map(|m| m.len()).ok(), Some(2));
        let checksums = sqlx::query("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(again.pool())
            .await
            .unwrap_or_default();
        for (row, m) in checksums.iter().zip(MIGRATOR.iter()) {
            assert_eq!(
                row.get::<Vec<u8>, _>("checksum"),
                m.checksum.to_vec(),
                "migration {} was edited after release",
                m.version
            );
        }
    }

    /// The app and a CLI command started together on a new data folder
    /// once raced the first migration ("table ... already exists").
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn processes_opening_a_new_database_together_each_get_it_whole() {
        for round in 0..8 {
            let scratch = scratch(&format!("store-together-{round}"));
            let opens: Vec<_> = (0..4)
                .map(|_| {
                    let dir = scratch.to_path_buf();
                    tokio::spawn(async move { Store::open(&dir).await })
                })
                .collect();
            for open in opens {
                let store = open.await.unwrap().map_err(|e| format!("round {round}: {e}")).unwrap();
                assert_eq!(applied(&store).await, MIGRATOR.iter().map(|m| m.version).collect::<Vec<_>>());
                store.close().await;
            }
        }
    }

    #[tokio::test]
    async fn an_unwritable_data_folder_is_a_clear_error() {
        let scratch = scratch("store");
        let dir = scratch.join("unwritable");
        std::fs::write(&dir, b"a file, not a folder").unwrap();
        let msg = Store::open(&dir).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("cannot create the data folder") && msg.contains("unwritable"), "{msg}");
    }
}
