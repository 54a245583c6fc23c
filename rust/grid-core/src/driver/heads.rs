//! The heads walk: while a node catches up on a store larger than one answer, it walks a
//! second peer's store for the lanes that let it verify and reach every site (each site's
//! certificates, gateway and metadata, [`WalkLanes::Heads`]) beside the walk of the whole
//! store, so that it trusts and probes every site within its first second or so instead of
//! as the whole walk reaches each site in name order.
//!
//! Held apart because it is an accelerator with state of its own: nothing depends on it.
//! The whole walk brings the same items, so a lost answer simply ends the heads walk.
//! Only peers that speak [`HEADS_WALK_SINCE`] are asked (an older one would refuse the
//! request's entry).

use std::time::Duration;

use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::lanes::{ExportEnd, ExportForm, ItemName, WalkLanes};
use crate::wire::session::Transmit;
use crate::wire::versions::HEADS_WALK_SINCE;

use super::carry::{SyncForm, WalkSpan};
use super::{Driver, CATCH_UP_PAUSE, SYNC_ANSWER_WAIT};

/// A heads walk under way.
pub(super) struct HeadsWalk {
    /// The peer walked: every part is asked of it.
    peer: NodeId,
    /// The request whose answer moves the walk on (None between parts).
    sync: Option<u32>,
    /// Where the next part starts.
    resume: Option<ItemName>,
}

impl Driver {
    /// Starts a heads walk of a member other than `beside` (the peer of the whole walk),
    /// if none has run in this catch-up and such a member speaks it.
    pub(super) fn start_heads_walk<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        beside: &NodeId,
        out: &mut O,
    ) {
        if self.heads.is_some() || self.heads_ended || self.stopped() {
            return;
        }
        // A few draws find another member in any mesh of three or more; with one other
        // member, the heads walk asks the same peer, which costs it one small answer.
        let mut peer = None;
        for _ in 0..3 {
            match self.random_member_id() {
                Some(id) if &id != beside => {
                    peer = Some(id);
                    break;
                }
                Some(id) => peer = Some(id),
                None => return,
            }
        }
        let Some(peer) = peer else {
            return;
        };
        if !self.peer_speaks(peer.socket_addr(), HEADS_WALK_SINCE) {
            return;
        }
        self.heads = Some(HeadsWalk {
            peer,
            sync: None,
            resume: None,
        });
        self.ask_for_heads(now, out);
    }

    /// Asks the walked peer for the next part of its heads.
    pub(super) fn ask_for_heads<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.stopped() {
            self.heads = None;
            return;
        }
        let sync_id = self.rng.random();
        let Some(walk) = self.heads.as_mut() else {
            return;
        };
        walk.sync = Some(sync_id);
        let peer = walk.peer.socket_addr();
        let resume = walk.resume.clone();
        self.stats.heads_syncs += 1;
        self.timers
            .push(now + SYNC_ANSWER_WAIT, TimerEvent::SyncAnswerDue(sync_id));
        let asked = WalkSpan {
            after: resume,
            until: None,
            lanes: WalkLanes::Heads,
            form: ExportForm::Items,
        };
        self.send_state(now, sync_id, peer, SyncForm::Request(asked), out);
    }

    /// The pause after a part is over: the next part, unless the walk ended meanwhile.
    pub(super) fn heads_part_due<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.heads.as_ref().is_some_and(|walk| walk.sync.is_none()) {
            self.ask_for_heads(now, out);
        }
    }

    /// Whether `sync_id` is the heads walk's request.
    pub(super) fn is_heads_sync(&self, sync_id: u32) -> bool {
        self.heads
            .as_ref()
            .is_some_and(|walk| walk.sync == Some(sync_id))
    }

    /// The first chunk of the heads answer said where it ended: ask for the next part
    /// soon, or end the walk once it went round.
    pub(super) fn follow_heads(&mut self, now: Duration, end: ExportEnd) {
        let Some(walk) = self.heads.as_mut() else {
            return;
        };
        walk.sync = None;
        match end {
            ExportEnd::Stopped {
                resume,
                wrapped: false,
            } if resume.is_some() => {
                walk.resume = resume;
                self.timers
                    .push(now + CATCH_UP_PAUSE, TimerEvent::HeadsPart);
            }
            _ => {
                self.heads = None;
                self.heads_ended = true;
            }
        }
    }

    /// The heads answer did not come: the whole walk brings the same items, so the heads
    /// walk ends rather than retries.
    pub(super) fn heads_answer_due(&mut self, sync_id: u32) -> bool {
        if !self.is_heads_sync(sync_id) {
            return false;
        }
        self.heads = None;
        self.heads_ended = true;
        true
    }
}
