//! A digest of a node's view of the membership, so that a push/pull sync between two nodes
//! that see the members alike carries none of them (protocol 3 on).
//!
//! Every sync used to carry up to [`super::carry::MAX_MEMBER_CHUNKS`] of the sender's
//! members, each of which the receiver decodes and looks up: between converged members
//! nearly all of it says what the receiver holds already, and at 10,000 members it was
//! about half of what a node spends. Now a sync's first chunk carries [`ENTRY_VIEW`]: the
//! digest of the members the sender holds and of itself, alive at its own incarnation (as
//! the others hold it once they agree), so that two nodes that agree compute the same
//! digest though neither holds itself in foca's list. An answer leaves its members out
//! when the request's digest is its own; a request leaves them out when this node's
//! digest has not changed since a digest last agreed with a peer's. A digest that differs
//! puts members back in both directions: the answer carries them, and the node that found
//! the difference sends them with its next request.
//!
//! Held apart because the digest is a rule two builds must agree on, not a detail of how
//! syncs are exchanged.
//!
//! [`ENTRY_VIEW`]: super::chunks::ENTRY_VIEW

use foca::{Member, State};

use crate::identity::NodeId;
use crate::wire::state_byte;
use crate::wire::versions::VIEW_DIGEST_SINCE;

use std::net::SocketAddr;

use super::Driver;

/// What a sync's first chunk says of the sender's view: its digest, and whether the sync
/// leaves its members out because the views agree.
#[derive(Clone, Copy, Debug)]
pub(super) struct ViewSent {
    pub(super) digest: u64,
    pub(super) members_left_out: bool,
}

impl Driver {
    /// What a sync request to `peer` says of this node's view: nothing to a peer that
    /// does not read view digests; else the digest, and its members are left out while
    /// the digest has not moved since one last agreed.
    pub(super) fn request_view(&self, peer: SocketAddr) -> Option<ViewSent> {
        self.peer_speaks(peer, VIEW_DIGEST_SINCE).then(|| {
            let digest = self.view_digest();
            ViewSent {
                digest,
                members_left_out: self.view_agreed == Some(digest),
            }
        })
    }

    /// Compares the view digest `theirs` a peer sent with this node's, remembers whether
    /// they agreed (for this node's next request), and says what an answer to that peer
    /// sends: members only if they did not agree.
    pub(super) fn hear_view(&mut self, theirs: u64) -> ViewSent {
        let digest = self.view_digest();
        let agreed = digest == theirs;
        self.view_agreed = agreed.then_some(digest);
        ViewSent {
            digest,
            members_left_out: agreed,
        }
    }

    fn view_digest(&self) -> u64 {
        let me = self.foca.identity();
        view_digest(
            self.foca.iter_membership_state(),
            me,
            self.probe.incarnation,
        )
    }
}

/// The digest of a view: the members held (`members`, foca's list) and the node itself
/// (`me` at `incarnation`, alive).
///
/// A sum of one hash per member, so that the order foca keeps its list in does not matter
/// and no member cancels another. Members held down are left out: each node forgets them
/// on its own clock, so two converged views would differ by those still remembered; a node
/// that still holds one alive has it in its digest, and that differs. Each hash reads
/// only what an entry of foca's list holds inline (not the address, behind a pointer), so
/// a digest of 10,000 members is one pass over 320 KB rather than 10,000 cache misses.
pub(super) fn view_digest<'a>(
    members: impl Iterator<Item = &'a Member<NodeId>>,
    me: &NodeId,
    incarnation: u16,
) -> u64 {
    let own = member_hash(me, incarnation, State::Alive);
    members
        .filter(|member| member.state() != State::Down)
        .fold(own, |digest, member| {
            digest.wrapping_add(member_hash(
                member.id(),
                member.incarnation(),
                member.state(),
            ))
        })
}

/// One member's hash: its site's hash, generation, incarnation and state, mixed so that
/// every bit of each moves the result. Fixed, not keyed: two nodes must compute the same
/// for the same member. The address is left out: a site's lives differ by generation.
fn member_hash(id: &NodeId, incarnation: u16, state: State) -> u64 {
    let hash = mix(id.site_key() ^ mix(id.generation()));
    let tail = u64::from(incarnation) << 8 | u64::from(state_byte(state));
    mix(hash ^ tail)
}

/// A 64-bit finalizer (the one of SplitMix64): every input bit flips each output bit with
/// probability about one half.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn id(site: &str) -> NodeId {
        NodeId::new(Arc::from(site), SocketAddr::from(([10, 0, 0, 1], 7000)), 1)
    }

    fn member(site: &str, incarnation: u16, state: State) -> Member<NodeId> {
        Member::new(id(site), incarnation, state)
    }

    #[test]
    fn two_nodes_that_agree_compute_one_digest() {
        // A is at incarnation 2 (it refuted twice), and B holds it so; B is at 0.
        let held_by_a = [member("b", 0, State::Alive), member("c", 1, State::Suspect)];
        let held_by_b = [
            member("c", 1, State::Suspect),
            member("e", 4, State::Down),
            member("a", 2, State::Alive),
        ];
        let from_a = view_digest(held_by_a.iter(), &id("a"), 2);
        let from_b = view_digest(held_by_b.iter(), &id("b"), 0);
        assert_eq!(from_a, from_b);
        // B holds A at an incarnation A has left behind: they differ.
        assert_ne!(view_digest(held_by_a.iter(), &id("a"), 3), from_b);
    }

    #[test]
    fn any_difference_in_a_member_is_seen() {
        let me = id("a");
        let digest = |members: &[Member<NodeId>]| view_digest(members.iter(), &me, 0);
        let reference = digest(&[member("c", 1, State::Alive)]);
        let other_life = Member::new(
            NodeId::new(Arc::from("c"), SocketAddr::from(([10, 0, 0, 1], 7000)), 2),
            1,
            State::Alive,
        );
        for other in [
            member("c", 2, State::Alive),
            member("c", 1, State::Suspect),
            member("x", 1, State::Alive),
            other_life,
        ] {
            assert_ne!(digest(std::slice::from_ref(&other)), reference, "{other:?}");
        }
        // A member held twice does not cancel out, as it would in an exclusive or.
        let once = digest(&[member("c", 1, State::Alive)]);
        let twice = digest(&[member("c", 1, State::Alive), member("c", 1, State::Alive)]);
        assert_ne!(twice, digest(&[]));
        assert_ne!(twice, once);
    }
}
