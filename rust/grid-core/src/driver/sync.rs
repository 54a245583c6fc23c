//! Push/pull syncs: starting them on the push/pull pace, and taking the chunks of a sync
//! (answering a request with what [`super::carry`] writes; the walk an answer moves on is
//! [`super::walk`]'s).
//!
//! Held apart because what keeps a converged sync O(N) matters only to syncs.

use std::net::SocketAddr;
use std::time::Duration;

use foca::{Member, State};
use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::keys::Role;
use crate::lanes::{lock, ExportForm, WalkLanes};
use crate::wire::session::Transmit;
use crate::wire::sites::Learned;
use crate::wire::{decode_member, Reader, WireError, KIND_SYNC_REQUEST, KIND_SYNC_RESPONSE};

use super::carry::{SyncForm, WalkSpan};
use super::chunks::{
    decode_certificate_entry, decode_resume, decode_version_entry, decode_view_entry,
    decode_walk_end, read_chunk_header, read_entry, ChunkHeader, ENTRY_CERTIFICATE, ENTRY_HEADS,
    ENTRY_ITEM, ENTRY_MEMBER, ENTRY_RESUME, ENTRY_UNTIL, ENTRY_VERSION, ENTRY_VERSIONS, ENTRY_VIEW,
    ENTRY_WALK_END, ENTRY_WANT,
};
use super::known::RawEntry;
use super::positions::Positions;
use super::swim::Screened;
use super::{Driver, GridFoca};

/// Picks of a random entry of foca's list before a random member is found by counting
/// through the active ones (see [`Driver::random_member_id`]).
const PICK_TRIES: usize = 8;

/// A member entry, read raw, if it says the member is alive (and is nothing more than
/// that).
fn alive_entry(entry: &[u8]) -> Option<RawEntry<'_>> {
    RawEntry::read(entry).filter(|raw| raw.state == State::Alive && raw.len == entry.len())
}

/// Whether foca holds exactly `member` (identity, incarnation and state), found at the
/// position the driver knows for it: applying it would change nothing. A converged peer
/// sends mostly what foca already has, and every apply is a linear scan of foca's member
/// list, so such entries are not applied: a sync costs O(N) instead of O(N²). An entry
/// without a known position is applied, and foca decides, as it would have anyway.
fn holds_exactly(foca: &GridFoca, positions: &mut Positions, member: &Member<NodeId>) -> bool {
    positions
        .held(foca.iter_membership_state(), &member.id().site_addr())
        .is_some_and(|known| {
            known.id() == member.id()
                && known.incarnation() == member.incarnation()
                && known.state() == member.state()
        })
}

impl Driver {
    /// For each member entry of a sync chunk, in order: whether it says what foca holds
    /// exactly of an alive identity that may be heard (the sender, or the live holder of
    /// its site). Such an entry could change or set off nothing, so it is passed over
    /// before its identity is interned or screened, which is most of what a sync between
    /// converged members costs; any other entry (and one that does not decode) takes the
    /// full path. Checked in passes over the whole chunk (read the entries, find their
    /// positions, read foca's list, find their sites' holders) rather than entry by entry,
    /// so that the reads of one entry, which mostly miss every cache in a large cluster,
    /// need not wait for the previous entry's.
    fn members_held_alive(&mut self, entries: &[u8], sender: &NodeId) -> Vec<bool> {
        let mut raws = Vec::new();
        let mut r = Reader::new(entries);
        while let Ok((tag, body)) = read_entry(&mut r) {
            if tag == ENTRY_MEMBER {
                raws.push(alive_entry(body));
            }
        }
        let Driver {
            foca,
            positions,
            holders,
            ..
        } = self;
        let keys: Vec<_> = raws
            .iter()
            .map(|raw| raw.as_ref().map(|raw| raw.id.site_addr()))
            .collect();
        let held = positions.held_all(|| foca.iter_membership_state(), &keys);
        let known: Vec<_> = raws
            .iter()
            .zip(held)
            .map(|(raw, known)| {
                let (raw, known) = (raw.as_ref()?, known?);
                (known.state() == State::Alive
                    && known.incarnation() == raw.incarnation
                    && known.id().is_raw(&raw.id))
                .then_some(known)
            })
            .collect();
        known
            .into_iter()
            .map(|known| {
                known.is_some_and(|known| known.id() == sender || holders.holds(known.id()))
            })
            .collect()
    }

    pub(super) fn push_pull<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let count = self.foca.num_members();
        if self.stopped() || count == 0 {
            self.push_pull_armed = false;
            return;
        }
        self.tidy_earlier_certificates(now);
        self.ask_for_waiting_keys(now, true, out);
        if let Some(peer) = self.random_member() {
            self.start_sync(now, peer, out);
        }
        let period = self.config.push_pull_period(count + 1);
        self.timers.push(now + period, TimerEvent::PushPull);
    }

    pub(super) fn random_member(&mut self) -> Option<SocketAddr> {
        self.random_member_entry()
            .map(|member| member.id().socket_addr())
    }

    pub(super) fn random_member_id(&mut self) -> Option<NodeId> {
        self.random_member_entry().map(|member| member.id().clone())
    }

    /// A random active member of foca's list, borrowed: an address read from it takes no
    /// reference count on the identity (whose place every node's list shares).
    fn random_member_entry(&mut self) -> Option<&Member<NodeId>> {
        let count = self.foca.num_members();
        if count == 0 {
            return None;
        }
        let held = self.foca.iter_membership_state().len();
        // foca's list is read by position in O(1). When every member it holds is active
        // (the usual case) the pick is any entry; otherwise entries are picked until an
        // active one comes up, which is as uniform over the active ones and, with a few
        // members held down, nearly always as quick (counting through the active ones
        // cost O(N) for every digest and sync of a large cluster). Past a few tries (most
        // held down) it counts through them after all.
        let tries = if held == count { 1 } else { PICK_TRIES };
        for _ in 0..tries {
            let pick = self.rng.random_range(0..held);
            let member = self.foca.iter_membership_state().nth(pick);
            if member.is_some_and(|m| m.state() != State::Down) {
                return member;
            }
        }
        let pick = self.rng.random_range(0..count);
        self.foca.iter_members().nth(pick)
    }

    pub(super) fn handle_sync<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        kind: u8,
        sender: &NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        // Decode the whole chunk before applying any of it.
        let mut r = Reader::new(body);
        let ChunkHeader {
            id: sync_id,
            index,
            count,
        } = read_chunk_header(&mut r)?;
        let sender = sender.clone();
        let mut loud = Vec::new();
        let mut quiet = Vec::new();
        let mut left = Vec::new();
        let mut items = Vec::new();
        let mut certificates = Vec::new();
        let mut resume = None;
        let mut until = None;
        let mut walked = WalkLanes::All;
        let mut form = ExportForm::Items;
        let mut wants = Vec::new();
        let mut versions = Vec::new();
        let mut version_bodies = Vec::new();
        let mut walk_end = None;
        let mut view = None;
        let mut known = 0;
        self.positions.refresh(self.foca.iter_membership_state());
        let held_alive = self.members_held_alive(r.unread(), &sender);
        let mut members = held_alive.into_iter();
        while !r.is_empty() {
            let (tag, body) = read_entry(&mut r)?;
            match tag {
                ENTRY_MEMBER if members.next().unwrap_or(false) => known += 1,
                ENTRY_MEMBER => {
                    let mut er = Reader::new(body);
                    let (member, mut is_left) = decode_member(&mut er, &self.interner, true)?;
                    if !er.is_empty() {
                        return Err(WireError::TrailingBytes);
                    }
                    let member = if member.id() == &sender {
                        member
                    } else {
                        match self.screen_member(now, member, out) {
                            Screened::Apply(member) => member,
                            Screened::AsSuspect(member) => {
                                is_left = false;
                                member
                            }
                            Screened::Drop => continue,
                        }
                    };
                    if is_left {
                        left.push(member.id().clone());
                    }
                    // News about the sender itself and about failures is re-gossiped;
                    // the liveness of third parties is theirs to spread.
                    if member.id() == &sender || member.state() != State::Alive {
                        loud.push(member);
                    } else {
                        quiet.push(member);
                    }
                }
                ENTRY_ITEM => items.push(body),
                ENTRY_CERTIFICATE => certificates.push(decode_certificate_entry(body)?),
                ENTRY_RESUME if kind == KIND_SYNC_REQUEST && index == 0 && resume.is_none() => {
                    resume = Some(decode_resume(body, &self.interner)?);
                }
                ENTRY_HEADS if kind == KIND_SYNC_REQUEST && index == 0 && body.is_empty() => {
                    walked = WalkLanes::Heads;
                }
                ENTRY_UNTIL if kind == KIND_SYNC_REQUEST && index == 0 && until.is_none() => {
                    let bound = decode_resume(body, &self.interner)?;
                    until = Some(bound.ok_or(WireError::BadEntry(ENTRY_UNTIL))?);
                }
                ENTRY_VERSIONS if kind == KIND_SYNC_REQUEST && index == 0 && body.is_empty() => {
                    form = ExportForm::Versions;
                }
                // As many as one datagram holds: a few hundred lookups at most.
                ENTRY_WANT if kind == KIND_SYNC_REQUEST && index == 0 => {
                    let name = decode_resume(body, &self.interner)?;
                    wants.push(name.ok_or(WireError::BadEntry(ENTRY_WANT))?);
                }
                ENTRY_VERSION if kind == KIND_SYNC_RESPONSE => {
                    versions.push(decode_version_entry(body, &self.interner)?);
                    version_bodies.push(body);
                }
                ENTRY_VIEW if index == 0 && view.is_none() => {
                    view = Some(decode_view_entry(body)?);
                }
                ENTRY_WALK_END
                    if kind == KIND_SYNC_RESPONSE && index == 0 && walk_end.is_none() =>
                {
                    walk_end = Some(decode_walk_end(body, &self.interner)?);
                }
                other => return Err(WireError::BadEntry(other)),
            }
        }
        self.stats.sync_chunks_received += 1;
        for id in &left {
            self.remember_left(id);
        }
        let Driver {
            foca, positions, ..
        } = self;
        let received = loud.len() + quiet.len();
        loud.retain(|member| !holds_exactly(foca, positions, member));
        quiet.retain(|member| !holds_exactly(foca, positions, member));
        self.stats.sync_entries_known += (known + received - loud.len() - quiet.len()) as u64;
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(loud.into_iter(), true, rt)
        });
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(quiet.into_iter(), false, rt)
        });
        for (site, chain) in certificates {
            let site = self.interner.intern(site);
            if let Some((key, learned)) = self.session.learn_certificate(now, &site, &chain) {
                let role = if learned == Learned::Current {
                    Role::Current
                } else {
                    Role::Earlier
                };
                lock(&self.store).trust_origin(&site, key, role);
            }
        }
        {
            let mut store = lock(&self.store);
            for item in &items {
                store.accept(item, true);
            }
        }
        // Compared once the chunk's members are applied: the answer says the view as it is.
        let view = view.map(|theirs| self.hear_view(theirs));
        if index == 0 {
            if kind == KIND_SYNC_REQUEST {
                self.stats.syncs_served += 1;
                let answer = if wants.is_empty() {
                    let asked = WalkSpan {
                        after: resume.flatten(),
                        until,
                        lanes: walked,
                        form,
                    };
                    SyncForm::Answer(asked, view)
                } else {
                    SyncForm::Named(wants)
                };
                self.send_state(now, sync_id, sender.socket_addr(), answer, out);
            } else {
                self.stats.syncs_completed += 1;
            }
        }
        if kind == KIND_SYNC_RESPONSE && self.is_heads_sync(sync_id) {
            if let Some(end) = walk_end {
                self.follow_heads(now, end);
            }
            return Ok(());
        }
        if kind == KIND_SYNC_RESPONSE {
            if !versions.is_empty() && self.walks_sync(sync_id) {
                self.want_newer(now, &sender, &versions, out);
            }
            // A check round's answer walks by the names of its versions.
            let walked = if version_bodies.is_empty() {
                &items
            } else {
                &version_bodies
            };
            let part = (sync_id, index, count);
            self.take_walk_chunk(now, part, walked, walk_end, &sender, out);
        }
        Ok(())
    }
}
