//! Digests and repair answers (see [`crate::lanes::repair`]): telling a random member which
//! versions this node stored lately, answering such a digest with the items its sender
//! lacks, and taking those items.
//!
//! Held apart because repair is independent of syncs, sharing with them only the chunk
//! format ([`super::chunks`]).

use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::{NodeId, RawId};
use crate::lanes::lock;
use crate::lanes::repair::{
    Digest, MAX_DIGEST_ENTRIES, MAX_REPAIR_CHUNKS, REPAIR_INTERVAL, REPAIR_SETTLE, REPAIR_WINDOW,
};
use crate::wire::session::Transmit;
use crate::wire::{Reader, WireError, KIND_DIGEST, KIND_REPAIR, MAX_MESSAGE_LEN};

use super::Driver;

use super::chunks::{read_chunk_header, read_entry, ChunkWriter, ENTRY_ITEM};

/// Senders whose last digest answer is remembered (for the one answer per half interval);
/// past it, those answered more than an interval ago are forgotten. Only those answered in
/// the last half interval matter, a handful at one digest per member per interval, so the
/// table is kept small: grown to thousands (every member, over a few minutes), it was a
/// large part of what a node of a big cluster holds.
const DIGEST_SENDERS_REMEMBERED: usize = 64;

impl Driver {
    /// Tells a random member which item versions this node stored lately (see
    /// [`crate::lanes::repair`]), and arms the next digest.
    pub(super) fn send_digest<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.stopped() || self.foca.num_members() == 0 {
            self.repair_armed = false;
            return;
        }
        self.timers.push(now + REPAIR_INTERVAL, TimerEvent::Repair);
        let Some(peer) = self.random_member() else {
            return;
        };
        let (versions, window) =
            lock(&self.store).recent_versions(now, REPAIR_WINDOW, MAX_DIGEST_ENTRIES);
        let mut message = Vec::with_capacity(MAX_MESSAGE_LEN);
        message.push(KIND_DIGEST);
        self.foca.identity().encode(&mut message);
        Digest::new(self.rng.random(), window, &versions).encode(&mut message);
        self.stats.digests_sent += 1;
        self.session.send(now, peer, &mut message, out);
    }

    /// Answers a digest with the versions this node stored in its window (the last quarter
    /// of it left out: the sender may have stored those a little earlier than this node),
    /// held long enough that push gossip's copies would have arrived, which it lacks.
    pub(super) fn handle_digest<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: &NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        RawId::decode(&mut r)?; // the sender, known from the envelope: read, not interned
        let digest = Digest::decode(&mut r)?;
        let from = sender.site_addr();
        if let Some(&at) = self.digests_answered_at.get(&from) {
            if now < at + REPAIR_INTERVAL / 2 {
                self.stats.digests_held_back += 1;
                return Ok(());
            }
        }
        if self.digests_answered_at.len() >= DIGEST_SENDERS_REMEMBERED {
            let stale = now.saturating_sub(REPAIR_INTERVAL);
            self.digests_answered_at.retain(|_, at| *at >= stale);
        }
        self.digests_answered_at.insert(from, now);
        let me = self.foca.identity().clone();
        let mut chunks = ChunkWriter::new(KIND_REPAIR, self.rng.random(), &me, 0);
        let oldest = digest.window() - digest.window() / 4;
        let mut entry = Vec::with_capacity(MAX_MESSAGE_LEN);
        let sent = lock(&self.store).export_missing(
            now,
            REPAIR_SETTLE,
            oldest,
            &digest,
            &mut entry,
            |_, item| chunks.push(ENTRY_ITEM, item, MAX_REPAIR_CHUNKS),
        );
        if sent == 0 {
            return Ok(());
        }
        self.stats.digests_answered += 1;
        self.stats.repair_items_sent += sent as u64;
        for mut chunk in chunks.finish(&[]) {
            self.session
                .send(now, sender.socket_addr(), &mut chunk, out);
        }
        Ok(())
    }

    /// Takes the items of an answer to a digest (any chunk alone: they are independent).
    pub(super) fn handle_repair(&mut self, body: &[u8]) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        read_chunk_header(&mut r)?;
        let mut items = Vec::new();
        while !r.is_empty() {
            let (tag, body) = read_entry(&mut r)?;
            if tag != ENTRY_ITEM {
                return Err(WireError::BadEntry(tag));
            }
            items.push(body);
        }
        let mut store = lock(&self.store);
        for item in items {
            if store.accept(item, true).is_some() {
                self.stats.items_repaired += 1;
            }
        }
        Ok(())
    }
}
