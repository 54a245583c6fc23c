//! Driving foca: the runtime foca calls back into, every call into foca (handing it the
//! relay queue's next window first), the screening of member entries gossiped by others
//! (only identities verified here reach foca, Down claims become suspicions for a while,
//! kept in `suspicions`) and Lifeguard's probe health.
//!
//! Held apart because this is where the driver meets foca's API and its callbacks; the
//! rest of the driver sees foca only through [`Driver::foca_call`] and
//! [`Driver::screen_member`].

use std::borrow::Cow;
use std::time::Duration;

use bytes::BufMut;
use foca::{
    Codec, Header, Member, Message, Notification, OwnedNotification, Runtime, State, Timer,
};

use crate::driver::timers::{TimerEvent, TimerHeap};
use crate::identity::{validate_site, NodeId};
use crate::lanes::keys::Role;
use crate::lanes::lock;
use crate::lanes::relay::{WINDOW_BYTES, WINDOW_ITEMS};
use crate::wire::session::{hello_wants_reply, Session, Transmit, MAX_SITES};
use crate::wire::{Reader, WireError, KIND_FOCA};

use super::known::GossipEntry;
use super::report::foca_error_index;
use super::{Driver, GridFoca, MAX_LOCAL_HEALTH};

/// What screening does with one gossiped member entry.
pub(super) enum Screened {
    Apply(Member<NodeId>),
    /// A Down claim held as a suspicion (see [`Driver::screen_member`]).
    AsSuspect(Member<NodeId>),
    Drop,
}

/// How far above what this node knows a member's gossiped incarnation may be.
const MAX_INCARNATION_STEP: u16 = 16;
pub(super) struct Rt<'a, O: Transmit + ?Sized> {
    now: Duration,
    timers: &'a mut TimerHeap,
    notes: &'a mut Vec<OwnedNotification<NodeId>>,
    probe: &'a mut ProbeHealth,
    session: &'a mut Session,
    scratch: &'a mut Vec<u8>,
    out: &'a mut O,
}

impl<O: Transmit + ?Sized> Runtime<NodeId> for Rt<'_, O> {
    fn notify(&mut self, notification: Notification<'_, NodeId>) {
        match notification {
            Notification::ProbeFailed(number, id) => {
                self.probe.failed.push(id.clone());
                self.probe.given_up = Some((id.clone(), number));
            }
            Notification::DataSent(header) => {
                self.probe.incarnation = self.probe.incarnation.max(header.src_incarnation);
            }
            Notification::DataReceived(header) => self.probe.note_answer(header),
            Notification::Rejoin(_) => {
                // foca starts a renewed identity at incarnation 0 (the gossip it sent
                // before telling has no higher one): the old identity's must not carry over.
                self.probe.incarnation = 0;
                self.notes.push(notification.to_owned());
            }
            other => self.notes.push(other.to_owned()),
        }
    }

    fn send_to(&mut self, to: NodeId, data: &[u8]) {
        self.scratch.clear();
        self.scratch.push(KIND_FOCA);
        self.scratch.extend_from_slice(data);
        self.session
            .send(self.now, to.socket_addr(), self.scratch, self.out);
    }

    fn submit_after(&mut self, event: Timer<NodeId>, after: Duration) {
        let after = match event {
            // Lifeguard's local health awareness: a node whose own probes keep failing,
            // or who keeps being suspected, is more likely slow itself than surrounded by
            // dead peers, so it probes less often, waits longer for answers and gives the
            // members it suspects longer to refute.
            Timer::ProbeRandomMember(_)
            | Timer::SendIndirectProbe { .. }
            | Timer::ChangeSuspectToDown { .. } => after * (1 + u32::from(self.probe.local_health)),
            _ => after,
        };
        self.timers.push(self.now + after, TimerEvent::Foca(event));
    }
}

/// What foca lets a host see of its own probing, and the local health score built on it.
///
/// The score follows Lifeguard's signals that the fault is ours rather than the peers':
/// being suspected (we had to refute), and answers that arrive for a probe we had already
/// given up on (our deadlines are shorter than our own processing). A plain failed probe
/// does not count: a dead peer or a partition looks the same, and slowing down then would
/// only delay detection.
#[derive(Default)]
pub(super) struct ProbeHealth {
    /// Members whose probe just failed (foca's `ProbeFailed`), not yet acted on.
    failed: Vec<NodeId>,
    /// The last probe that failed, in case its answer still comes.
    given_up: Option<(NodeId, u8)>,
    /// Answers that came after their probe had failed.
    pub(super) late_answers: u64,
    /// Our incarnation as our last message carried it; it rises when we refute, and is 0
    /// again once foca renews our identity (a rejoin under the next generation).
    pub(super) incarnation: u16,
    /// Lifeguard's local health multiplier: up on a refutation or a late answer, down on
    /// a probe round without failure.
    pub(super) local_health: u8,
}

impl ProbeHealth {
    fn note_answer(&mut self, header: &Header<NodeId>) {
        let Some((target, number)) = &self.given_up else {
            return;
        };
        let late = match &header.message {
            Message::Ack(n) => &header.src == target && n == number,
            Message::ForwardedAck {
                origin,
                probe_number,
            } => origin == target && probe_number == number,
            _ => false,
        };
        if late {
            self.given_up = None;
            self.late_answers += 1;
            self.worse();
        }
    }

    fn worse(&mut self) {
        self.local_health = (self.local_health + 1).min(MAX_LOCAL_HEALTH);
    }

    pub(super) fn better(&mut self) {
        self.local_health = self.local_health.saturating_sub(1);
    }
}

impl Driver {
    pub(super) fn handle_foca<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let screened = self.screen_foca(now, body, out)?;
        let packet = screened.as_deref().unwrap_or(body);
        self.foca_call(now, out, |foca, rt| foca.handle_data(packet, rt));
        if lock(&self.store).has_fresh() {
            // Relay news at once rather than at the next gossip tick.
            self.broadcast_pending = true;
        }
        Ok(())
    }

    /// A foca packet as foca may see it: `None` to take it as it is, or a rewrite without
    /// the member entries this node may not apply, and with a seed placeholder as
    /// destination of an `Announce` replaced by our identity (foca matches announces by
    /// site and address, and the joiner cannot know our site yet).
    fn screen_foca<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<Option<Vec<u8>>, WireError> {
        let mut rest = body;
        let mut header = self.codec.decode_header(&mut rest)?;
        let header_len = body.len() - rest.len();
        let mut rewrite = false;
        if header.message == Message::Announce && header.dst.is_placeholder() {
            if header.dst.node_addr() != self.foca.identity().node_addr() {
                return Err(WireError::BadMessage(KIND_FOCA));
            }
            header.dst = self.foca.identity().clone();
            rewrite = true;
        }
        // Every identity counts as verified in a simulation: nothing to screen there.
        let unsigned = self.session.authority().is_unsigned();
        let mut kept: Vec<Cow<'_, [u8]>> = Vec::new();
        let mut count = None;
        if rest.len() >= 2 && header.message != Message::Broadcast {
            let mut r = Reader::new(rest);
            let total = r.u16()?;
            let mut entries = r.rest();
            self.positions.refresh(self.foca.iter_membership_state());
            let read = self.gossip_entries(entries, total, unsigned);
            for at in 0..usize::from(total) {
                let before = entries;
                match read.get(at) {
                    Some(&GossipEntry::Known(len)) => {
                        // foca would scan its list to find it changes nothing.
                        entries = &entries[len..];
                        self.stats.gossip_entries_known += 1;
                        rewrite = true;
                        continue;
                    }
                    Some(&GossipEntry::News(len)) if unsigned => {
                        // Nothing to screen, and foca decodes it itself.
                        kept.push(Cow::Borrowed(&entries[..len]));
                        entries = &entries[len..];
                        continue;
                    }
                    _ => {}
                }
                let member = self.codec.decode_member(&mut entries)?;
                let bytes = &before[..before.len() - entries.len()];
                match self.screen_member(now, member, out) {
                    Screened::Apply(_) => kept.push(Cow::Borrowed(bytes)),
                    Screened::AsSuspect(member) => {
                        let mut encoded = Vec::with_capacity(bytes.len());
                        self.codec.encode_member(&member, &mut encoded)?;
                        kept.push(Cow::Owned(encoded));
                        rewrite = true;
                    }
                    Screened::Drop => rewrite = true,
                }
            }
            count = Some(total);
            rest = entries;
        }
        if !rewrite {
            return Ok(None);
        }
        let mut packet = Vec::with_capacity(body.len());
        if header.dst.site() == self.foca.identity().site() && header.message == Message::Announce {
            self.codec.encode_header(&header, &mut packet)?;
        } else {
            packet.extend_from_slice(&body[..header_len]);
        }
        if count.is_some() {
            packet.put_u16(kept.len() as u16);
            for bytes in kept {
                packet.extend_from_slice(&bytes);
            }
        }
        packet.extend_from_slice(rest);
        Ok(Some(packet))
    }

    /// What becomes of a member entry gossiped by someone else: applied as it is, applied
    /// as a suspicion, or dropped ([`Driver::may_apply`]).
    ///
    /// Another member's word that a live member is down is a suspicion here until this
    /// node has held that member suspect for half the suspicion timeout (a real failure is
    /// suspected by its prober, and that news spreads, well before the prober declares it
    /// down); if the suspect has not refuted by the end of its suspicion timeout counted
    /// from then, this node declares it down itself. So one lying member cannot take a live
    /// site down: the site refutes in time.
    pub(super) fn screen_member<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: Member<NodeId>,
        out: &mut O,
    ) -> Screened {
        if !self.may_apply(now, &member, out) {
            return Screened::Drop;
        }
        // What foca holds only matters for suspicions and downs; not looking it up for
        // the rest (nearly every entry of a sync) keeps a sync O(N).
        if member.state() == State::Alive || member.id() == self.foca.identity() {
            return Screened::Apply(member);
        }
        let id = member.id().clone();
        let Some((known, state)) = self.member_state(&id) else {
            return Screened::Apply(member);
        };
        if state == State::Down {
            return Screened::Apply(member); // foca keeps what it has
        }
        match member.state() {
            State::Suspect => {
                if member.incarnation() >= known {
                    self.note_suspicion(now, &id, member.incarnation());
                }
                Screened::Apply(member)
            }
            State::Down => {
                // foca takes Down at any incarnation; an older one than we know (the
                // member refuted since) is a suspicion of the current one here.
                let incarnation = member.incarnation().max(known);
                let since = self.note_suspicion(now, &id, incarnation);
                if state == State::Suspect
                    && known == incarnation
                    && now.saturating_sub(since) >= self.config.suspicion_timeout / 2
                {
                    return Screened::Apply(Member::new(id, incarnation, State::Down));
                }
                self.stats.down_claims_held += 1;
                self.timers.push(
                    since + self.config.suspicion_timeout,
                    TimerEvent::ConfirmDown {
                        member: id.clone(),
                        incarnation,
                    },
                );
                Screened::AsSuspect(Member::new(id, incarnation, State::Suspect))
            }
            State::Alive => Screened::Apply(member),
        }
    }

    /// Remembers `id` as the identity to ask for its site's `HELLO` if items of that site
    /// wait for its certificate (the latest named, at most [`MAX_SITES`] sites).
    fn remember_introduction(&mut self, id: &NodeId) {
        if self.introductions.len() >= MAX_SITES && !self.introductions.contains_key(id.site()) {
            self.introductions.clear();
        }
        self.introductions.insert(id.site().clone(), id.clone());
    }

    /// Whether a member entry gossiped by someone else may reach foca: it concerns us, the
    /// live holder of a site, or an identity that proved itself to us and contests no
    /// site. Anything else alive is asked to introduce itself.
    fn may_apply<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        member: &Member<NodeId>,
        out: &mut O,
    ) -> bool {
        let id = member.id();
        if !self.plausible_incarnation(member) {
            self.stats.members_implausible += 1;
            return false;
        }
        if id == self.foca.identity() || self.holders.holds(id) {
            return true;
        }
        if self.session.is_verified(id)
            && self.contested_by(id).is_none()
            && id.site() != self.foca.identity().site()
        {
            return true;
        }
        self.stats.members_unverified += 1;
        if member.state() == State::Alive
            && !self.session.is_verified(id)
            && !self.session.is_refused(id)
            && validate_site(id.site()).is_ok()
        {
            self.remember_introduction(id);
            if self.session.may_answer(now, id.socket_addr()) {
                self.session.send_hello(now, id.socket_addr(), true, out);
            }
        }
        false
    }

    /// Whether a gossiped entry's incarnation could be true. A member's incarnation only
    /// rises when it refutes a suspicion, one step at a time: nobody can have heard of ours
    /// above the one we carry, and another member's can only be a few steps above what we
    /// know. A claim far ahead (a suspicion at the last incarnation, which cannot be
    /// refuted) would force its subject to rejoin under a new identity.
    fn plausible_incarnation(&mut self, member: &Member<NodeId>) -> bool {
        let id = member.id();
        if id == self.foca.identity() {
            return member.incarnation() <= self.probe.incarnation;
        }
        if member.incarnation() <= MAX_INCARNATION_STEP {
            return true; // whatever we know of it
        }
        let known = self
            .member_state(id)
            .map_or(0, |(incarnation, _)| incarnation);
        member.incarnation() <= known.saturating_add(MAX_INCARNATION_STEP)
    }

    /// A verified `HELLO` is its sender's own signed word that it is alive: foca learns it
    /// as a member (as from an announce), and the sender's items can now be verified.
    pub(super) fn handle_hello<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: NodeId,
        body: &[u8],
        out: &mut O,
    ) {
        if let Some(key) = self.session.key(sender.site()) {
            lock(&self.store).trust_origin(sender.site(), key.clone(), Role::Current);
        }
        if hello_wants_reply(body, &self.interner)
            && self.session.may_answer(now, sender.socket_addr())
        {
            self.session
                .send_hello(now, sender.socket_addr(), false, out);
        }
        let alive = Member::new(sender, 0, State::Alive);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(alive), true, rt)
        });
    }

    /// Hands foca the next window of the relay queue once foca has sent everything it
    /// holds (see [`crate::lanes::relay`]), each item for g transmissions.
    fn hand_relays(&mut self) {
        if self.foca.custom_broadcast_backlog() > 0 {
            return;
        }
        let (window, transmissions) = {
            let mut relays = lock(&self.relays);
            let transmissions = relays.transmissions;
            let window = relays
                .queue
                .take_window(transmissions, WINDOW_ITEMS, WINDOW_BYTES);
            (window, transmissions)
        };
        let Some(transmissions) = std::num::NonZeroU8::new(transmissions) else {
            return;
        };
        if window.is_empty() {
            return;
        }
        let mut handing = self.foca_config.clone();
        handing.max_transmissions = transmissions;
        if let Err(err) = self.foca.set_config(handing) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
        for handed in window {
            lock(&self.relays).hand(handed.key);
            if let Err(err) = self.foca.add_broadcast(&handed.data) {
                self.stats.foca_errors[foca_error_index(&err)] += 1;
            }
        }
        if let Err(err) = self.foca.set_config(self.foca_config.clone()) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
    }

    pub(super) fn foca_call<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        out: &mut O,
        call: impl FnOnce(&mut GridFoca, &mut Rt<'_, O>) -> Result<(), foca::Error>,
    ) {
        self.hand_relays();
        let incarnation = self.probe.incarnation;
        let mut rt = Rt {
            now,
            timers: &mut self.timers,
            notes: &mut self.notes,
            probe: &mut self.probe,
            session: &mut self.session,
            scratch: &mut self.scratch,
            out,
        };
        if let Err(err) = call(&mut self.foca, &mut rt) {
            self.stats.foca_errors[foca_error_index(&err)] += 1;
        }
        // foca renews our identity when it rejoins; messages must follow at once.
        self.session.set_local(self.foca.identity());
        if self.probe.incarnation > incarnation {
            self.stats.refutations += 1;
            self.probe.worse();
        }
        for target in std::mem::take(&mut self.probe.failed) {
            self.stats.probes_failed += 1;
            if let Some((incarnation, State::Suspect)) = self.member_state(&target) {
                self.note_suspicion(now, &target, incarnation);
                let notices = self.config.suspicion_notices();
                self.notify_suspect(now, target, incarnation, notices, out);
            }
        }
    }

    /// foca's current view of one member: a hash lookup (see [`super::positions`]).
    pub(super) fn member_state(&mut self, id: &NodeId) -> Option<(u16, State)> {
        let foca = &self.foca;
        self.positions.state(|| foca.iter_membership_state(), id)
    }
}
