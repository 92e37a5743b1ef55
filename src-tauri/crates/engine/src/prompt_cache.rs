//! The one prompt cache: the KV states of earlier requests, kept so that a
//! request whose tokens begin with a cached prefix prefills only the rest.
//! The app's turns, `headroom chat` and the local server all reach it,
//! because it lives on the engine thread that runs every request.
//!
//! Lookup follows mlx-lm's `LRUPromptCache.fetch_nearest_cache`: among the
//! entries in the request's KV format, take the one that lets the request
//! skip the most tokens, whether it holds exactly the prompt, a shorter
//! prefix of it, or a longer conversation that parts from it (trimmed back
//! to the common prefix, where every layer can step back exactly: see
//! cache/mod.rs). An entry the request continues moves to it (it will come
//! back longer); an entry it branches off is copied, and stays for its own
//! conversation. MLX arrays are shared until written, so a copy costs
//! memory only for what the request then writes.
//!
//! Bounded by bytes, never by count alone: the entry of the latest request
//! is the KV cache the fit verdict counted at the context limit; every
//! other entry must fit in the allowance the load was given out of what
//! the verdict left over (`headroom_core::fit::prompt_cache_limit`), and
//! the least recently used go first. A turn that finds less room than that
//! (memory got tighter since the load) makes the room before it runs, and
//! under memory pressure all of it is given back before the model is.
//!
//! Sessions (the app's chats, `headroom chat --session`) tag their entry,
//! so the disk tier (prompt_cache/disk.rs) can keep it across restarts.
//!
//! Partitioned: a state is reused only by the partition that made it. Each
//! chat is its own; requests outside any chat share one per tenant (the
//! local server's API key, when it has keys: one partition each), and
//! those without one (a keyless server, `headroom generate`) share the
//! unnamed one. So a private chat cannot be read through the server guess
//! by guess from `cached_tokens` or the time to the first token, one key's
//! client cannot read another's that way, and no output reports reuse from
//! anyone else's state. The bound, the LRU order and the drop
//! under pressure stay global: they say how much is kept, not who may use it.
//!
//! A cache that cannot step back (a sliding window that may rotate, a
//! recurrent state) also leaves a checkpoint: its state once the prompt was
//! in, before the answer. The next prompt re-words the answer whenever the
//! tokenizer does not give back the sampled ids, and then only the
//! checkpoint is a prefix of it.

pub mod disk;

use std::time::{Duration, Instant};

use headroom_core::kv::KvFormat;

use crate::cache::KvCache;

/// How many of an entry's last tokens a request may leave unused and still
/// continue it: the end of an answer (its last sampled token, the
/// template's closing tokens) that the next prompt writes differently.
pub const CONTINUE_SLACK: usize = 8;

#[derive(Debug)]
pub(crate) struct Entry {
    /// The chat it belongs to; `None` for a server request.
    pub session: Option<String>,
    /// Outside a chat, the tenant whose requests may reuse it (the server's
    /// API key); `None`: requests that name none.
    pub tenant: Option<String>,
    /// The state at the end of a prompt, kept beside the session's state.
    pub checkpoint: bool,
    pub cache: KvCache,
    /// Lookup order: larger is more recent.
    used: u64,
    pub used_at: Instant,
    /// Whether the disk tier holds this state as it is now.
    pub saved: bool,
}

/// Where a request's reused tokens came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    /// Nothing cached matched: the whole prompt was prefilled.
    #[default]
    None,
    /// An entry in memory.
    Memory,
    /// The session's state on disk, read back for this request.
    Disk,
}

impl Reuse {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Memory => "memory",
            Self::Disk => "disk",
        }
    }
}

/// The partition a request reads and writes: its chat, or outside any chat
/// its tenant (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Owner<'a> {
    pub session: Option<&'a str>,
    pub tenant: Option<&'a str>,
}

impl<'a> Owner<'a> {
    /// A chat's partition.
    #[cfg(test)]
    pub fn session(session: &'a str) -> Self {
        Self { session: Some(session), tenant: None }
    }

    /// Whether `e` is in this partition.
    fn owns(self, e: &Entry) -> bool {
        e.session.as_deref() == self.session && e.tenant.as_deref() == self.tenant
    }
}

/// What the cache holds and how well it served, for Settings and the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptCacheStats {
    pub entries: usize,
    /// Bytes of every entry.
    pub bytes: usize,
    /// Of those, the latest request's (counted by the fit as the KV cache).
    pub latest_bytes: usize,
    /// The allowance for the others.
    pub limit_bytes: usize,
    /// Requests that looked, and those that reused at least one token.
    pub lookups: u64,
    pub hits: u64,
    /// Of `hits`, those served from the disk tier.
    pub disk_hits: u64,
    pub prompt_tokens: u64,
    pub reused_tokens: u64,
    /// Entries dropped to stay within the allowance or to make room.
    pub evictions: u64,
    /// The disk tier's files and their bytes (0 without one).
    pub disk_files: usize,
    pub disk_bytes: u64,
    pub disk_limit_bytes: u64,
    /// States that could not be written or read (each also a miss).
    pub disk_errors: u64,
}

/// The store itself; owned by the engine thread.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    entries: Vec<Entry>,
    limit_bytes: usize,
    clock: u64,
    stats: PromptCacheStats,
}

impl PromptCache {
    /// Entries other than the latest may hold `bytes` from now on (the
    /// excess goes at the next [`Self::put`] or [`Self::make_room`]).
    pub fn set_limit(&mut self, bytes: usize) {
        self.limit_bytes = bytes;
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Whether `session` has an entry in memory.
    pub fn has_session(&self, session: &str) -> bool {
        self.entries.iter().any(|e| e.session.as_deref() == Some(session))
    }

    /// The cache to run `prompt` on, in `format`, and how many of its
    /// tokens it already holds (the cache is trimmed to them); `None` when
    /// no entry saves a token. See the module docs for move vs copy.
    pub fn take(&mut self, owner: Owner<'_>, prompt: &[u32], format: KvFormat) -> Option<(KvCache, usize)> {
        let session = owner.session;
        let best = self
            .entries
            .iter()
            .enumerate()
            // Only the caller's own partition (module docs).
            .filter(|(_, e)| e.cache.format() == format && owner.owns(e))
            .map(|(i, e)| {
                let own = session.is_some();
                (e.cache.reusable(prompt), own, e.used, i)
            })
            .max()?;
        let (reusable, own, _, i) = best;
        if reusable == 0 {
            return None;
        }
        let continues = own || self.entries[i].cache.offset() - reusable <= CONTINUE_SLACK;
        let mut cache = if continues {
            self.entries.remove(i).cache
        } else {
            let used = self.tick();
            let e = &mut self.entries[i];
            e.used = used;
            e.used_at = Instant::now();
            e.cache.clone()
        };
        let reused = cache.reuse_prefix(prompt);
        Some((cache, reused))
    }

    /// Counts a state the disk tier could not write or read.
    pub fn disk_error(&mut self) {
        self.stats.disk_errors += 1;
    }

    /// Counts one request: `prompt` tokens, `reused` of them from `from`.
    pub fn record(&mut self, prompt: usize, reused: usize, from: Reuse) {
        let s = &mut self.stats;
        s.lookups += 1;
        s.prompt_tokens += prompt as u64;
        s.reused_tokens += reused as u64;
        if reused > 0 {
            s.hits += 1;
        }
        if from == Reuse::Disk && reused > 0 {
            s.disk_hits += 1;
        }
    }

    /// Keeps `cache` (the state a request left) as the latest entry, for
    /// `session`. Drops what it makes redundant (the session's older entry;
    /// entries holding a prefix of it that it can step back to exactly, as
    /// mlx-lm does) and then the least recently used others beyond the
    /// allowance (or `room`, if smaller: what the request's own fit check
    /// found). Returns the entries dropped for room, for the disk tier.
    pub fn put(&mut self, owner: Owner<'_>, cache: KvCache, room: usize, checkpoint: bool) -> Vec<Entry> {
        let tokens = cache.tokens();
        self.entries.retain(|e| {
            let same_session = owner.session.is_some() && owner.owns(e) && e.checkpoint == checkpoint;
            let prefix = e.cache.format() == cache.format()
                && tokens.starts_with(e.cache.tokens())
                && cache.can_trim(tokens.len() - e.cache.tokens().len());
            // Another partition's prefix is not this state's to replace.
            let dropped = same_session || (prefix && owner.session.is_none() && owner.owns(e));
            !dropped
        });
        let used = self.tick();
        let (session, tenant) = (owner.session.map(str::to_owned), owner.tenant.map(str::to_owned));
        self.entries.push(Entry { session, tenant, checkpoint, cache, used, used_at: Instant::now(), saved: false });
        self.evict_beyond(room.min(self.limit_bytes))
    }

    /// Drops the least recently used entries until those other than the
    /// latest hold at most `room` bytes (or the allowance, if smaller).
    pub fn make_room(&mut self, room: usize) -> Vec<Entry> {
        self.evict_beyond(room.min(self.limit_bytes))
    }

    fn evict_beyond(&mut self, bytes: usize) -> Vec<Entry> {
        let mut dropped = Vec::new();
        let latest = self.entries.iter().map(|e| e.used).max();
        loop {
            let others: usize = self.entries.iter().filter(|e| Some(e.used) != latest).map(|e| e.cache.nbytes()).sum();
            if others <= bytes {
                return dropped;
            }
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| Some(e.used) != latest)
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i);
            let Some(i) = oldest else { return dropped };
            self.stats.evictions += 1;
            dropped.push(self.entries.remove(i));
        }
    }

    /// Removes `session`'s entries (its state and checkpoint).
    pub fn remove_session(&mut self, session: &str) {
        self.entries.retain(|e| e.session.as_deref() != Some(session));
    }

    /// Removes every entry (memory pressure, an unload).
    pub fn drain(&mut self) -> Vec<Entry> {
        std::mem::take(&mut self.entries)
    }

    /// Session entries not on disk as they are now and unused for `idle`.
    pub fn unsaved(&mut self, idle: Duration) -> impl Iterator<Item = &mut Entry> {
        self.entries.iter_mut().filter(move |e| e.session.is_some() && !e.saved && e.used_at.elapsed() >= idle)
    }

    pub fn nbytes(&self) -> usize {
        self.entries.iter().map(|e| e.cache.nbytes()).sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The figures, the disk tier's left at 0.
    pub fn stats(&self) -> PromptCacheStats {
        let latest = self.entries.iter().max_by_key(|e| e.used).map_or(0, |e| e.cache.nbytes());
        PromptCacheStats {
            entries: self.entries.len(),
            bytes: self.nbytes(),
            latest_bytes: latest,
            limit_bytes: self.limit_bytes,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use mlx_rs::Array;

    use super::*;
    use crate::cache::{LayerCache, LayerKind};

    /// A cache of `kinds` that has been fed `ids` (one f32 per position and head dim 1).
    fn fed(kinds: &[LayerKind], ids: &[u32]) -> KvCache {
        let mut c = KvCache::new(kinds);
        let n = ids.len() as i32;
        let x = Array::from_slice(&vec![1.0f32; ids.len()], &[1, 1, n, 1]);
        for layer in c.layers_mut() {
            match layer {
                LayerCache::Recurrent(r) => r.advance(n),
                other => {
                    other.update_and_fetch(&x, &x).expect("write");
                }
            }
        }
        c.push_tokens(ids);
        c
    }

    const FULL: &[LayerKind] = &[LayerKind::Full];

    #[test]
    fn the_longest_usable_prefix_wins_exact_shorter_or_longer_trimmed() {
        let mut pc = PromptCache::default();
        pc.set_limit(usize::MAX);
        pc.put(Owner::default(), fed(FULL, &[1, 2, 3]), usize::MAX, false);
        pc.put(Owner::default(), fed(FULL, &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]), usize::MAX, false);
        // Shorter: a prompt that continues [1, 2, 3] reuses all three, and takes the entry.
        let (c, reused) = pc.take(Owner::default(), &[1, 2, 3, 4], KvFormat::Float).expect("a hit");
        assert_eq!((reused, c.offset(), pc.len()), (3, 3, 1));
        // Longer, parting early: a copy trimmed to the common prefix; the entry stays whole.
        let (c, reused) = pc.take(Owner::default(), &[7, 8, 9, 0], KvFormat::Float).expect("a hit");
        assert_eq!((reused, c.offset(), pc.len()), (3, 3, 1));
        let (kept, _) = pc
            .take(Owner::default(), &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], KvFormat::Float)
            .expect("hit");
        assert_eq!(kept.offset(), 12, "the entry it branched off was not cut");
        // Exact: one token is always left to feed.
        pc.put(Owner::default(), kept, usize::MAX, false);
        let (_, reused) =
            pc.take(Owner::default(), &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], KvFormat::Float).expect("hit");
        assert_eq!(reused, 11);
        // Nothing in common, or another KV format: a miss.
        pc.put(Owner::default(), fed(FULL, &[1, 2]), usize::MAX, false);
        assert!(pc.take(Owner::default(), &[5, 6], KvFormat::Float).is_none());
        assert!(pc.take(Owner::default(), &[1, 2, 3], KvFormat::bits_from_start(8)).is_none());
    }

    #[test]
    fn a_state_serves_only_the_partition_that_made_it() {
        let mut pc = PromptCache::default();
        pc.set_limit(usize::MAX);
        let secret = [1, 2, 3, 4, 5, 6];
        pc.put(Owner::session("private"), fed(FULL, &secret), usize::MAX, false);
        // Another chat, or the server, sending the chat's exact tokens: a miss,
        // so neither cached_tokens nor the first token's time tells them apart
        // from a wrong guess.
        assert!(pc.take(Owner::session("other"), &[1, 2, 3, 4, 5, 6, 7], KvFormat::Float).is_none());
        assert!(pc.take(Owner::default(), &[1, 2, 3, 4, 5, 6, 7], KvFormat::Float).is_none());
        // The server's state is not a chat's either, and a chat's put leaves it be.
        pc.put(Owner::default(), fed(FULL, &[9, 9, 9]), usize::MAX, false);
        assert!(pc.take(Owner::session("private"), &[9, 9, 9, 1], KvFormat::Float).is_none());
        pc.put(Owner::session("b"), fed(FULL, &[9, 9, 9, 1]), usize::MAX, false);
        assert_eq!(pc.len(), 3, "the server's prefix stays: it is not b's to replace");
        // Each still reuses its own.
        assert_eq!(
            pc.take(Owner::session("private"), &[1, 2, 3, 4, 5, 6, 7], KvFormat::Float).map(|(_, n)| n),
            Some(6)
        );
        assert_eq!(pc.take(Owner::default(), &[9, 9, 9, 2], KvFormat::Float).map(|(_, n)| n), Some(3));
    }

    #[test]
    fn a_tenants_state_serves_that_tenant_only() {
        let mut pc = PromptCache::default();
        pc.set_limit(usize::MAX);
        let alpha = Owner { session: None, tenant: Some("alpha") };
        let beta = Owner { session: None, tenant: Some("beta") };
        pc.put(alpha, fed(FULL, &[1, 2, 3, 4, 5]), usize::MAX, false);
        // Another key, no key, or a chat sending alpha's tokens: a miss.
        for other in [beta, Owner::default(), Owner::session("alpha")] {
            assert!(pc.take(other, &[1, 2, 3, 4, 5, 6], KvFormat::Float).is_none(), "{other:?}");
        }
        // Beta's longer state does not replace alpha's prefix, keyless or not.
        pc.put(beta, fed(FULL, &[1, 2, 3, 4, 5, 6]), usize::MAX, false);
        pc.put(Owner::default(), fed(FULL, &[1, 2, 3, 4, 5, 6, 7]), usize::MAX, false);
        assert_eq!(pc.len(), 3);
        assert_eq!(pc.take(alpha, &[1, 2, 3, 4, 5, 9], KvFormat::Float).map(|(_, n)| n), Some(5));
        assert_eq!(pc.take(beta, &[1, 2, 3, 4, 5, 6, 9], KvFormat::Float).map(|(_, n)| n), Some(6));
        // Both moved out; the keyless state stays. Within one tenant a longer
        // state replaces the prefix it extends, and leaves the keyless one be.
        assert_eq!(pc.len(), 1);
        pc.put(alpha, fed(FULL, &[1, 2, 3, 4, 5, 6, 7, 8]), usize::MAX, false);
        pc.put(alpha, fed(FULL, &[1, 2, 3, 4, 5, 6, 7, 8, 9]), usize::MAX, false);
        let kept: Vec<_> = pc.entries.iter().map(|e| (e.tenant.as_deref(), e.cache.offset())).collect();
        assert_eq!(kept, [(None, 7), (Some("alpha"), 9)]);
    }

    #[test]
    fn a_window_that_rotated_or_a_recurrent_state_is_never_cut_back_wrongly() {
        let mut pc = PromptCache::default();
        pc.set_limit(usize::MAX);
        let hybrid = [LayerKind::Full, LayerKind::Recurrent];
        pc.put(Owner::default(), fed(&hybrid, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]), usize::MAX, false);
        // A request that parts after 3 tokens would need the state at 3: it cannot have it.
        assert!(pc.take(Owner::default(), &[1, 2, 3, 0], KvFormat::Float).is_none());
        // One that continues the whole state can.
        let (_, reused) =
            pc.take(Owner::default(), &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], KvFormat::Float).expect("hit");
        assert_eq!(reused, 12);
    }

    #[test]
    fn only_the_latest_entry_may_exceed_the_allowance_and_the_oldest_go_first() {
        let mut pc = PromptCache::default();
        let one = fed(FULL, &[1]).nbytes();
        pc.set_limit(2 * one);
        for s in ["a", "b", "c", "d"] {
            let first = s.as_bytes()[0] as u32;
            let dropped = pc.put(Owner::session(s), fed(FULL, &[first]), usize::MAX, false);
            assert!(pc.nbytes() - pc.stats().latest_bytes <= 2 * one);
            if s == "d" {
                assert_eq!(dropped.iter().map(|e| e.session.as_deref()).collect::<Vec<_>>(), [Some("a")]);
            }
        }
        assert_eq!((pc.len(), pc.stats().evictions), (3, 1));
        assert!(pc.has_session("b") && !pc.has_session("a"));
        // Room made for a turn: everything but the latest may go.
        let dropped = pc.make_room(0);
        assert_eq!(dropped.len(), 2);
        assert!(pc.has_session("d") && pc.len() == 1);
    }

    #[test]
    fn a_sessions_new_state_replaces_its_old_one_and_subsumed_prefixes_go() {
        let mut pc = PromptCache::default();
        pc.set_limit(usize::MAX);
        pc.put(Owner::session("s"), fed(FULL, &[1, 2]), usize::MAX, false);
        pc.put(Owner::default(), fed(FULL, &[1, 2, 3]), usize::MAX, false);
        pc.put(Owner::session("s"), fed(FULL, &[9, 9]), usize::MAX, false);
        assert_eq!(pc.len(), 2, "s's first state gave way to its second");
        // A server entry that the new one extends is redundant.
        pc.put(Owner::default(), fed(FULL, &[1, 2, 3, 4]), usize::MAX, false);
        assert_eq!(pc.len(), 2);
        let (c, _) = pc.take(Owner::default(), &[1, 2, 3, 4, 5], KvFormat::Float).expect("hit");
        assert_eq!(c.offset(), 4);
        // Its own session continues its entry even with a longer unused tail.
        pc.put(Owner::session("t"), fed(FULL, &(0..40).collect::<Vec<_>>()), usize::MAX, false);
        let (c, reused) = pc.take(Owner::session("t"), &[0, 1, 2, 3, 99], KvFormat::Float).expect("hit");
        assert_eq!((reused, c.offset()), (4, 4));
        assert!(!pc.has_session("t"), "moved, not copied");
    }

    #[test]
    fn counters_say_how_often_and_how_much_was_reused() {
        let mut pc = PromptCache::default();
        pc.record(100, 0, Reuse::None);
        pc.record(120, 100, Reuse::Memory);
        pc.record(140, 120, Reuse::Disk);
        let s = pc.stats();
        assert_eq!((s.lookups, s.hits, s.disk_hits, s.prompt_tokens, s.reused_tokens), (3, 2, 1, 360, 220));
    }
}
