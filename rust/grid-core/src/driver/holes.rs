//! Holes and wants: what a catch-up walk's answers showed missing, asked for apart.
//!
//! A hole is a run of chunks lost from an answer. An answer of many chunks under loss
//! rarely comes whole; resuming after its first lost chunk would have the next answer send
//! again everything after it (under 1 % loss, about as much again as the walk moves). So a
//! walk answered by a peer that bounds walks
//! ([`crate::wire::versions::BOUNDED_WALK_SINCE`]) moves on past every chunk received, and
//! each stretch between received chunks is asked of that peer with a request bounded at
//! the next received name: an answer of the lost chunks' entries alone (and a sync's
//! members).
//!
//! A want is a name a check round's answer (names and versions, [`crate::lanes::ExportForm::Versions`])
//! holds at a version this node lacks: asked of that peer by name, a chunk of names at a
//! time, so that a check round moves a twentieth of the store's bytes plus what was
//! missing rather than the store again.
//!
//! Held apart because it is an accelerator with state of its own. Fills are asked one at a
//! time, right after each answer (an answer of a few chunks costs the peer little); one
//! whose answers move it nothing twice in a row is given up, and the catch-up goes round
//! once more to cover it, as after a lost stretch walk. A round is over only once its
//! fills are done or given up.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::{lock, ExportEnd, ItemName, Taken, WalkLanes};
use crate::wire::session::Transmit;

use super::answer::{ChunkItems, Hole, PullAnswer, WalkStep};
use super::carry::{SyncForm, WalkSpan};
use super::walk::CatchUp;
use super::{Driver, SYNC_ANSWER_WAIT};

/// Answers in a row that may move a fill nothing before it is given up.
const FRUITLESS_FILL_ANSWERS: u8 = 1;
/// Bytes of names one request for wanted items carries (its one chunk holds them, the
/// sender's own member entry and the frame).
const WANT_BYTES: usize = 900;
/// Fills that may wait at once: past them, what an answer showed missing is left to
/// another round.
const MAX_WAITING_FILLS: usize = 4096;

/// What is asked for apart.
#[derive(Clone, Debug)]
pub(super) enum Fill {
    Hole(Hole),
    Names(Vec<ItemName>),
}

/// The fills of a catch-up still to ask for, and the one asked for.
#[derive(Default)]
pub(super) struct Holes {
    waiting: VecDeque<(NodeId, Fill)>,
    asked: Option<AskedFill>,
}

/// A fill asked for: of whom, by which request, its answer so far, and how many answers in
/// a row moved it nothing.
struct AskedFill {
    peer: NodeId,
    fill: Fill,
    sync: u32,
    answer: Option<PullAnswer>,
    fruitless: u8,
}

impl Fill {
    /// The span of the walk an answer for this fill covers (named items: none).
    fn span(&self) -> WalkSpan {
        match self {
            Fill::Hole(hole) => WalkSpan {
                after: hole.after.clone(),
                until: Some(hole.until.clone()),
                lanes: WalkLanes::All,
                form: hole.form,
            },
            Fill::Names(_) => WalkSpan::items(None, None),
        }
    }

    /// The request for this fill.
    fn request(&self) -> SyncForm {
        match self {
            Fill::Hole(_) => SyncForm::Request(self.span()),
            Fill::Names(names) => SyncForm::Want(names.clone()),
        }
    }
}

impl Driver {
    /// Notes `holes` of an answer from `peer`, and asks for the first unless a fill is
    /// asked for already.
    pub(super) fn fill_holes<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        peer: &NodeId,
        holes: Vec<Hole>,
        out: &mut O,
    ) {
        self.fill(now, peer, holes.into_iter().map(Fill::Hole), out);
    }

    /// Of the names and versions an answer from `peer` lists (a push/pull's, a check
    /// round's), wants those this node would take ([`crate::lanes::ItemStore::would_take`]:
    /// not those it holds, nor those it forgot while their site is away), a chunk of
    /// names at a time. A push/pull's answer that lists so many names this node does not
    /// hold that it is behind has its span walked again as items instead, its wants
    /// dropped (see [`Driver::listed_behind`]).
    pub(super) fn want_newer<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        peer: &NodeId,
        versions: &[(ItemName, u64)],
        out: &mut O,
    ) {
        let mut batches = Vec::new();
        let mut lacking = 0;
        {
            let store = lock(&self.store);
            let mut batch = Vec::new();
            let mut bytes = 0;
            for (name, version) in versions {
                let Some(taken) = store.would_take(&name.origin, name.lane, &name.key, *version)
                else {
                    continue;
                };
                lacking += usize::from(taken == Taken::Unknown);
                let len = 3 + name.origin.len() + name.key.len() + 3;
                if bytes + len > WANT_BYTES && !batch.is_empty() {
                    batches.push(Fill::Names(std::mem::take(&mut batch)));
                    bytes = 0;
                }
                bytes += len;
                batch.push(name.clone());
            }
            if !batch.is_empty() {
                batches.push(Fill::Names(batch));
            }
        }
        if self.catch_up == CatchUp::Done {
            // Whether the node is behind is known once the whole answer is in: its wants
            // are dropped then if it is (see `Driver::follow_walk`).
            self.pull_listed.0 += versions.len();
            self.pull_listed.1 += lacking;
        }
        self.fill(now, peer, batches.into_iter(), out);
    }

    fn fill<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        peer: &NodeId,
        fills: impl Iterator<Item = Fill>,
        out: &mut O,
    ) {
        let mut any = false;
        for fill in fills {
            if self.holes.waiting.len() >= MAX_WAITING_FILLS {
                self.stretch_gap = true;
                break;
            }
            self.holes.waiting.push_back((peer.clone(), fill));
            any = true;
        }
        if any && self.holes.asked.is_none() {
            self.ask_next_fill(now, out);
        }
    }

    /// Asks for the next waiting fill; once none waits, a round that waited for them may
    /// be over.
    fn ask_next_fill<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let next = self.holes.waiting.pop_front().filter(|_| !self.stopped());
        let Some((peer, fill)) = next else {
            self.end_holes();
            self.beside_done(now);
            return;
        };
        self.holes.asked = Some(AskedFill {
            peer,
            fill,
            sync: 0,
            answer: None,
            fruitless: 0,
        });
        self.ask_for_fill(now, out);
    }

    /// Sends the request for the fill asked for.
    fn ask_for_fill<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let sync_id = self.rng.random();
        let Some(asked) = self.holes.asked.as_mut() else {
            return;
        };
        asked.sync = sync_id;
        asked.answer = None;
        let peer = asked.peer.socket_addr();
        let form = asked.fill.request();
        self.stats.hole_syncs += 1;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        self.send_state(now, sync_id, peer, form, out);
    }

    /// Whether `sync_id` is the request for the fill asked for.
    pub(super) fn is_hole_sync(&self, sync_id: u32) -> bool {
        self.holes
            .asked
            .as_ref()
            .is_some_and(|asked| asked.sync == sync_id)
    }

    /// Whether a fill is asked for or waits to be.
    pub(super) fn holes_pending(&self) -> bool {
        self.holes.asked.is_some() || !self.holes.waiting.is_empty()
    }

    /// A chunk of the answer for the fill asked for (request `sync_id`, chunk `index` of
    /// `count`). Once the answer is whole, the fill is done (a hole's answer reached its
    /// bound; named items came), or a hole larger than an answer is asked for again after
    /// where it stopped.
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
        let fill = &asked.fill;
        let answer = asked
            .answer
            .get_or_insert_with(|| PullAnswer::new(sync_id, &fill.span(), count));
        if !answer.note((index, sender), items, end) {
            self.await_answer_tail(now, sync_id, index, count);
            return;
        }
        let step = answer.step(false);
        match (&mut asked.fill, step) {
            (
                Fill::Hole(hole),
                WalkStep::Ended(ExportEnd::Stopped {
                    resume: Some(resume),
                    ..
                }),
            ) if resume != hole.until => {
                hole.after = Some(resume);
                asked.fruitless = 0;
                self.ask_for_fill(now, out);
            }
            _ => {
                self.holes.asked = None;
                self.ask_next_fill(now, out);
            }
        }
    }

    /// The answer to `sync_id` did not come whole; false if it is not the fill's. A hole
    /// shrinks past the chunks received without a gap, and the fill is asked for again,
    /// from another member if no chunk came; after more than [`FRUITLESS_FILL_ANSWERS`]
    /// answers in a row that moved it nothing, it is given up for another round to cover.
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
        let moved = match &mut asked.fill {
            Fill::Hole(hole) if resume.is_some() && resume != hole.after => {
                hole.after = resume;
                true
            }
            _ => false,
        };
        asked.fruitless = if moved { 0 } else { asked.fruitless + 1 };
        if asked.fruitless > FRUITLESS_FILL_ANSWERS {
            self.holes.asked = None;
            self.stretch_gap = true;
            self.ask_next_fill(now, out);
            return true;
        }
        if !answered {
            if let Some(peer) = self.random_member_id() {
                if let Some(asked) = self.holes.asked.as_mut() {
                    asked.peer = peer;
                }
            }
        }
        self.ask_for_fill(now, out);
        true
    }

    /// No fill is asked for any more (catching up ended, or begins again).
    pub(super) fn end_holes(&mut self) {
        self.holes = Holes::default();
    }
}
