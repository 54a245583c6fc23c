//! The walk through peers' stores that syncs resume from: following the answers to this
//! node's syncs ([`super::answer`]), catching up part after part, and the rounds of a
//! catch-up (with the stretch walks beside it, [`super::stretches`]).
//!
//! Held apart because the walk's state (where it resumes, the answer being received, the
//! round under way) matters only to the walk.

use std::net::SocketAddr;
use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::{lock, ExportEnd, ExportForm, WalkLanes};
use crate::wire::session::Transmit;

use super::answer::{ChunkItems, PullAnswer, WalkStep};
use super::carry::{SyncForm, WalkSpan};
use super::{Driver, ANSWER_TAIL_WAIT, CATCH_UP_PAUSE, MAX_CATCH_UP_ROUNDS, SYNC_ANSWER_WAIT};

/// A sync answer that brings this many names a node did not hold makes it catch up again.
const BEHIND_AFTER_NAMES: usize = 64;
/// ...and a listing answer (names and versions) too, if at least one in this many of the
/// names it lists are not held: an answer of items brings some 600 names, so this is the
/// share of them that made a node catch up, while a new site's hundred or so names, listed
/// among thousands before gossip brought them, are wanted by name instead.
const BEHIND_SHARE: usize = 10;
/// Answers in a row that may come in part without moving the walk on before a catching-up
/// node stops asking again at once and leaves the walk to the push/pull pace. Under heavy
/// loss an answer of many chunks nearly never arrives whole, and a large cluster's members
/// come first in every answer, so the chunks received without a gap hold no item: asking
/// again at once would resend the whole view every [`SYNC_ANSWER_WAIT`], both ways, for as
/// long as the loss lasts, and move nothing.
const FRUITLESS_ANSWERS_RETRIED: u8 = 2;
/// Answers in a row that may not come at all (each asked of another member at once: the
/// peer may be gone, or a burst lost) before a catching-up node leaves the walk to the
/// push/pull pace: about 16 s of [`SYNC_ANSWER_WAIT`]s, longer than the failure detector
/// takes to find a dead member, so a blip does not stall a join, while answers that never
/// come (every one lost, whatever its size) do not make it ask every answer wait forever.
const SILENT_ANSWERS_RETRIED: u8 = 8;
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

impl Driver {
    /// The answer to sync `sync_id` should be whole by now (or its last chunk came, and
    /// what is missing was lost). If it is not, the walk moves on past the chunks received
    /// (see [`Driver::partial_step`]), as it would after a whole answer that ended there,
    /// from another member. An answer that moved it nothing is asked for again (from any
    /// member: they all walk in the same order) at once while catching up (unless more than
    /// [`FRUITLESS_ANSWERS_RETRIED`] answers in a row came in part without moving it on, or
    /// more than [`SILENT_ANSWERS_RETRIED`] not at all), or by the next push/pull otherwise.
    pub(super) fn answer_due<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sync_id: u32,
        out: &mut O,
    ) {
        if self.heads_answer_due(sync_id)
            || self.stretch_answer_due(now, sync_id, out)
            || self.hole_answer_due(now, sync_id, out)
            || self.pull_sync != Some(sync_id)
        {
            return;
        }
        self.stats.syncs_incomplete += 1;
        self.pull_sync = None;
        let mut fruitless = false;
        let silent = self.pull_answer.is_none();
        if let Some(answer) = self.pull_answer.take() {
            let start = answer.start.clone();
            if let WalkStep::Partial {
                resume, wrapped, ..
            } = self.partial_step(now, answer, out)
            {
                if resume != start || wrapped {
                    if let Some(peer) = self.random_member_id() {
                        let end = ExportEnd::Stopped { resume, wrapped };
                        self.follow_walk(now, end, &peer, out);
                        return;
                    }
                }
                // Chunks came (the peer answers) but none of them moved the walk on.
                fruitless = resume == start && !wrapped;
                self.pull_resume = resume;
                if wrapped {
                    self.walk_went_round();
                }
            }
        }
        // Another member is asked at once (the peer may be gone), unless too many answers
        // in a row moved nothing.
        self.fruitless_answers = if fruitless {
            self.fruitless_answers.saturating_add(1)
        } else {
            0
        };
        self.silent_answers = if silent {
            self.silent_answers.saturating_add(1)
        } else {
            0
        };
        if self.fruitless_answers > FRUITLESS_ANSWERS_RETRIED
            || self.silent_answers > SILENT_ANSWERS_RETRIED
        {
            return;
        }
        if self.catch_up == CatchUp::Walking && !self.stopped() {
            if let Some(peer) = self.random_member() {
                self.stats.catch_up_syncs += 1;
                self.start_sync(now, peer, out);
            }
        }
    }

    /// How far an answer that did not come whole moves its walk. While catching up, from
    /// a peer that bounds walks ([`crate::wire::versions::BOUNDED_WALK_SINCE`]), past every chunk received, and
    /// the chunks lost between them are asked of that peer apart, each a small bounded
    /// answer (see [`super::holes`]); otherwise only past the chunks received from the
    /// first without a gap, and the next part sends again everything after the first lost
    /// chunk.
    pub(super) fn partial_step<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        mut answer: PullAnswer,
        out: &mut O,
    ) -> WalkStep {
        let bounding = answer
            .from()
            .filter(|from| {
                self.catch_up == CatchUp::Walking && self.bounds_walks(from.socket_addr())
            })
            .cloned();
        let mut step = answer.step(bounding.is_some());
        if let (Some(peer), WalkStep::Partial { holes, .. }) = (bounding, &mut step) {
            self.fill_holes(now, &peer, std::mem::take(holes), out);
        }
        step
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
        self.pull_listed = (0, 0);
        self.pull_answer = None;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        if self.catch_up == CatchUp::Due {
            self.start_catching_up();
        }
        let resume = self.pull_resume.clone();
        // The walk stops where a stretch another walk covers begins, if the peer can.
        let bounds = self.bounds_walks(peer);
        let until = self.next_stretch_start(resume.as_ref()).filter(|_| bounds);
        let asked = WalkSpan {
            after: resume,
            until,
            lanes: WalkLanes::All,
            form: self.walk_form(bounds),
        };
        self.pull_asked = asked.clone();
        self.send_state(now, sync_id, peer, SyncForm::Request(asked), out);
    }

    /// The form a walk asks a peer for, if the peer `bounds` walks (protocol 3): names and
    /// versions at the push/pull pace and in a catch-up's check rounds (after its first),
    /// what this node lacks then wanted by name (see [`Driver::want_newer`]); items in a
    /// catch-up's first round, and from an older peer. Versions take about a tenth of the
    /// bytes of items, so a push/pull answer of the same size goes over ten times as much
    /// of the store: what push gossip missed is found that much sooner.
    pub(super) fn walk_form(&self, bounds: bool) -> ExportForm {
        let checking = match self.catch_up {
            CatchUp::Done => true,
            CatchUp::Walking => self.catch_up_round.0 >= 2,
            CatchUp::Due => false,
        };
        if checking && bounds {
            ExportForm::Versions
        } else {
            ExportForm::Items
        }
    }

    /// Whether `sync_id` is a request of a walk: the whole walk's, a stretch walk's or a
    /// hole's.
    pub(super) fn walks_sync(&self, sync_id: u32) -> bool {
        self.pull_sync == Some(sync_id)
            || self.is_stretch_sync(sync_id)
            || self.is_hole_sync(sync_id)
    }

    /// An answer to this node's last sync said where its items ended: the next sync
    /// resumes there. While catching up, the next part is asked for soon, from the same
    /// peer, until the walk has gone round (see [`Driver::walk_went_round`]). An answer
    /// that brought or listed at least [`BEHIND_AFTER_NAMES`] names this node did not hold
    /// shows it is behind (a mesh started together, or a partition healed): it catches up,
    /// from the start of a listing answer (what it listed comes as items then). A store
    /// larger than one answer is walked for every site's heads beside, from another peer
    /// (see [`super::heads`]), and in each round, later stretches of it from others
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
        self.fruitless_answers = 0;
        self.silent_answers = 0;
        let brought = lock(&self.store)
            .len()
            .saturating_sub(self.pull_held_at_start);
        let listed_behind = self.listed_behind();
        if self.catch_up == CatchUp::Done && (brought >= BEHIND_AFTER_NAMES || listed_behind) {
            self.start_catching_up();
        }
        let went_round = match end {
            _ if listed_behind => {
                self.pull_resume = self.pull_asked.after.clone();
                false
            }
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
            if self.walks_beside() {
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

    /// Whether the names and versions the last push/pull answer listed hold at least
    /// [`BEHIND_AFTER_NAMES`] names this node does not hold, one in [`BEHIND_SHARE`] of
    /// them at least (see [`Driver::want_newer`]).
    pub(super) fn listed_behind(&self) -> bool {
        let (listed, lacking) = self.pull_listed;
        self.catch_up == CatchUp::Done
            && lacking >= BEHIND_AFTER_NAMES
            && lacking * BEHIND_SHARE >= listed
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
    /// [`MAX_CATCH_UP_ROUNDS`]; so is a round in which a stretch walk ended early (the
    /// whole walk may have skipped what it missed). Returns whether one begins, with
    /// stretch walks of its own; otherwise catching up is done.
    fn walk_went_round(&mut self) -> bool {
        let held = lock(&self.store).len();
        let (round, held_at_start) = self.catch_up_round;
        let gap = self.take_stretch_gap();
        let again = held > held_at_start || gap;
        if self.catch_up == CatchUp::Walking && again && round < MAX_CATCH_UP_ROUNDS {
            self.catch_up_round = (round + 1, held);
            self.end_stretches();
            return true;
        }
        self.catch_up = CatchUp::Done;
        self.end_stretches();
        false
    }

    /// A chunk of an answer to sync `part.0` (chunk `part.1` of `part.2`), if it is the
    /// whole walk's or a stretch walk's: once that answer is whole, its walk moves on.
    pub(super) fn take_walk_chunk<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        (sync_id, index, count): (u32, u16, u16),
        items: &[&[u8]],
        walk_end: Option<ExportEnd>,
        sender: &NodeId,
        out: &mut O,
    ) {
        let whole_walk = self.pull_sync == Some(sync_id);
        if !(whole_walk || self.is_stretch_sync(sync_id) || self.is_hole_sync(sync_id)) {
            return;
        }
        let chunk = ChunkItems::of(items, &self.interner);
        if self.is_hole_sync(sync_id) {
            self.follow_hole(now, (sync_id, index, count), (chunk, walk_end), sender, out);
            return;
        }
        if !whole_walk {
            let part = (sync_id, index, count);
            self.follow_stretch(now, part, chunk, walk_end, sender);
            return;
        }
        let answer = match &mut self.pull_answer {
            Some(answer) if answer.sync_id == sync_id => answer,
            slot => slot.insert(PullAnswer::new(sync_id, &self.pull_asked, count)),
        };
        if answer.note((index, sender), chunk, walk_end) {
            if let WalkStep::Ended(end) = answer.step(false) {
                self.follow_walk(now, end, sender, out);
            }
        } else {
            self.await_answer_tail(now, sync_id, index, count);
        }
    }

    /// Chunk `index` of `count` of the answer to `sync_id` came and the answer is not
    /// whole: once its last chunk is in, what is still missing was lost, and the answer is
    /// due after [`ANSWER_TAIL_WAIT`] rather than [`SYNC_ANSWER_WAIT`].
    pub(super) fn await_answer_tail(
        &mut self,
        now: Duration,
        sync_id: u32,
        index: u16,
        count: u16,
    ) {
        if index + 1 == count {
            self.timers
                .push(now + ANSWER_TAIL_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        }
    }
}
