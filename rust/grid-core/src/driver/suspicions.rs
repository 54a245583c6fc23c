//! The suspicions this node holds: when each began (a Down claim about a member becomes a
//! suspicion here, and is taken as a Down only once it has lasted), the Down a suspicion
//! that lasted confirms, and the notices that tell a suspect (Lifeguard's buddy system).
//!
//! Held apart from the screening in `swim` because it is state of its own, kept across
//! messages and timers.

use std::time::Duration;

use bytes::BufMut;
use foca::{Codec, Header, Member, Message, State};
use rand::Rng;

use crate::driver::timers::TimerEvent;
use crate::identity::NodeId;
use crate::wire::session::Transmit;
use crate::wire::KIND_FOCA;

use super::Driver;

impl Driver {
    /// When this node began to hold `id` suspect at `incarnation` (now, if it did not).
    pub(super) fn note_suspicion(
        &mut self,
        now: Duration,
        id: &NodeId,
        incarnation: u16,
    ) -> Duration {
        match self.suspected.get(id) {
            Some(&(since, held)) if held == incarnation => since,
            _ => {
                self.suspected.insert(id.clone(), (now, incarnation));
                now
            }
        }
    }

    /// The end of a suspicion another member's Down claim started here: still suspect, not
    /// refuted, so down.
    pub(super) fn confirm_down<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: NodeId,
        incarnation: u16,
        out: &mut O,
    ) {
        if self.member_state(&member) != Some((incarnation, State::Suspect)) {
            return;
        }
        let down = Member::new(member, incarnation, State::Down);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(down), true, rt)
        });
    }

    /// Lifeguard's buddy system: tells a member we suspect so, directly, in a foca `Ping`
    /// that carries the suspicion. If it is alive it refutes at once and its `Ack` brings
    /// the refutation straight back, instead of waiting for the suspicion to reach it by
    /// gossip while every member's suspicion timer runs. Repeated once per gossip interval
    /// (`left` more times) while we still hold the same suspicion.
    pub(super) fn notify_suspect<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        target: NodeId,
        incarnation: u16,
        left: u8,
        out: &mut O,
    ) {
        if left == 0
            || self.stopped()
            || self.member_state(&target) != Some((incarnation, State::Suspect))
        {
            return;
        }
        let header = Header {
            src: self.foca.identity().clone(),
            src_incarnation: self.probe.incarnation,
            dst: target.clone(),
            message: Message::Ping(self.rng.random()),
        };
        let suspicion = Member::new(target.clone(), incarnation, State::Suspect);
        self.scratch.clear();
        self.scratch.push(KIND_FOCA);
        let encoded = self
            .codec
            .encode_header(&header, &mut self.scratch)
            .and_then(|()| {
                self.scratch.put_u16(1);
                self.codec.encode_member(&suspicion, &mut self.scratch)
            });
        if encoded.is_ok() {
            self.stats.suspicion_notices += 1;
            let mut notice = std::mem::take(&mut self.scratch);
            self.session
                .send(now, target.socket_addr(), &mut notice, out);
            self.scratch = notice;
        }
        self.timers.push(
            now + self.config.gossip_interval(),
            TimerEvent::SuspicionNotice {
                target,
                incarnation,
                left: left - 1,
            },
        );
    }
}
