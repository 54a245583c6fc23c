//! Where each member sits in foca's member list, so that reading one member's state is a
//! hash lookup rather than a scan.
//!
//! foca keeps its members in a `Vec` and offers no lookup by identity; the driver reads a
//! member's state for every entry a sync or a gossip message carries, and a scan per entry
//! makes a sync O(N²) (a cluster of 10,000 spent most of its time there). The index only
//! remembers positions and checks each one it uses against foca's list, which it reads by
//! position in O(1), so it never has to follow foca's changes (inserts, removals and the
//! shuffle at the end of each probe round move members about): a position found stale is
//! looked up again by a scan. foca keeps at most one entry per [`SiteAddr`], so the answer
//! is always the scan's.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use foca::{Member, State};

use crate::identity::{NodeId, SiteAddr};

/// Positions in foca's member list by [`key`] of the member's [`SiteAddr`]: eight bytes an
/// entry, since every node of a large cluster holds one per member.
#[derive(Default)]
pub(super) struct Positions {
    at: HashMap<u32, u32, BuildHasherDefault<KeyHasher>>,
    /// Members [`Positions::held`] found without a position, or not at theirs, since every
    /// position was last learned: each sends one entry to foca's linear scan, so past a
    /// few the next [`Positions::refresh`] learns them all again.
    missed: usize,
}

impl Positions {
    /// The incarnation and state foca holds for exactly `id`, if it holds it; `members`
    /// reads foca's list (`Foca::iter_membership_state`, whose `nth` is O(1)).
    pub(super) fn state<'a, I>(
        &mut self,
        members: impl Fn() -> I,
        id: &NodeId,
    ) -> Option<(u16, State)>
    where
        I: ExactSizeIterator<Item = &'a Member<NodeId>>,
    {
        let site_addr = id.site_addr();
        let key = key(&site_addr);
        let cached = self
            .at
            .get(&key)
            .and_then(|&at| members().nth(at as usize))
            .filter(|m| m.id().site_addr() == site_addr);
        let member = match cached {
            Some(member) => member,
            None => {
                let (at, member) = members()
                    .enumerate()
                    .find(|(_, m)| m.id().site_addr() == site_addr)?;
                if self.at.len() < members().len() / 2 {
                    // Mostly unknown (a fresh node, or a cluster that grew): one pass
                    // learns every position, instead of one scan per member looked up.
                    for (at, m) in members().enumerate() {
                        self.at.insert(self::key(&m.id().site_addr()), at as u32);
                    }
                } else {
                    self.at.insert(key, at as u32);
                }
                member
            }
        };
        (member.id() == id).then(|| (member.incarnation(), member.state()))
    }

    /// Learns the position of every member of foca's list if fewer than 15 in 16 have one
    /// (a fresh node, or a cluster that grew): each pass covers a sixteenth more of a
    /// growing list, so a node filling its list pays O(N) in all. Also if more than one
    /// member in 64 was missed since the last pass (positions learned while the list was
    /// filling, members moved since): one O(N) pass instead of an O(N) scan in foca for
    /// each of them at every sync.
    pub(super) fn refresh<'a>(
        &mut self,
        members: impl ExactSizeIterator<Item = &'a Member<NodeId>>,
    ) {
        let len = members.len();
        if self.at.len() * 16 >= len * 15 && self.missed * 64 <= len {
            return;
        }
        self.missed = 0;
        self.at.clear();
        for (at, m) in members.enumerate() {
            self.at.insert(key(&m.id().site_addr()), at as u32);
        }
    }

    /// [`Positions::held`] for each of `keys` (None for a key that is None), in two passes
    /// over them (every position looked up, then foca's list read at each) rather than key
    /// by key, so that the reads of one key, which mostly miss every cache in a large
    /// cluster, need not wait for the previous key's. `members` gives foca's list.
    pub(super) fn held_all<'a, I>(
        &mut self,
        members: impl Fn() -> I,
        keys: &[Option<SiteAddr>],
    ) -> Vec<Option<&'a Member<NodeId>>>
    where
        I: ExactSizeIterator<Item = &'a Member<NodeId>>,
    {
        let hints: Vec<_> = keys
            .iter()
            .map(|key| key.as_ref().and_then(|key| self.hint(key)))
            .collect();
        keys.iter()
            .zip(hints)
            .map(|(key, hint)| self.at_hint(members(), key.as_ref()?, hint))
            .collect()
    }

    /// Where `site_addr` was last found in foca's list: a hint, for [`Positions::at_hint`].
    fn hint(&self, site_addr: &SiteAddr) -> Option<usize> {
        self.at.get(&key(site_addr)).map(|&at| at as usize)
    }

    /// The member foca holds for `site_addr` if it is at `hint` in foca's list (as
    /// [`Positions::held`], the hint looked up beforehand).
    fn at_hint<'a>(
        &mut self,
        mut members: impl ExactSizeIterator<Item = &'a Member<NodeId>>,
        site_addr: &SiteAddr,
        hint: Option<usize>,
    ) -> Option<&'a Member<NodeId>> {
        let found = hint
            .and_then(|at| members.nth(at))
            .filter(|m| m.id().site_addr() == *site_addr);
        if found.is_none() {
            self.missed += 1;
        }
        found
    }

    /// The member foca holds for `site_addr`, found at its known position in foca's list
    /// (`Foca::iter_membership_state`, whose `nth` is O(1)); None if it has no position or
    /// is not at it (counted towards the next [`Positions::refresh`]).
    pub(super) fn held<'a>(
        &mut self,
        members: impl ExactSizeIterator<Item = &'a Member<NodeId>>,
        site_addr: &SiteAddr,
    ) -> Option<&'a Member<NodeId>> {
        let hint = self.hint(site_addr);
        self.at_hint(members, site_addr, hint)
    }
}

/// A 32-bit key of a site at an address. Two sites may share one (then each lookup of the
/// other scans again); the answer never depends on it.
fn key(site_addr: &SiteAddr) -> u32 {
    let raw = site_addr.addr.to_raw();
    let low = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
    let high = u64::from_le_bytes(raw[8..16].try_into().expect("8 bytes"));
    let port = u64::from(u16::from_le_bytes([raw[16], raw[17]]));
    let hash = [low, high, port]
        .into_iter()
        .fold(site_addr.site_key, |hash, word| {
            (hash ^ word)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
        });
    (hash ^ (hash >> 32)) as u32
}

/// The keys are hashes already: the map only spreads them over 64 bits.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u32(&mut self, value: u32) {
        // Spread over the high bits too, which the table's control bytes are taken from.
        self.0 = u64::from(value).wrapping_mul(0x9E37_79B9_7F4A_7C15);
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

    fn scan(members: &[Member<NodeId>], id: &NodeId) -> Option<(u16, State)> {
        members
            .iter()
            .find(|m| m.id() == id)
            .map(|m| (m.incarnation(), m.state()))
    }

    #[test]
    fn answers_as_a_scan_would_while_members_move() {
        let mut members: Vec<Member<NodeId>> = (0..50)
            .map(|i| Member::new(id(&format!("s{i}"), 7000 + i, 1), i, State::Alive))
            .collect();
        let mut positions = Positions::default();
        let check = |members: &[Member<NodeId>], positions: &mut Positions| {
            for i in 0..60 {
                for generation in [1, 2] {
                    let probe = id(&format!("s{i}"), 7000 + i, generation);
                    assert_eq!(
                        positions.state(|| members.iter(), &probe),
                        scan(members, &probe),
                        "{probe:?}"
                    );
                }
            }
        };
        check(&members, &mut positions);
        members.reverse();
        members.swap_remove(3);
        let renamed = members
            .iter()
            .position(|m| &**m.id().site() == "s40")
            .unwrap();
        members[renamed] = Member::new(id("s40", 7040, 2), 0, State::Suspect);
        members.push(Member::new(id("s55", 7055, 1), 2, State::Down));
        check(&members, &mut positions);
        members.rotate_left(17);
        check(&members, &mut positions);
    }
}
