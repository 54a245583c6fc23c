//! Gossiped member entries that would change nothing: found before foca scans its list for
//! each, and before their identities are interned or screened.
//!
//! Under loss every foca message carries dozens of suspicions and refutations, and a
//! member hears each of them many times over: the same news again, or news its subject
//! has already refuted. foca finds out that such an entry changes nothing by a linear scan
//! of its member list, after the codec has interned the entry's identity. Here the entries
//! of a packet are read raw and checked against foca's list at the positions the driver
//! knows ([`super::positions`]), in passes over the whole packet (read the entries, find
//! their positions, read foca's list, find their sites' holders) so that one entry's
//! reads, which mostly miss every cache in a large cluster, need not wait for the
//! previous entry's.

use foca::{Member, State};

use crate::identity::{NodeId, RawId};
use crate::wire::{state_of, Reader};

use super::Driver;

/// A member entry (foca's encoding, in gossip and in syncs) read raw: its identity is not
/// interned.
pub(super) struct RawEntry<'a> {
    pub(super) id: RawId<'a>,
    pub(super) incarnation: u16,
    pub(super) state: State,
    /// Its length in bytes.
    pub(super) len: usize,
}

impl<'a> RawEntry<'a> {
    /// The entry `entries` starts with; None if it does not read.
    pub(super) fn read(entries: &'a [u8]) -> Option<RawEntry<'a>> {
        let mut r = Reader::new(entries);
        let id = RawId::decode(&mut r).ok()?;
        let incarnation = r.u16().ok()?;
        let state = state_of(r.u8().ok()?).ok()?;
        let len = entries.len() - r.unread().len();
        Some(RawEntry {
            id,
            incarnation,
            state,
            len,
        })
    }
}

/// Whether foca, holding `known`, would change it on hearing `state` at `incarnation` of
/// the same identity: the order of preference of SWIM's suspicion subprotocol (section 4.2
/// of the paper), as foca implements it. Down is final; a suspicion overrides alive at the
/// same incarnation; anything else needs a higher one.
fn would_change(known: &Member<NodeId>, incarnation: u16, state: State) -> bool {
    let held = known.incarnation();
    match (known.state(), state) {
        (State::Down, _) => false,
        (_, State::Down) => true,
        (State::Alive, State::Suspect) => incarnation >= held,
        _ => incarnation > held,
    }
}

/// One entry of a foca packet, as [`Driver::gossip_entries`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GossipEntry {
    /// It would change nothing, in foca or in screening: passed over. Its length.
    Known(usize),
    /// It may be news: it takes the full path. Its length.
    News(usize),
}

impl Driver {
    /// For each of the first entries of `entries` (at most `total`), in order, whether it
    /// would change nothing; the list stops at an entry that does not read (the full path
    /// then reports why). An entry is known when it names the identity foca holds at the
    /// entry's address, and foca holding it would not change it. Unless every identity
    /// counts as verified (`unsigned`), it must also be one screening passes untouched: of
    /// its site's live holder, and alive, or a suspicion older than what foca holds (a
    /// suspicion at the incarnation held starts this node's own clock on it, and a Down
    /// claim becomes a suspicion). An entry about this node's own address is never known
    /// (foca's own rules apply).
    pub(super) fn gossip_entries(
        &mut self,
        entries: &[u8],
        total: u16,
        unsigned: bool,
    ) -> Vec<GossipEntry> {
        let mut raws = Vec::with_capacity(usize::from(total));
        let mut rest = entries;
        for _ in 0..total {
            let Some(raw) = RawEntry::read(rest) else {
                break;
            };
            rest = &rest[raw.len..];
            raws.push(raw);
        }
        let own = self.foca.identity().site_addr();
        let keys: Vec<_> = raws
            .iter()
            .map(|raw| Some(raw.id.site_addr()).filter(|key| *key != own))
            .collect();
        let Driver {
            foca,
            positions,
            holders,
            ..
        } = self;
        let held = positions.held_all(|| foca.iter_membership_state(), &keys);
        let known: Vec<_> = raws
            .iter()
            .zip(held)
            .map(|(raw, known)| {
                let known = known?;
                let screened_untouched = unsigned
                    || match raw.state {
                        State::Alive => true,
                        State::Suspect => raw.incarnation < known.incarnation(),
                        State::Down => false,
                    };
                (screened_untouched
                    && known.id().is_raw(&raw.id)
                    && !would_change(known, raw.incarnation, raw.state))
                .then_some(known)
            })
            .collect();
        raws.iter()
            .zip(known)
            .map(|(raw, known)| {
                if known.is_some_and(|known| unsigned || holders.holds(known.id())) {
                    GossipEntry::Known(raw.len)
                } else {
                    GossipEntry::News(raw.len)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use foca::{AccumulatingRuntime, Foca};
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    use super::*;
    use crate::driver::config::SwimConfig;
    use crate::wire::WireCodec;

    /// `would_change` says what foca itself does: for every state and incarnation held and
    /// heard, the member foca holds after applying the entry differs exactly when it says so.
    #[test]
    fn would_change_is_what_foca_does() {
        let states = [State::Alive, State::Suspect, State::Down];
        let me = NodeId::new("site-a".into(), "10.0.0.1:7946".parse().expect("addr"), 1);
        let them = NodeId::new("site-b".into(), "10.0.0.2:7946".parse().expect("addr"), 1);
        let (mut checked, mut changed) = (0, 0);
        for held_state in states {
            for heard_state in states {
                for heard in 0..3 {
                    let mut foca = Foca::new(
                        me.clone(),
                        SwimConfig::default().foca_config(2),
                        SmallRng::seed_from_u64(1),
                        WireCodec::default(),
                    );
                    let mut rt = AccumulatingRuntime::new();
                    let held = Member::new(them.clone(), 1, held_state);
                    foca.apply_many(std::iter::once(held.clone()), false, &mut rt)
                        .expect("held");
                    let before = foca.iter_membership_state().next().expect("held").clone();
                    assert_eq!(before, held);
                    let heard = Member::new(them.clone(), heard, heard_state);
                    foca.apply_many(std::iter::once(heard.clone()), false, &mut rt)
                        .expect("heard");
                    let after = foca.iter_membership_state().next().expect("held");
                    assert_eq!(
                        *after != before,
                        would_change(&before, heard.incarnation(), heard.state()),
                        "held {before:?}, heard {heard:?}"
                    );
                    checked += 1;
                    changed += usize::from(*after != before);
                }
            }
        }
        assert_eq!(checked, 27);
        assert!((1..27).contains(&changed), "{changed} of 27 changed");
    }
}
