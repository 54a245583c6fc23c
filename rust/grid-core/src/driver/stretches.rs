//! Stretch walks: while a node catches up on a store larger than one answer, it walks
//! later stretches of the shared name order from other peers at once, beside the whole
//! walk, so that the store arrives in about a third of the time while each peer still
//! answers one part every [`CATCH_UP_PAUSE`] (its own probes, gossip and renders go
//! first, as with one walk).
//!
//! The order is cut at member sites' names (a site's items are contiguous in it), into
//! [`STRETCH_WALKS`] + 1 stretches of about as many sites. The whole walk covers the first
//! and skips every stretch another walk covers (still walking, or walked to its end), and
//! its round is over once those walks are done too. An answer that did not come whole
//! moves its stretch on past the chunks received without a gap, and the rest is asked of
//! another peer at once (a peer slow to answer, or a burst lost, costs one answer wait,
//! not the stretch). A stretch whose answers keep moving nothing ends: the whole walk
//! covers what it had not walked yet if it has not passed it, and otherwise another round
//! does, so nothing depends on a stretch walk.
//! Requests are plain `SYNC_REQUEST`s resuming after a name, which every protocol version
//! answers.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::{ExportEnd, ItemName, Lane, WalkLanes};
use crate::wire::session::Transmit;

use super::answer::{ChunkItems, PullAnswer, WalkStep};
use super::carry::{SyncForm, WalkSpan};
use super::{Driver, CATCH_UP_PAUSE, SYNC_ANSWER_WAIT};

/// Stretches walked beside the whole walk, each from a peer of its own.
pub const STRETCH_WALKS: usize = 2;
/// Answers in a row that may come in part without moving a stretch on (each asked of
/// another peer) before its walk ends.
const FRUITLESS_STRETCH_ANSWERS: u8 = 1;

/// One stretch of the name order and its walk.
pub(super) struct Stretch {
    peer: NodeId,
    /// Where the stretch starts: before its first site's first name.
    start: ItemName,
    /// Where it ends: the next stretch's start (None: the end of the order).
    end: Option<ItemName>,
    /// Where the next part resumes (after this name).
    resume: ItemName,
    /// What the request under way asked (its bound is None where the peer cannot stop
    /// an answer at the stretch's end).
    asked: WalkSpan,
    /// The request whose answer moves the walk on (None between parts).
    sync: Option<u32>,
    /// That answer's chunks so far.
    answer: Option<PullAnswer>,
    /// Answers in a row that moved the stretch nothing.
    fruitless: u8,
    walk: StretchWalk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StretchWalk {
    Walking,
    /// Every part to the stretch's end came.
    Walked,
    /// Answers moved it nothing: the whole walk, or another round, covers the rest (after
    /// `resume`).
    Lost,
}

/// The name just before every item of `site`: its first lane with the least key a name
/// may have (one NUL byte; a resume name's key may not be empty, and no item's key
/// begins with NUL).
fn before_site(site: Arc<str>) -> ItemName {
    ItemName {
        origin: site,
        lane: Lane::Cert,
        key: Arc::from("\0"),
    }
}

/// Whether the walk has reached `name` (None: the end of the order).
fn reached(resume: &ItemName, name: Option<&ItemName>) -> bool {
    name.is_some_and(|name| resume.cmp(name) != Ordering::Less)
}

impl Driver {
    /// Starts the stretch walks after the whole walk's first part, if none ran in this
    /// round: the stretches after `resume` (where the whole walk goes on), each from a
    /// member other than `beside` (the whole walk's peer) and one another. Fewer members
    /// make fewer stretches; a member asked twice would answer twice as often.
    pub(super) fn start_stretches<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        resume: &ItemName,
        beside: &NodeId,
        out: &mut O,
    ) {
        if self.stretches_started || self.stopped() {
            return;
        }
        self.stretches_started = true;
        let mut sites: Vec<Arc<str>> = self
            .foca
            .iter_membership_state()
            .map(|member| member.id().site().clone())
            .chain(std::iter::once(self.foca.identity().site().clone()))
            .collect();
        sites.sort_unstable();
        sites.dedup();
        let mut starts: Vec<ItemName> = (1..=STRETCH_WALKS)
            .map(|k| before_site(sites[k * sites.len() / (STRETCH_WALKS + 1)].clone()))
            .filter(|start| start > resume)
            .collect();
        starts.dedup();
        let mut taken = vec![beside.clone()];
        let mut stretches = Vec::new();
        // A stretch left without a peer of its own is the whole walk's to cover.
        for (at, start) in starts.iter().enumerate() {
            let Some(peer) = self.other_member(&taken) else {
                break;
            };
            taken.push(peer.clone());
            stretches.push(Stretch {
                peer,
                start: start.clone(),
                end: starts.get(at + 1).cloned(),
                resume: start.clone(),
                asked: WalkSpan::items(Some(start.clone()), None),
                sync: None,
                answer: None,
                fruitless: 0,
                walk: StretchWalk::Walking,
            });
        }
        self.stretches = stretches;
        for index in 0..self.stretches.len() {
            self.ask_for_stretch(now, index, out);
        }
    }

    /// A member not in `taken`, if a few draws find one.
    fn other_member(&mut self, taken: &[NodeId]) -> Option<NodeId> {
        (0..4)
            .filter_map(|_| self.random_member_id())
            .find(|id| !taken.contains(id))
    }

    fn ask_for_stretch<O: Transmit + ?Sized>(&mut self, now: Duration, index: usize, out: &mut O) {
        if self.stopped() {
            self.stretches.clear();
            return;
        }
        let sync_id = self.rng.random();
        let Some(stretch) = self.stretches.get_mut(index) else {
            return;
        };
        let resume = stretch.resume.clone();
        let peer = stretch.peer.socket_addr();
        let end = stretch.end.clone();
        stretch.sync = Some(sync_id);
        stretch.answer = None;
        self.stats.stretch_syncs += 1;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        // The answer stops at the stretch's end, if the peer can stop it there.
        let bounds = self.bounds_walks(peer);
        let asked = WalkSpan {
            after: Some(resume),
            until: end.filter(|_| bounds),
            lanes: WalkLanes::All,
            form: self.walk_form(bounds),
        };
        if let Some(stretch) = self.stretches.get_mut(index) {
            stretch.asked = asked.clone();
        }
        self.send_state(now, sync_id, peer, SyncForm::Request(asked), out);
    }

    /// The pause after a stretch's part is over: its next part, unless it ended meanwhile.
    pub(super) fn stretch_part_due<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        index: usize,
        out: &mut O,
    ) {
        let due = self
            .stretches
            .get(index)
            .is_some_and(|stretch| stretch.walk == StretchWalk::Walking && stretch.sync.is_none());
        if due {
            self.ask_for_stretch(now, index, out);
        }
    }

    fn stretch_of(&self, sync_id: u32) -> Option<usize> {
        self.stretches
            .iter()
            .position(|stretch| stretch.sync == Some(sync_id))
    }

    /// Whether `sync_id` is a stretch walk's request.
    pub(super) fn is_stretch_sync(&self, sync_id: u32) -> bool {
        self.stretch_of(sync_id).is_some()
    }

    /// A chunk of an answer to a stretch walk's request `sync_id` (chunk `index` of
    /// `count`). Once every chunk is in, the stretch moves on after a pause, or is walked.
    pub(super) fn follow_stretch(
        &mut self,
        now: Duration,
        (sync_id, index, count): (u32, u16, u16),
        items: ChunkItems,
        end: Option<ExportEnd>,
        sender: &NodeId,
    ) {
        let Some(at) = self.stretch_of(sync_id) else {
            return;
        };
        let stretch = &mut self.stretches[at];
        let answer = stretch
            .answer
            .get_or_insert_with(|| PullAnswer::new(sync_id, &stretch.asked, count));
        if !answer.note((index, sender), items, end) {
            self.await_answer_tail(now, sync_id, index, count);
            return;
        }
        let step = answer.step(false);
        stretch.sync = None;
        stretch.answer = None;
        match step {
            WalkStep::Ended(ExportEnd::Stopped {
                resume: Some(resume),
                wrapped: false,
            }) if !reached(&resume, stretch.end.as_ref()) => {
                stretch.resume = resume;
                self.timers
                    .push(now + CATCH_UP_PAUSE, TimerEvent::StretchPart(at));
            }
            _ => {
                stretch.walk = StretchWalk::Walked;
                self.beside_done(now);
            }
        }
    }

    /// The answer to `sync_id` did not come whole; false if it is not a stretch walk's.
    /// The stretch moves on past the chunks received (see [`Driver::partial_step`]), and
    /// its next part is asked of another peer at once; after more than
    /// [`FRUITLESS_STRETCH_ANSWERS`] answers in a row that moved it nothing, its walk ends
    /// and the whole walk covers the rest.
    pub(super) fn stretch_answer_due<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sync_id: u32,
        out: &mut O,
    ) -> bool {
        let Some(at) = self.stretch_of(sync_id) else {
            return false;
        };
        self.stats.syncs_incomplete += 1;
        let stretch = &mut self.stretches[at];
        stretch.sync = None;
        let answer = stretch.answer.take();
        let step = answer.map(|answer| self.partial_step(now, answer, out));
        let stretch = &mut self.stretches[at];
        let moved = match step {
            Some(WalkStep::Partial {
                resume: Some(resume),
                wrapped,
                ..
            }) if resume != stretch.resume => {
                if wrapped || reached(&resume, stretch.end.as_ref()) {
                    stretch.walk = StretchWalk::Walked;
                    self.beside_done(now);
                    return true;
                }
                stretch.resume = resume;
                true
            }
            _ => false,
        };
        stretch.fruitless = if moved { 0 } else { stretch.fruitless + 1 };
        if stretch.fruitless > FRUITLESS_STRETCH_ANSWERS {
            stretch.walk = StretchWalk::Lost;
            self.stats.stretches_lost += 1;
            self.stretch_gap = true;
            self.beside_done(now);
            return true;
        }
        let taken: Vec<NodeId> = self.stretches.iter().map(|s| s.peer.clone()).collect();
        if let Some(peer) = self.other_member(&taken) {
            self.stretches[at].peer = peer;
        }
        self.ask_for_stretch(now, at, out);
        true
    }

    /// A walk beside the whole walk is done (a stretch, or the last hole asked for): if it
    /// was the last one the whole walk's round waited for, that round is over.
    pub(super) fn beside_done(&mut self, now: Duration) {
        if self.walks_beside() {
            return;
        }
        if let Some(peer) = self.round_waits.take() {
            self.round_over(now, &peer);
        }
    }

    /// Whether a walk beside the whole walk is under way: a stretch walk, or holes asked
    /// for.
    pub(super) fn walks_beside(&self) -> bool {
        self.stretches
            .iter()
            .any(|stretch| stretch.walk == StretchWalk::Walking)
            || self.holes_pending()
    }

    /// Where the first stretch another walk covers begins after `resume` (the whole walk's
    /// answer stops there): None if no stretch lies ahead.
    pub(super) fn next_stretch_start(&self, resume: Option<&ItemName>) -> Option<ItemName> {
        self.stretches
            .iter()
            .map(|stretch| &stretch.start)
            .filter(|start| resume.map_or(true, |resume| *start > resume))
            .min()
            .cloned()
    }

    /// Whether a stretch walk (or a hole asked for) lost an answer since the last call.
    pub(super) fn take_stretch_gap(&mut self) -> bool {
        std::mem::take(&mut self.stretch_gap)
    }

    /// Where the whole walk goes on from `resume`: past every stretch it has entered that
    /// another walk covers, and past the part an ended stretch walk had walked (None: past
    /// the end of the order, the walk went round).
    pub(super) fn skip_stretches(&self, resume: ItemName) -> Option<ItemName> {
        let mut resume = resume;
        loop {
            let skip = self.stretches.iter().find_map(|stretch| {
                let covered = match stretch.walk {
                    StretchWalk::Lost => Some(&stretch.resume),
                    StretchWalk::Walking | StretchWalk::Walked => stretch.end.as_ref(),
                };
                (reached(&resume, Some(&stretch.start)) && !reached(&resume, covered))
                    .then_some(covered)
            });
            match skip {
                Some(Some(covered)) => resume = covered.clone(),
                Some(None) => return None,
                None => return Some(resume),
            }
        }
    }

    /// Catching up is over (or begins again): no stretch walk goes on, no hole is asked
    /// for.
    pub(super) fn end_stretches(&mut self) {
        self.stretches.clear();
        self.end_holes();
        self.stretches_started = false;
        self.stretch_gap = false;
        self.round_waits = None;
    }
}
