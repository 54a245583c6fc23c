//! What a sync carries: a request's entries saying what it asks (a span of the walk, its
//! bound and form, or named items), this node itself and its members, and items (or
//! their names and versions) with each origin's certificate chain before its first.
//!
//! Held apart from [`super::sync`], which starts syncs and takes their chunks, because
//! the forms of what is sent, and which peer may be sent which, are one concern.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{Member, State};
use rand::Rng;

use crate::identity::auth::FINGERPRINT_LEN;
use crate::lanes::{lock, ExportEnd, ExportForm, ItemName, WalkLanes};
use crate::wire::session::Transmit;
use crate::wire::versions::{BOUNDED_WALK_SINCE, EARLIER_CERTIFICATES_SINCE};
use crate::wire::{
    encode_member, state_byte, KIND_SYNC_REQUEST, KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN, STATE_LEFT,
};

use super::chunks::{
    encode_certificate_entry, encode_walk_end, ChunkWriter, ENTRY_CERTIFICATE, ENTRY_HEADS,
    ENTRY_ITEM, ENTRY_MEMBER, ENTRY_RESUME, ENTRY_UNTIL, ENTRY_VERSION, ENTRY_VERSIONS, ENTRY_VIEW,
    ENTRY_WANT, WALK_END_ROOM,
};
use super::view::ViewSent;
use super::walk::CatchUp;
use super::{Driver, MAX_SYNC_CHUNKS, SIGNED_ANSWER_CHUNKS};

/// A stretch of the shared name order a sync's answer walks: after `after` (None: from the
/// first name), before `until` (None: as far as the answer's budget goes; sent only to a
/// peer that speaks [`BOUNDED_WALK_SINCE`]), of the `lanes`, in the `form` asked (the
/// versions form only to such a peer too).
#[derive(Clone, Debug)]
pub(super) struct WalkSpan {
    pub(super) after: Option<ItemName>,
    pub(super) until: Option<ItemName>,
    pub(super) lanes: WalkLanes,
    pub(super) form: ExportForm,
}

impl WalkSpan {
    /// Every lane's items, after `after` and before `until`.
    pub(super) fn items(after: Option<ItemName>, until: Option<ItemName>) -> WalkSpan {
        WalkSpan {
            after,
            until,
            lanes: WalkLanes::All,
            form: ExportForm::Items,
        }
    }
}

/// What [`Driver::send_state`] sends: a request asking for a span or for named items, or
/// the answer to one.
pub(super) enum SyncForm {
    Request(WalkSpan),
    /// Named items (protocol 3 on): at most what one chunk's [`ENTRY_WANT`]s hold.
    Want(Vec<ItemName>),
    /// The answer to a request, with what it says of this node's view if the request
    /// carried a view digest.
    Answer(WalkSpan, Option<ViewSent>),
    Named(Vec<ItemName>),
}

/// The items an answer carries.
enum Items<'a> {
    Walk(&'a WalkSpan),
    Named(&'a [ItemName]),
}

/// The entries that say what a request asks: where its answer's walk resumes, and what
/// bounds and forms it, or the names it wants.
fn write_asked(form: &SyncForm, chunks: &mut ChunkWriter, entry: &mut Vec<u8>) {
    match form {
        SyncForm::Request(asked) => {
            entry.clear();
            if let Some(name) = &asked.after {
                name.encode(entry);
            }
            chunks.push(ENTRY_RESUME, entry, MAX_SYNC_CHUNKS);
            if asked.lanes == WalkLanes::Heads {
                chunks.push(ENTRY_HEADS, &[], MAX_SYNC_CHUNKS);
            }
            if let Some(name) = &asked.until {
                entry.clear();
                name.encode(entry);
                chunks.push(ENTRY_UNTIL, entry, MAX_SYNC_CHUNKS);
            }
            if asked.form == ExportForm::Versions {
                chunks.push(ENTRY_VERSIONS, &[], MAX_SYNC_CHUNKS);
            }
        }
        SyncForm::Want(names) => {
            for name in names {
                entry.clear();
                name.encode(entry);
                chunks.push(ENTRY_WANT, entry, 1);
            }
        }
        SyncForm::Answer(..) | SyncForm::Named(_) => {}
    }
}

/// Member entries fill at most this many chunks of a sync (the rest of the view is covered
/// over several syncs), so items always have room.
pub(super) const MAX_MEMBER_CHUNKS: usize = MAX_SYNC_CHUNKS / 2;
impl Driver {
    /// Whether the peer at `peer` speaks protocol `since` or later (unknown until its
    /// `HELLO` was heard: then it is sent only what every version reads).
    pub(super) fn peer_speaks(&self, peer: SocketAddr, since: u8) -> bool {
        self.session
            .version_at(peer)
            .is_some_and(|version| version >= since)
    }

    /// Whether the peer at `peer` answers a sync request bounded before a name (it speaks
    /// [`BOUNDED_WALK_SINCE`]).
    pub(super) fn bounds_walks(&self, peer: SocketAddr) -> bool {
        self.peer_speaks(peer, BOUNDED_WALK_SINCE)
    }

    /// Sends this node's view, chunked: its digest (to a peer that reads one), itself,
    /// members (starting at a random one, so a view larger than [`MAX_MEMBER_CHUNKS`] is
    /// covered over several syncs; none if the views agree, see [`super::view`]) and items,
    /// each origin's certificate chain before its first item. A request says the stretch
    /// of the name order its answer should walk (the walk it moves on) and carries this
    /// node's own items from where the last request stopped (none while catching up: it
    /// asks, the answers teach; none with a heads walk's request). An answer carries the
    /// items of the stretch the request gave (or their names and versions), and says in
    /// its first chunk where they ended. A request for named items, and its answer, carry
    /// no members but the sender and no walk.
    pub(super) fn send_state<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sync_id: u32,
        peer: SocketAddr,
        form: SyncForm,
        out: &mut O,
    ) {
        let me = self.foca.identity().clone();
        let max_chunks = if self.session.awaits_session(now, peer) {
            SIGNED_ANSWER_CHUNKS
        } else {
            MAX_SYNC_CHUNKS
        };
        let (kind, reserve) = match form {
            SyncForm::Request(_) | SyncForm::Want(_) => (KIND_SYNC_REQUEST, 0),
            SyncForm::Answer(..) | SyncForm::Named(_) => (KIND_SYNC_RESPONSE, WALK_END_ROOM),
        };
        let view = match &form {
            SyncForm::Request(_) => self.request_view(peer),
            SyncForm::Answer(_, view) => *view,
            SyncForm::Want(_) | SyncForm::Named(_) => None,
        };
        let mut chunks = ChunkWriter::new(kind, sync_id, &me, reserve);
        let mut entry = Vec::with_capacity(MAX_MESSAGE_LEN);
        write_asked(&form, &mut chunks, &mut entry);
        if let Some(view) = view {
            chunks.push(ENTRY_VIEW, &view.digest.to_be_bytes(), MAX_SYNC_CHUNKS);
        }
        entry.clear();
        encode_member(
            &Member::new(me, 0, State::Alive),
            state_byte(State::Alive),
            &mut entry,
        );
        chunks.push(ENTRY_MEMBER, &entry, MAX_SYNC_CHUNKS);
        let members_left_out = view.is_some_and(|view| view.members_left_out);
        if members_left_out {
            self.stats.sync_members_left_out += 1;
        } else if !matches!(form, SyncForm::Want(_) | SyncForm::Named(_)) {
            self.write_members(&mut chunks, &mut entry);
        }

        let own_items_held_back = self.catch_up != CatchUp::Done
            || matches!(&form, SyncForm::Request(asked) if asked.lanes == WalkLanes::Heads);
        let end = match &form {
            SyncForm::Want(_) => None,
            SyncForm::Request(_) if own_items_held_back => None,
            // A request's own items walk on from where the last one stopped.
            SyncForm::Request(_) => {
                let own = WalkSpan {
                    after: self.push_resume.clone(),
                    until: None,
                    lanes: WalkLanes::All,
                    form: ExportForm::Items,
                };
                Some(self.write_items(peer, Items::Walk(&own), max_chunks, &mut chunks))
            }
            SyncForm::Answer(asked, _) => {
                Some(self.write_items(peer, Items::Walk(asked), max_chunks, &mut chunks))
            }
            SyncForm::Named(names) => {
                Some(self.write_items(peer, Items::Named(names), max_chunks, &mut chunks))
            }
        };

        let mut walk_end = Vec::new();
        match (
            matches!(form, SyncForm::Answer(..) | SyncForm::Named(_)),
            end,
        ) {
            (true, Some(end)) => encode_walk_end(&end, &mut walk_end),
            (false, Some(end)) => {
                self.push_resume = match end {
                    ExportEnd::Complete => None,
                    ExportEnd::Stopped { resume, .. } => resume,
                }
            }
            (_, None) => {}
        }
        for mut chunk in chunks.finish(&walk_end) {
            self.stats.sync_chunks_sent += 1;
            self.session.send(now, peer, &mut chunk, out);
        }
    }

    /// Members, from a random one on, in at most [`MAX_MEMBER_CHUNKS`] chunks.
    fn write_members(&mut self, chunks: &mut ChunkWriter, entry: &mut Vec<u8>) {
        let total = self.foca.iter_membership_state().len();
        let start = if total == 0 {
            0
        } else {
            self.rng.random_range(0..total)
        };
        let ordered = self
            .foca
            .iter_membership_state()
            .skip(start)
            .chain(self.foca.iter_membership_state().take(start));
        for member in ordered {
            entry.clear();
            let state = if member.state() == State::Down && self.is_left(member.id()) {
                STATE_LEFT
            } else {
                state_byte(member.state())
            };
            encode_member(member, state, entry);
            if !chunks.push(ENTRY_MEMBER, entry, MAX_MEMBER_CHUNKS) {
                break;
            }
        }
    }

    /// Held items for `peer` (a span of the walk, or named ones), each origin's
    /// certificate chain before its first item, until `max_chunks` are full; in the
    /// versions form, names and versions alone. Returns where the walk ended (named ones:
    /// complete).
    fn write_items(
        &self,
        peer: SocketAddr,
        items: Items<'_>,
        max_chunks: usize,
        chunks: &mut ChunkWriter,
    ) -> ExportEnd {
        let session = &self.session;
        // Earlier certificates only to peers that keep a site's newest certificate as
        // its current one whatever the order they arrive in (protocol 3): an older
        // peer would take the earlier one as current.
        let earlier_ok = self.peer_speaks(peer, EARLIER_CERTIFICATES_SINCE);
        let versions = matches!(items, Items::Walk(asked) if asked.form == ExportForm::Versions);
        let mut chain_entry = Vec::new();
        let mut last_origin: Option<Arc<str>> = None;
        let mut earlier_in_chunk: Option<(Arc<str>, [u8; FINGERPRINT_LEN], usize)> = None;
        let mut put = |origin: &Arc<str>, item: &[u8], earlier: Option<[u8; FINGERPRINT_LEN]>| {
            if versions {
                return chunks.push(ENTRY_VERSION, item, max_chunks);
            }
            if last_origin.as_ref() != Some(origin) {
                last_origin = Some(origin.clone());
                if let Some(chain) = session.certificate_chain(origin) {
                    encode_certificate_entry(origin, chain, &mut chain_entry);
                    if !chunks.push(ENTRY_CERTIFICATE, &chain_entry, max_chunks) {
                        return false;
                    }
                }
            }
            let vouching = earlier.filter(|_| earlier_ok).and_then(|fingerprint| {
                let chain = session.chain_of(origin, &fingerprint)?;
                Some((fingerprint, chain))
            });
            if let Some((fingerprint, chain)) = vouching {
                let written = (origin.clone(), fingerprint, chunks.len());
                if earlier_in_chunk.as_ref() != Some(&written) {
                    encode_certificate_entry(origin, chain, &mut chain_entry);
                    let pair = (ENTRY_CERTIFICATE, chain_entry.as_slice());
                    if chunks.push_pair(pair, (ENTRY_ITEM, item), max_chunks) {
                        earlier_in_chunk = Some((origin.clone(), fingerprint, chunks.len()));
                        return true;
                    }
                }
            }
            chunks.push(ENTRY_ITEM, item, max_chunks)
        };
        let store = lock(&self.store);
        let mut scratch = Vec::with_capacity(MAX_MESSAGE_LEN);
        match items {
            Items::Walk(asked) => store.export(
                (asked.after.as_ref(), asked.until.as_ref()),
                asked.lanes,
                asked.form,
                &mut scratch,
                put,
            ),
            Items::Named(names) => {
                store.export_named(names, &mut scratch, &mut put);
                ExportEnd::Complete
            }
        }
    }
}
