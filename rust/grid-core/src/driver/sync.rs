//! Push/pull syncs: starting them, answering them with this node's view (members and a
//! stretch of the item store), taking the chunks of an answer, and the walk through
//! peers' stores that syncs resume from, including catching up part after part.
//!
//! Held apart because a sync's state (the walk, the answer being received, what keeps a
//! converged sync O(N)) matters only to syncs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{Member, State};
use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::auth::FINGERPRINT_LEN;
use crate::identity::{Interner, NodeId};
use crate::lanes::keys::Role;
use crate::lanes::{lock, ExportEnd, ItemName, WalkLanes};
use crate::wire::session::Transmit;
use crate::wire::sites::Learned;
use crate::wire::versions::EARLIER_CERTIFICATES_SINCE;
use crate::wire::{
    decode_member, encode_member, state_byte, Reader, WireError, KIND_SYNC_REQUEST,
    KIND_SYNC_RESPONSE, MAX_MESSAGE_LEN, STATE_LEFT,
};

use super::{
    Driver, GridFoca, CATCH_UP_PAUSE, MAX_CATCH_UP_ROUNDS, MAX_SYNC_CHUNKS, SYNC_ANSWER_WAIT,
};

use super::chunks::{
    decode_certificate_entry, decode_resume, decode_walk_end, encode_certificate_entry,
    encode_walk_end, read_chunk_header, read_entry, ChunkHeader, ChunkWriter, ENTRY_CERTIFICATE,
    ENTRY_HEADS, ENTRY_ITEM, ENTRY_MEMBER, ENTRY_RESUME, ENTRY_WALK_END, WALK_END_ROOM,
};
use super::positions::Positions;
use super::swim::Screened;

/// A sync answer that brings this many names a node did not hold makes it catch up again.
const BEHIND_AFTER_NAMES: usize = 64;
/// Member entries fill at most this many chunks of a sync (the rest of the view is covered
/// over several syncs), so items always have room.
const MAX_MEMBER_CHUNKS: usize = MAX_SYNC_CHUNKS / 2;
/// Whether a node walks peers' stores part after part, one part every [`CATCH_UP_PAUSE`],
/// until a walk goes round once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CatchUp {
    /// Caught up: syncs keep the push/pull pace.
    Done,
    /// To catch up, from the next sync on (a new node, or one that was alone).
    Due,
    /// Walking: each answer's end asks for the next part.
    Walking,
}

/// The answer to this node's last sync, as its chunks arrive. Chunks carry items in walk
/// order, so the chunks received from the first on, without a gap, cover one stretch of
/// the walk: when some chunk is lost, the next sync resumes after that stretch.
pub(in crate::driver) struct PullAnswer {
    sync_id: u32,
    /// Where the answer was asked to start.
    start: Option<ItemName>,
    chunks: Vec<Option<ChunkItems>>,
    missing: usize,
    end: Option<ExportEnd>,
}

/// The items of one received chunk, by name: its first and last, and whether the walk
/// wrapped (went past the last name and on from the first) within it.
#[derive(Clone, Default)]
pub(super) struct ChunkItems {
    first: Option<ItemName>,
    last: Option<ItemName>,
    wrapped: bool,
}

/// How far a sync's answer took the walk.
pub(super) enum WalkStep {
    /// Whole: what the answer said.
    Ended(ExportEnd),
    /// Some chunk is missing: resume after this name (None: where the answer started);
    /// `wrapped` if the stretch received went past the last name.
    Partial {
        resume: Option<ItemName>,
        wrapped: bool,
    },
}

impl PullAnswer {
    pub(super) fn new(sync_id: u32, start: Option<ItemName>, count: u16) -> PullAnswer {
        PullAnswer {
            sync_id,
            start,
            chunks: vec![None; usize::from(count)],
            missing: usize::from(count),
            end: None,
        }
    }

    /// Notes chunk `index`; true once every chunk is in.
    pub(super) fn note(&mut self, index: u16, items: ChunkItems, end: Option<ExportEnd>) -> bool {
        if let Some(slot) = self.chunks.get_mut(usize::from(index)) {
            if slot.is_none() {
                *slot = Some(items);
                self.missing -= 1;
            }
        }
        if end.is_some() {
            self.end = end;
        }
        self.missing == 0 && self.end.is_some()
    }

    /// How far the walk got: the answer's own end when it is whole, else the stretch
    /// covered by the chunks received from the first without a gap.
    pub(super) fn step(&mut self) -> WalkStep {
        if self.missing == 0 {
            if let Some(end) = self.end.take() {
                return WalkStep::Ended(end);
            }
        }
        let mut resume = self.start.clone();
        let mut wrapped = false;
        let mut previous = self.start.clone();
        for chunk in self.chunks.iter().map_while(Option::as_ref) {
            if let Some(first) = &chunk.first {
                wrapped |= chunk.wrapped || previous.as_ref().is_some_and(|p| first <= p);
                previous = chunk.last.clone();
                resume = chunk.last.clone();
            }
        }
        WalkStep::Partial { resume, wrapped }
    }
}

impl ChunkItems {
    fn of(items: &[&[u8]], interner: &Interner) -> ChunkItems {
        let mut names = items
            .iter()
            .filter_map(|item| ItemName::decode(&mut Reader::new(item), interner).ok());
        let Some(first) = names.next() else {
            return ChunkItems::default();
        };
        let mut last = first.clone();
        let mut wrapped = false;
        for name in names {
            wrapped |= name <= last;
            last = name;
        }
        ChunkItems {
            first: Some(first),
            last: Some(last),
            wrapped,
        }
    }
}

/// Whether foca holds exactly `member` (identity, incarnation and state), found at the
/// position the driver knows for it: applying it would change nothing. A converged peer
/// sends mostly what foca already has, and every apply is a linear scan of foca's member
/// list, so such entries are not applied: a sync costs O(N) instead of O(N²). An entry
/// without a known position is applied, and foca decides, as it would have anyway.
fn holds_exactly(foca: &GridFoca, positions: &Positions, member: &Member<NodeId>) -> bool {
    positions
        .hint(&member.id().site_addr())
        .and_then(|at| foca.iter_membership_state().nth(at))
        .is_some_and(|known| {
            known.id() == member.id()
                && known.incarnation() == member.incarnation()
                && known.state() == member.state()
        })
}

impl Driver {
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

    /// The answer to sync `sync_id` should be whole by now. If it is not, the walk moves
    /// on only past the chunks received from the first without a gap, and the rest is
    /// asked for (from any member: they all walk in the same order) at once while catching
    /// up, or by the next push/pull otherwise.
    pub(super) fn answer_due<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sync_id: u32,
        out: &mut O,
    ) {
        if self.heads_answer_due(sync_id)
            || self.stretch_answer_due(now, sync_id)
            || self.pull_sync != Some(sync_id)
        {
            return;
        }
        self.stats.syncs_incomplete += 1;
        self.pull_sync = None;
        if let Some(WalkStep::Partial { resume, wrapped }) =
            self.pull_answer.take().map(|mut answer| answer.step())
        {
            self.pull_resume = resume;
            if wrapped {
                self.walk_went_round();
            }
        }
        if self.catch_up == CatchUp::Walking && !self.stopped() {
            if let Some(peer) = self.random_member() {
                self.stats.catch_up_syncs += 1;
                self.start_sync(now, peer, out);
            }
        }
    }

    pub(super) fn random_member(&mut self) -> Option<SocketAddr> {
        self.random_member_id().map(|id| id.socket_addr())
    }

    pub(super) fn random_member_id(&mut self) -> Option<NodeId> {
        let count = self.foca.num_members();
        if count == 0 {
            return None;
        }
        let pick = self.rng.random_range(0..count);
        // When every member foca holds is active (the usual case) the pick-th active one is
        // the pick-th entry, read in O(1); otherwise count through the active ones.
        let member = if self.foca.iter_membership_state().len() == count {
            self.foca.iter_membership_state().nth(pick)
        } else {
            self.foca.iter_members().nth(pick)
        };
        member.map(|m| m.id().clone())
    }

    pub(super) fn start_sync<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        peer: SocketAddr,
        out: &mut O,
    ) {
        let sync_id = self.rng.random();
        self.stats.syncs_started += 1;
        self.pull_sync = Some(sync_id);
        // A sync started meanwhile (push/pull) moves the walk on itself.
        self.round_waits = None;
        self.pull_held_at_start = lock(&self.store).len();
        self.pull_answer = None;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        if self.catch_up == CatchUp::Due {
            self.start_catching_up();
        }
        let resume = self.pull_resume.clone();
        self.send_state(
            now,
            KIND_SYNC_REQUEST,
            sync_id,
            peer,
            None,
            resume,
            WalkLanes::All,
            out,
        );
    }

    /// An answer to this node's last sync said where its items ended: the next sync
    /// resumes there. While catching up, the next part is asked for soon, from the same
    /// peer, until the walk has gone round (see [`Driver::walk_went_round`]). An answer
    /// that brought at least [`BEHIND_AFTER_NAMES`] names this node did not hold shows it
    /// is behind (a mesh started together, or a partition healed): it catches up. A store
    /// larger than one answer is walked for every site's heads beside, from another peer
    /// (see [`super::heads`]), and in its first round, later stretches of it from others
    /// (see [`super::stretches`]): the walk skips each stretch another walk covers, and its
    /// round is over once they are done too.
    fn follow_walk<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        end: ExportEnd,
        peer: &NodeId,
        out: &mut O,
    ) {
        self.pull_sync = None;
        self.pull_answer = None;
        let brought = lock(&self.store)
            .len()
            .saturating_sub(self.pull_held_at_start);
        if self.catch_up == CatchUp::Done && brought >= BEHIND_AFTER_NAMES {
            self.start_catching_up();
        }
        let went_round = match end {
            ExportEnd::Complete => {
                self.pull_resume = None;
                true
            }
            ExportEnd::Stopped {
                resume: Some(resume),
                wrapped: false,
            } => {
                self.pull_resume = self.skip_stretches(resume);
                self.pull_resume.is_none()
            }
            ExportEnd::Stopped { resume, wrapped } => {
                self.pull_resume = resume;
                wrapped
            }
        };
        if went_round {
            if self.stretches_walking() {
                self.round_waits = Some(peer.clone());
            } else {
                self.round_over(now, peer);
            }
            return;
        }
        if self.catch_up != CatchUp::Walking || self.stopped() {
            return;
        }
        self.start_heads_walk(now, peer, out);
        // The stretches are cut at member sites, known once their certificates are: after
        // a heads walk ended, or at once where none can run (an older peer).
        let members_known = self.heads_ended || self.heads.is_none();
        if let Some(resume) = self.pull_resume.clone().filter(|_| members_known) {
            self.start_stretches(now, &resume, peer, out);
        }
        self.next_part(now, peer.clone());
    }

    /// The whole walk and every stretch walk beside it are done: the round is over, and
    /// another may begin (see [`Driver::walk_went_round`]), from another member.
    pub(super) fn round_over(&mut self, now: Duration, peer: &NodeId) {
        let next_round = self.walk_went_round();
        if self.catch_up != CatchUp::Walking || self.stopped() {
            return;
        }
        let next = if next_round {
            self.random_member_id().unwrap_or_else(|| peer.clone())
        } else {
            peer.clone()
        };
        self.next_part(now, next);
    }

    /// Asks `peer` for the next part of the walk after the pause.
    fn next_part(&mut self, now: Duration, peer: NodeId) {
        self.stats.catch_up_syncs += 1;
        self.timers
            .push(now + CATCH_UP_PAUSE, TimerEvent::SyncWith(peer));
    }

    /// A node starts to catch up: its first round begins.
    pub(super) fn start_catching_up(&mut self) {
        self.catch_up = CatchUp::Walking;
        self.heads_ended = false;
        self.end_stretches();
        self.catch_up_round = (1, lock(&self.store).len());
    }

    /// The walk went round. While catching up, a round that brought names this node did
    /// not hold is followed by another (the peer walked may have lacked some: it was
    /// catching up itself, or its store grew behind the walk), up to
    /// [`MAX_CATCH_UP_ROUNDS`]; so is a round in which a stretch walk lost an answer (the
    /// whole walk may have skipped what it missed). Returns whether one begins; otherwise
    /// catching up is done. Stretches are walked in the first round only: the later ones
    /// check what it brought.
    fn walk_went_round(&mut self) -> bool {
        let held = lock(&self.store).len();
        let (round, held_at_start) = self.catch_up_round;
        let gap = self.take_stretch_gap();
        let again = held > held_at_start || gap;
        if self.catch_up == CatchUp::Walking && again && round < MAX_CATCH_UP_ROUNDS {
            self.catch_up_round = (round + 1, held);
            self.stretches.clear();
            return true;
        }
        self.catch_up = CatchUp::Done;
        self.end_stretches();
        false
    }

    /// Sends this node's view, chunked: itself, members (starting at a random one, so a
    /// view larger than [`MAX_MEMBER_CHUNKS`] is covered over several syncs) and items,
    /// each origin's certificate chain before its first item. A request starts with where
    /// its answer's items should resume and carries this node's own items from where the
    /// last request stopped (none while catching up: it asks, the answers teach). An answer
    /// (`answer_after` set) carries the items after the name the request gave, and says in
    /// its first chunk where they ended. `resume`: where a request asks the answer to
    /// resume (the walk it moves on). `walked`: the lanes the answer carries (a request of
    /// the heads walk asks for [`WalkLanes::Heads`] and carries no items of its own).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_state<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        kind: u8,
        sync_id: u32,
        peer: SocketAddr,
        answer_after: Option<Option<ItemName>>,
        resume: Option<ItemName>,
        walked: WalkLanes,
        out: &mut O,
    ) {
        let me = self.foca.identity().clone();
        let reserve = if answer_after.is_some() {
            WALK_END_ROOM
        } else {
            0
        };
        let mut chunks = ChunkWriter::new(kind, sync_id, &me, reserve);
        let mut entry = Vec::with_capacity(MAX_MESSAGE_LEN);

        if answer_after.is_none() {
            if let Some(name) = &resume {
                name.encode(&mut entry);
            }
            chunks.push(ENTRY_RESUME, &entry, MAX_SYNC_CHUNKS);
            if walked == WalkLanes::Heads {
                chunks.push(ENTRY_HEADS, &[], MAX_SYNC_CHUNKS);
            }
        }
        entry.clear();
        encode_member(
            &Member::new(me, 0, State::Alive),
            state_byte(State::Alive),
            &mut entry,
        );
        chunks.push(ENTRY_MEMBER, &entry, MAX_SYNC_CHUNKS);

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
            encode_member(member, state, &mut entry);
            if !chunks.push(ENTRY_MEMBER, &entry, MAX_MEMBER_CHUNKS) {
                break;
            }
        }

        let after = match &answer_after {
            Some(after) => after.as_ref(),
            None if self.catch_up != CatchUp::Done => None,
            None => self.push_resume.as_ref(),
        };
        let own_items_held_back = self.catch_up != CatchUp::Done || walked == WalkLanes::Heads;
        let end = if answer_after.is_none() && own_items_held_back {
            None
        } else {
            let session = &self.session;
            // Earlier certificates only to peers that keep a site's newest certificate as
            // its current one whatever the order they arrive in (protocol 3): an older
            // peer would take the earlier one as current.
            let earlier_ok = session
                .version_at(peer)
                .is_some_and(|version| version >= EARLIER_CERTIFICATES_SINCE);
            let mut chain_entry = Vec::new();
            let mut last_origin: Option<Arc<str>> = None;
            let mut earlier_in_chunk: Option<(Arc<str>, [u8; FINGERPRINT_LEN], usize)> = None;
            let end =
                lock(&self.store).export(after, walked, &mut entry, |origin, item, earlier| {
                    if last_origin.as_ref() != Some(origin) {
                        last_origin = Some(origin.clone());
                        if let Some(chain) = session.certificate_chain(origin) {
                            encode_certificate_entry(origin, chain, &mut chain_entry);
                            if !chunks.push(ENTRY_CERTIFICATE, &chain_entry, MAX_SYNC_CHUNKS) {
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
                            if chunks.push_pair(pair, (ENTRY_ITEM, item), MAX_SYNC_CHUNKS) {
                                earlier_in_chunk =
                                    Some((origin.clone(), fingerprint, chunks.len()));
                                return true;
                            }
                        }
                    }
                    chunks.push(ENTRY_ITEM, item, MAX_SYNC_CHUNKS)
                });
            Some(end)
        };

        let mut walk_end = Vec::new();
        match (answer_after.is_some(), end) {
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
        } = read_chunk_header(&mut r, &self.interner)?;
        let sender = sender.clone();
        let mut loud = Vec::new();
        let mut quiet = Vec::new();
        let mut left = Vec::new();
        let mut items = Vec::new();
        let mut certificates = Vec::new();
        let mut resume = None;
        let mut walked = WalkLanes::All;
        let mut walk_end = None;
        while !r.is_empty() {
            let (tag, body) = read_entry(&mut r)?;
            match tag {
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
        positions.refresh(foca.iter_membership_state());
        let received = loud.len() + quiet.len();
        loud.retain(|member| !holds_exactly(foca, positions, member));
        quiet.retain(|member| !holds_exactly(foca, positions, member));
        self.stats.sync_entries_known += (received - loud.len() - quiet.len()) as u64;
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
        if index == 0 {
            if kind == KIND_SYNC_REQUEST {
                self.stats.syncs_served += 1;
                let after = Some(resume.flatten());
                self.send_state(
                    now,
                    KIND_SYNC_RESPONSE,
                    sync_id,
                    sender.socket_addr(),
                    after,
                    None,
                    walked,
                    out,
                );
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
        let whole_walk = self.pull_sync == Some(sync_id);
        if kind != KIND_SYNC_RESPONSE || !(whole_walk || self.is_stretch_sync(sync_id)) {
            return Ok(());
        }
        let chunk = ChunkItems::of(&items, &self.interner);
        if !whole_walk {
            self.follow_stretch(now, sync_id, (index, count), chunk, walk_end);
        } else {
            let start = self.pull_resume.clone();
            let answer = match &mut self.pull_answer {
                Some(answer) if answer.sync_id == sync_id => answer,
                slot => slot.insert(PullAnswer::new(sync_id, start, count)),
            };
            if answer.note(index, chunk, walk_end) {
                if let WalkStep::Ended(end) = answer.step() {
                    self.follow_walk(now, end, &sender, out);
                }
            }
        }
        Ok(())
    }
}
