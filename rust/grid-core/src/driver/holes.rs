//! Holes: the chunks lost from an answer of a catch-up walk, asked for apart. An answer of
//! many chunks under loss rarely comes whole; resuming after its first lost chunk would
//! have the next answer send again everything after it (under 1 % loss, about as much
//! again as the walk moves). So a walk answered by a peer that bounds walks
//! ([`crate::wire::versions::BOUNDED_WALK_SINCE`]) moves on past every chunk received, and
//! each stretch between received chunks is asked of that peer with a request bounded at the
//! next received name: an answer of the lost chunks' items alone (and a sync's members).
//!
//! Held apart because it is an accelerator with state of its own. Holes are asked one at a
//! time, right after each answer (an answer of a few chunks costs the peer little); a hole
//! whose answers move it nothing twice in a row is given up, and the catch-up goes round
//! once more to cover it, as after a lost stretch walk. A round is over only once its
//! holes are filled or given up.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::{ExportEnd, WalkLanes};
use crate::wire::session::Transmit;

use super::sync::{SyncForm, WalkSpan};
use super::walk::{ChunkItems, Hole, PullAnswer, WalkStep};
use super::{Driver, SYNC_ANSWER_WAIT};

/// Answers in a row that may move a hole nothing before it is given up.
const FRUITLESS_HOLE_ANSWERS: u8 = 1;

/// The holes of a catch-up still to fill, and the one asked for.
#[derive(Default)]
pub(super) struct Holes {
    waiting: VecDeque<(NodeId, Hole)>,
    asked: Option<AskedHole>,
}

/// A hole asked for: of whom, by which request, its answer so far, and how many answers in
/// a row moved it nothing.
struct AskedHole {
    peer: NodeId,
    hole: Hole,
    sync: u32,
    answer: Option<PullAnswer>,
    fruitless: u8,
}

impl Driver {
    /// Notes `holes` of an answer from `peer`, and asks for the first unless one is asked
    /// for already.
    pub(super) fn fill_holes<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        peer: &NodeId,
        holes: Vec<Hole>,
        out: &mut O,
    ) {
        if holes.is_empty() {
            return;
        }
        let waiting = &mut self.holes.waiting;
        waiting.extend(holes.into_iter().map(|hole| (peer.clone(), hole)));
        if self.holes.asked.is_none() {
            self.ask_next_hole(now, out);
        }
    }

    /// Asks for the next waiting hole; once none waits, a round that waited for the holes
    /// may be over.
    fn ask_next_hole<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let next = self.holes.waiting.pop_front().filter(|_| !self.stopped());
        let Some((peer, hole)) = next else {
            self.end_holes();
            self.beside_done(now);
            return;
        };
        self.holes.asked = Some(AskedHole {
            peer,
            hole,
            sync: 0,
            answer: None,
            fruitless: 0,
        });
        self.ask_for_hole(now, out);
    }

    /// Sends the request for the hole asked for.
    fn ask_for_hole<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let sync_id = self.rng.random();
        let Some(asked) = self.holes.asked.as_mut() else {
            return;
        };
        asked.sync = sync_id;
        asked.answer = None;
        let peer = asked.peer.socket_addr();
        let span = WalkSpan {
            after: asked.hole.after.clone(),
            until: Some(asked.hole.until.clone()),
            lanes: WalkLanes::All,
        };
        self.stats.hole_syncs += 1;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        self.send_state(now, sync_id, peer, SyncForm::Request(span), out);
    }

    /// Whether `sync_id` is the request for the hole asked for.
    pub(super) fn is_hole_sync(&self, sync_id: u32) -> bool {
        self.holes
            .asked
            .as_ref()
            .is_some_and(|asked| asked.sync == sync_id)
    }

    /// Whether a hole is asked for or waits to be.
    pub(super) fn holes_pending(&self) -> bool {
        self.holes.asked.is_some() || !self.holes.waiting.is_empty()
    }

    /// A chunk of the answer for the hole asked for (request `sync_id`, chunk `index` of
    /// `count`). Once the answer is whole, the hole is filled (the answer reached its
    /// bound) or asked for again after where it stopped (it was larger than an answer).
    pub(super) fn follow_hole<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        (sync_id, index, count): (u32, u16, u16),
        (items, end): (ChunkItems, Option<ExportEnd>),
        sender: &NodeId,
        out: &mut O,
    ) {
        let Some(asked) = self.holes.asked.as_mut() else {
            return;
        };
        let span = (asked.hole.after.clone(), Some(asked.hole.until.clone()));
        let answer = asked
            .answer
            .get_or_insert_with(|| PullAnswer::new(sync_id, span, count));
        if !answer.note((index, sender), items, end) {
            self.await_answer_tail(now, sync_id, index, count);
            return;
        }
        match answer.step(false) {
            WalkStep::Ended(ExportEnd::Stopped {
                resume: Some(resume),
                ..
            }) if resume != asked.hole.until => {
                asked.hole.after = Some(resume);
                asked.fruitless = 0;
                self.ask_for_hole(now, out);
            }
            _ => {
                self.holes.asked = None;
                self.ask_next_hole(now, out);
            }
        }
    }

    /// The answer to `sync_id` did not come whole; false if it is not the hole's. The hole
    /// shrinks past the chunks received without a gap and is asked for again, from another
    /// member if no chunk came; after more than [`FRUITLESS_HOLE_ANSWERS`] answers in a
    /// row that moved it nothing, it is given up for another round to cover.
    pub(super) fn hole_answer_due<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sync_id: u32,
        out: &mut O,
    ) -> bool {
        if !self.is_hole_sync(sync_id) {
            return false;
        }
        self.stats.syncs_incomplete += 1;
        let Some(asked) = self.holes.asked.as_mut() else {
            return true;
        };
        let answered = asked.answer.is_some();
        let resume = match asked.answer.take().map(|mut answer| answer.step(false)) {
            Some(WalkStep::Partial { resume, .. }) => resume,
            _ => None,
        };
        let moved = resume.is_some() && resume != asked.hole.after;
        if moved {
            asked.hole.after = resume;
            asked.fruitless = 0;
        } else {
            asked.fruitless += 1;
        }
        if asked.fruitless > FRUITLESS_HOLE_ANSWERS {
            self.holes.asked = None;
            self.stretch_gap = true;
            self.ask_next_hole(now, out);
            return true;
        }
        if !answered {
            if let Some(peer) = self.random_member_id() {
                if let Some(asked) = self.holes.asked.as_mut() {
                    asked.peer = peer;
                }
            }
        }
        self.ask_for_hole(now, out);
        true
    }

    /// No hole is asked for any more (catching up ended, or begins again).
    pub(super) fn end_holes(&mut self) {
        self.holes = Holes::default();
    }
}
