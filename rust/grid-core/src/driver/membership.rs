//! Who is who: the live holder of each site name and the conflicts over it, leave
//! notices, joining through the seeds, and [`Driver::settle`], which turns foca's
//! notifications and newly stored items into [`Event`]s and arms the timers that depend on
//! connectivity.
//!
//! Held apart because these rules decide which identities the driver listens to and what
//! the host hears about membership, independently of how messages are exchanged.

use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::time::Duration;

use foca::{Member, OwnedNotification, State};
use hashbrown::hash_table::{Entry, HashTable};
use rand::Rng;

use crate::driver::config::max_transmissions;
use crate::driver::timers::TimerEvent;
use crate::identity::{NodeId, PackedId, RawId};
use crate::lanes::lock;
use crate::lanes::repair::REPAIR_INTERVAL;
use crate::wire::session::Transmit;
use crate::wire::{Reader, WireError, KIND_CONFLICT, KIND_LEAVE, MAX_MESSAGE_LEN};

use super::report::foca_error_index;
use super::{Driver, Event, MemberState};

use super::walk::CatchUp;

/// The live identity holding each site name, as foca reported it up: two words per member
/// (a table keyed by name beside the identity would hold the name twice), found by the
/// hash of its site that every identity carries inline, so that checking whether an
/// identity holds its site (for every entry of every sync) hashes no name.
pub(super) struct Holders {
    table: HashTable<PackedId>,
    /// Keys the table's hash, so that names chosen to collide in it cannot be made up
    /// without knowing it (the site hash itself is a fixed function of the name).
    seed: [u64; 2],
}

impl Default for Holders {
    fn default() -> Holders {
        let random = RandomState::new();
        Holders {
            table: HashTable::new(),
            seed: [random.hash_one(1u8), random.hash_one(2u8)],
        }
    }
}

impl Holders {
    /// Where a site with this site hash sits in the table: the hash folded through a
    /// multiplication keyed by the seed.
    fn hash(&self, site_key: u64) -> u64 {
        folded_hash(self.seed, site_key)
    }

    fn find(&self, id: &NodeId) -> Option<&PackedId> {
        self.table
            .find(self.hash(id.site_key()), |holder| holder.same_site(id))
    }

    /// The live identity holding `id`'s site (perhaps `id` itself).
    #[cfg(test)]
    fn holder_of(&self, id: &NodeId) -> Option<NodeId> {
        self.find(id).map(PackedId::unpack)
    }

    /// Whether `id` holds its site.
    pub(super) fn holds(&self, id: &NodeId) -> bool {
        self.find(id).is_some_and(|holder| holder.is(id))
    }

    /// `id` holds its site from now on, in place of whoever held it.
    pub(super) fn insert(&mut self, id: NodeId) {
        let seed = self.seed;
        let entry = self.table.entry(
            self.hash(id.site_key()),
            |holder| holder.same_site(&id),
            |holder| folded_hash(seed, holder.site_key()),
        );
        match entry {
            Entry::Occupied(mut held) => *held.get_mut() = id.into(),
            Entry::Vacant(free) => {
                free.insert(id.into());
            }
        }
    }

    /// Nobody holds `id`'s site any longer.
    pub(super) fn remove(&mut self, id: &NodeId) {
        if let Ok(held) = self
            .table
            .find_entry(self.hash(id.site_key()), |holder| holder.same_site(id))
        {
            held.remove();
        }
    }
}

/// A multiplication's two halves folded together, of the site hash and the seed.
fn folded_hash(seed: [u64; 2], site_key: u64) -> u64 {
    let product = u128::from(site_key ^ seed[0]) * u128::from(seed[1] | 1);
    (product as u64) ^ ((product >> 64) as u64)
}

/// Leave notices remembered (one per address); the oldest are forgotten first.
const LEFT_CAPACITY: usize = 4096;
/// Name conflicts remembered, so each is reported once.
const CONFLICTS_REMEMBERED: usize = 1024;

impl Driver {
    /// Whether a verified sender may be heard: it must not contest a site name that another
    /// live identity holds. Reports and answers conflicts.
    pub(super) fn admit_sender<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: &NodeId,
        out: &mut O,
    ) -> bool {
        if sender.site_key() == self.foca.identity().site_key()
            && sender.site() == self.foca.identity().site()
        {
            let me = self.foca.identity().clone();
            if *sender == me {
                return false;
            }
            if sender.node_addr() == me.node_addr() && sender.generation() < me.generation() {
                self.stats.dropped_superseded += 1;
                return false;
            }
            self.stats.name_conflicts += 1;
            // The identity that started first keeps the name; a tie goes by address so
            // both sides agree.
            let yielded =
                (sender.generation(), sender.node_addr()) < (me.generation(), me.node_addr());
            if yielded {
                self.yielded = true;
                self.membership_changed = true;
            } else if self.session.may_answer(now, sender.socket_addr()) {
                // Show the newcomer, with our own signature, that the name is taken.
                self.session
                    .send_hello(now, sender.socket_addr(), false, out);
            }
            self.report_conflict(sender, yielded);
            return false;
        }
        let Some(holder) = self.contested_by(sender) else {
            return true;
        };
        self.stats.name_conflicts += 1;
        let to = sender.socket_addr();
        if self.session.may_answer(now, to) {
            let mut notice = Vec::with_capacity(MAX_MESSAGE_LEN);
            notice.push(KIND_CONFLICT);
            self.foca.identity().encode(&mut notice);
            holder.encode(&mut notice);
            self.session.send(now, to, &mut notice, out);
        }
        false
    }

    /// The live identity holding `id`'s site, if it is another one than `id` and `id` is
    /// not its next life at the same address.
    pub(super) fn contested_by(&self, id: &NodeId) -> Option<NodeId> {
        // Asked for every message a verified sender sends: the holder is compared where it
        // is held, and taken (a reference count on a place other nodes share) only when
        // it does contest.
        let holder = self.holders.find(id)?;
        let successor =
            holder.node_addr() == id.node_addr() && holder.generation() <= id.generation();
        (!successor).then(|| holder.unpack())
    }

    fn report_conflict(&mut self, other: &NodeId, yielded: bool) {
        if self.conflicts.len() >= CONFLICTS_REMEMBERED {
            self.conflicts.clear();
        }
        if self.conflicts.insert(other.clone()) || yielded {
            self.events.push(Event::NameConflict {
                other: other.clone(),
                yielded,
            });
        }
    }

    /// A peer says another identity holds our site name: ask that identity for its
    /// `HELLO`; if it answers, [`Driver::admit_sender`] settles which of us keeps the name.
    pub(super) fn handle_conflict<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        RawId::decode(&mut r)?; // the sender, known from the envelope
        let holder = NodeId::decode(&mut r, &self.interner)?;
        if !r.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        let me = self.foca.identity();
        if holder.site() == me.site() && holder != *me {
            let to = holder.socket_addr();
            if self.session.may_answer(now, to) {
                self.session.send_hello(now, to, true, out);
            }
        }
        Ok(())
    }

    pub(super) fn view_state(&self, member: &Member<NodeId>) -> MemberState {
        match member.state() {
            State::Alive => MemberState::Alive,
            State::Suspect => MemberState::Suspect,
            State::Down if self.is_left(member.id()) => MemberState::Left,
            State::Down => MemberState::Down,
        }
    }

    pub(super) fn is_left(&self, id: &NodeId) -> bool {
        self.left.get(&id.site_addr()) == Some(&id.generation())
    }

    /// Records a leave notice; false if it was known already.
    pub(super) fn remember_left(&mut self, id: &NodeId) -> bool {
        let addr = id.site_addr();
        match self.left.insert(addr, id.generation()) {
            Some(previous) if previous == id.generation() => false,
            Some(_) => true,
            None => {
                self.left_order.push_back(addr);
                if self.left_order.len() > LEFT_CAPACITY {
                    if let Some(oldest) = self.left_order.pop_front() {
                        self.left.remove(&oldest);
                    }
                }
                true
            }
        }
    }

    /// Turns foca's notifications and newly received items into events, arms timers that
    /// depend on connectivity and re-tunes the retransmit budget to the cluster size.
    pub(super) fn settle(&mut self, now: Duration) {
        self.sign_own_items_again();
        let mut notes = std::mem::take(&mut self.notes);
        for note in notes.drain(..) {
            match note {
                OwnedNotification::MemberUp(id) => {
                    self.membership_changed = true;
                    self.suspected.remove(&id);
                    self.holders.insert(id.clone());
                    lock(&self.store).set_live(&id, true);
                    self.recover_items_of(now, &id);
                    if self.catch_up == CatchUp::Due {
                        // The first member found (say, a joiner reaching this seed): walk
                        // its store now rather than at the next push/pull.
                        self.start_catching_up();
                        self.timers.push(now, TimerEvent::SyncWith(id.clone()));
                    }
                    self.events.push(Event::MemberUp(id));
                }
                OwnedNotification::MemberDown(id) => {
                    self.membership_changed = true;
                    self.suspected.remove(&id);
                    if self.holders.holds(&id) {
                        self.holders.remove(&id);
                        lock(&self.store).set_live(&id, false);
                    }
                    if self.is_left(&id) {
                        self.events.push(Event::MemberLeft(id));
                    } else {
                        self.events.push(Event::MemberDown(id));
                    }
                }
                OwnedNotification::Rename(previous, current) => {
                    self.membership_changed = true;
                    self.holders.insert(current.clone());
                    lock(&self.store).set_live(&current, true);
                    self.recover_items_of(now, &current);
                    self.events.push(Event::MemberRenamed { previous, current });
                }
                OwnedNotification::Active => {
                    if !self.push_pull_armed {
                        self.push_pull_armed = true;
                        // A random phase, so nodes that come up together (a fleet restart)
                        // do not all sync in the same instant, period after period.
                        let period = self.config.push_pull_period(self.foca.num_members() + 1);
                        let phase = period.mul_f64(self.rng.random::<f64>());
                        self.timers.push(now + phase, TimerEvent::PushPull);
                    }
                    if !self.repair_armed {
                        self.repair_armed = true;
                        let phase = REPAIR_INTERVAL.mul_f64(self.rng.random::<f64>());
                        self.timers.push(now + phase, TimerEvent::Repair);
                    }
                }
                OwnedNotification::Idle => {
                    // Alone: whatever happened meanwhile is learned by walking a peer's
                    // store from the start once members are found again.
                    self.catch_up = CatchUp::Due;
                    self.pull_resume = None;
                    if self.join_retry.is_none() && !self.seeds.is_empty() && !self.stopped() {
                        self.join_retry = Some(0);
                        self.timers
                            .push(now + self.config.probe_interval, TimerEvent::JoinRetry);
                    }
                }
                OwnedNotification::Rejoin(_) => self.membership_changed = true,
                // Probe and traffic notices are taken in `Rt::notify`, never queued.
                OwnedNotification::Defunct
                | OwnedNotification::DataReceived(_)
                | OwnedNotification::DataSent(_)
                | OwnedNotification::ProbeFailed(..) => {}
            }
        }
        self.notes = notes;

        let mut store = lock(&self.store);
        for item in store.take_fresh() {
            self.stats.items_delivered += 1;
            self.events.push(Event::Item(item));
        }
        drop(store);

        let wanted = max_transmissions(self.foca.num_members() + 1).get();
        if wanted != self.tuned_for {
            let config = self.config.foca_config(self.foca.num_members() + 1);
            match self.foca.set_config(config.clone()) {
                Ok(()) => {
                    self.tuned_for = wanted;
                    self.foca_config = config;
                }
                Err(err) => self.stats.foca_errors[foca_error_index(&err)] += 1,
            }
        }
    }

    /// A member is up: if this node forgot its site's items while it was away, a sync with
    /// it brings them back now.
    fn recover_items_of(&mut self, now: Duration, back: &NodeId) {
        if lock(&self.store).has_forgotten(back.site()) {
            self.timers.push(now, TimerEvent::SyncWith(back.clone()));
        }
    }

    /// Announces to the seeds and asks one of them for its full state. While no member is
    /// known the announcement is repeated with backoff.
    pub fn join<O: Transmit + ?Sized>(&mut self, now: Duration, seeds: &[SocketAddr], out: &mut O) {
        if self.stopped() {
            return;
        }
        let own = self.identity().socket_addr();
        self.seeds.clear();
        for seed in seeds {
            if *seed != own && !self.seeds.contains(seed) {
                self.seeds.push(*seed);
            }
        }
        self.contact_seeds(now, out);
        if self.join_retry.is_none() && !self.seeds.is_empty() {
            self.join_retry = Some(0);
            self.timers
                .push(now + self.config.probe_interval, TimerEvent::JoinRetry);
        }
        self.settle(now);
    }

    pub(super) fn contact_seeds<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.seeds.is_empty() {
            return;
        }
        for seed in self.seeds.clone() {
            self.foca_call(now, out, |foca, rt| {
                foca.announce(NodeId::placeholder(seed), rt)
            });
        }
        let seed = self.seeds[self.rng.random_range(0..self.seeds.len())];
        self.start_sync(now, seed, out);
    }

    pub(super) fn join_retry<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        let Some(attempt) = self.join_retry else {
            return;
        };
        if self.stopped() || self.foca.num_members() > 0 || self.seeds.is_empty() {
            self.join_retry = None;
            return;
        }
        self.contact_seeds(now, out);
        let next = (attempt + 1).min(4);
        self.join_retry = Some(next);
        self.timers.push(
            now + self.config.probe_interval * (1 << next),
            TimerEvent::JoinRetry,
        );
    }

    /// Leaves on purpose: tells every active member first (so they record `left`, not
    /// `down`), then lets foca gossip its own Down. The driver ignores input afterwards.
    pub fn leave<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        if self.stopped() {
            return;
        }
        let peers: Vec<_> = self
            .foca
            .iter_members()
            .map(|member| member.id().socket_addr())
            .collect();
        let mut notice = Vec::with_capacity(MAX_MESSAGE_LEN);
        for peer in peers {
            notice.clear();
            notice.push(KIND_LEAVE);
            self.foca.identity().encode(&mut notice);
            self.session.send(now, peer, &mut notice, out);
        }
        self.foca_call(now, out, |foca, rt| foca.leave_cluster(rt));
        self.has_left = true;
        self.settle(now);
    }

    /// A leave notice: its body is the sender's own identity, so only a site's key holder
    /// can say that site is leaving.
    pub(super) fn handle_leave<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        leaver: NodeId,
        body: &[u8],
        out: &mut O,
    ) -> Result<(), WireError> {
        let mut r = Reader::new(body);
        RawId::decode(&mut r)?; // the leaver, known from the envelope
        if !r.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        if !self.remember_left(&leaver) {
            return Ok(());
        }
        self.stats.leave_notices += 1;
        let known_down = self
            .foca
            .iter_membership_state()
            .any(|m| m.id() == &leaver && m.state() == State::Down);
        if known_down {
            // It was declared down before its notice arrived: correct the record.
            self.membership_changed = true;
            self.events.push(Event::MemberLeft(leaver));
            return Ok(());
        }
        let down = Member::new(leaver, 0, State::Down);
        self.foca_call(now, out, |foca, rt| {
            foca.apply_many(std::iter::once(down), true, rt)
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Arc;

    fn id(site: &str, port: u16, generation: u64) -> NodeId {
        let addr: SocketAddr = format!("10.0.0.1:{port}").parse().unwrap();
        NodeId::new(Arc::from(site), addr, generation)
    }

    #[test]
    fn one_holder_per_site_found_by_any_copy_of_its_identity() {
        let mut holders = Holders::default();
        let sites: Vec<NodeId> = (0..2_000)
            .map(|i| id(&format!("site-{i}"), 7000, 1))
            .collect();
        for site in &sites {
            holders.insert(site.clone());
        }
        for site in &sites {
            // A copy with a place of its own (as another interner would decode it).
            let copy = id(site.site(), 7000, 1);
            assert!(holders.holds(&copy), "{copy:?}");
            assert_eq!(holders.holder_of(&copy), Some(site.clone()));
        }
        let next_life = id("site-7", 7000, 2);
        assert!(!holders.holds(&next_life));
        holders.insert(next_life.clone());
        assert!(holders.holds(&next_life));
        assert!(!holders.holds(&sites[7]));
        assert_eq!(holders.holder_of(&sites[7]), Some(next_life.clone()));
        let elsewhere = id("site-8", 7100, 1);
        assert!(!holders.holds(&elsewhere));
        assert_eq!(holders.holder_of(&elsewhere), Some(sites[8].clone()));
        holders.remove(&next_life);
        assert_eq!(holders.holder_of(&sites[7]), None);
        assert!(holders.holds(&sites[6]) && holders.holds(&sites[9]));
        assert_eq!(holders.holder_of(&id("site-unknown", 7000, 1)), None);
    }
}
