//! The authenticated layer between the frame and the SWIM driver.
//!
//! Every outgoing message gets the sender's next sequence number, its wall-clock time, the
//! address it is sent to and a proof of its sender (see [`crate::wire`]): a tag under the
//! session key agreed with the receiver ([`pairs`], [`crate::wire::handshake`]) if there is
//! one, the site's signature otherwise (the first messages to a new peer, peers of a
//! release before sessions, handshakes and `HELLO`s). Every incoming message passes, in
//! order, before the driver acts on it:
//!
//! 1. a sender identity whose site name follows the resource name rules;
//! 2. addressed to this node (a frame captured on its way elsewhere is refused here);
//! 3. sent within [`MAX_CLOCK_SKEW`] of our clock (an old capture is refused whatever the
//!    state of the windows: after our restart, after the sender's restart or leave);
//! 4. a sequence number its sender's replay window has not seen (RFC 6479, per sender
//!    identity, so a restarted sender starts a new window);
//! 5. in the session form, a session this node holds with exactly the sender identity,
//!    and a tag that session's key made (a message under a session this node does not
//!    hold is answered with a `HELLO` asking for one and a handshake, paced per address);
//!    no asymmetric work is spent on it;
//! 6. in the signed form, a place in the second's budget of signature checks
//!    ([`budget::SignedChecks`]: per site for identities that hold a session with this
//!    node, in all for others that may speak sessions; none for peers of a release before
//!    sessions), then a signature by the sender site's certificate key. A site's key is learned from its
//!    `HELLO`, whose certificate must name the site and chain to the network CA or match
//!    the site's pin. A message from a site whose key is unknown, or that none of its
//!    known keys signed (it may have renewed its certificate and its new `HELLO` not have
//!    arrived), is dropped, and its sender is asked for a `HELLO` (at most once per
//!    [`ANSWER_INTERVAL`] per address). The key a site signed with before its latest
//!    `HELLO` is taken for [`KEY_SWITCH_GRACE`] more ([`crate::wire::sites`]).
//!
//! A `HELLO` also says which protocol versions its sender speaks
//! ([`crate::wire::versions`]). A sender whose range shares no version with ours is refused
//! once its `HELLO` verifies: its key is not learned from it, and nothing more from that
//! identity is taken (counted as `dropped_incompatible_version`), whatever else could
//! verify it.
//!
//! Windows are only updated by messages that passed every check, so forged frames cannot
//! poison them, and replays are refused before any signature work is spent on them.
//!
//! [`Transmit`], where signed messages go, is defined here rather than in the driver: the
//! session sends every message and sits below the driver, which re-exports it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BufMut;

use crate::identity::auth::{Authority, PublicKey, FINGERPRINT_LEN, MESSAGE_DOMAIN};
use crate::identity::{validate_site, Interner, NodeAddr, NodeId};
use crate::wire::sites::{Certificate, KnownSites};
use crate::wire::versions::ProtocolRange;

pub use crate::wire::sites::KEY_SWITCH_GRACE;
use crate::wire::{
    seal_in_session, seal_message, Envelope, Proof, KIND_HANDSHAKE_INIT, KIND_HELLO,
    MAX_UNSEALED_LEN,
};

mod budget;
mod counts;
mod handshakes;
mod hello;
mod pairs;
mod senders;
mod trust;

use budget::{Limit, Pacer, SignedChecks};
pub use budget::{SIGNED_CHECKS_PER_SECOND, SIGNED_IN_SESSION_PER_SECOND};
use pairs::Pairs;
pub use pairs::{HANDSHAKE_RETRY, REJECT_AFTER, REKEY_AFTER};
use senders::Senders;

use counts::count_kind;
pub use counts::{KindCount, SessionStats, MESSAGE_KINDS};
pub use hello::hello_wants_reply;
use hello::{hello_chain, hello_protocols, HELLO_WANT_REPLY};

/// Where outgoing messages go (a socket, a simulated network). Each message is a whole
/// signed plaintext message of at most [`crate::wire::MAX_MESSAGE_LEN`] bytes; delivery is
/// best effort. It lives here, with the layer that signs and sends every message, so the
/// session does not depend on the driver above it; hosts implement it through the
/// driver's re-export, [`crate::driver::Transmit`].
pub trait Transmit {
    fn send(&mut self, to: SocketAddr, message: &[u8]);
}

/// Messages sent further than this from our clock (either way) are refused. Sites keep
/// their clocks in sync (NTP); this bounds how long a capture stays worth replaying.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);
/// A node introduces itself (`HELLO`) to an address before its first message there, and
/// again after this long.
pub const INTRODUCTION_REFRESH: Duration = Duration::from_secs(300);
/// On-demand answers (a `HELLO` asked for, a `CONFLICT` notice) go to one address at most
/// this often, so a key holder cannot turn a node into a stream of replies.
pub const ANSWER_INTERVAL: Duration = Duration::from_secs(1);
/// On-demand answers a node sends in one second, to all addresses together: what a key
/// holder can make a node send to addresses of its choosing stays bounded.
pub const ANSWERS_PER_SECOND: u32 = 64;
/// Identities per site whose replay windows are kept (a restart is a new identity); the
/// least recently heard is forgotten first.
pub const IDENTITIES_PER_SITE: usize = 4;
/// Sites whose keys a node remembers; a certificate for yet another site is refused.
pub const MAX_SITES: usize = 4096;
/// A site's certificate is checked again (dates, chain, pins) on its first `HELLO` after
/// this long; in between, its `HELLO`s only verify their signature.
pub const RECHECK_CERTIFICATES: Duration = Duration::from_secs(600);
/// Handshakes a node answers to one address at most this often...
pub const HANDSHAKE_ANSWER_INTERVAL: Duration = Duration::from_millis(250);
/// ...and to all addresses together in one second.
pub const HANDSHAKE_ANSWERS_PER_SECOND: u32 = 256;
/// Identities refused for their protocol versions that are remembered (so each is reported
/// once and its later messages are refused without signature work); past it, the list
/// starts again.
const REFUSED_MEMORY: usize = 1024;

/// What became of one incoming message.
pub enum Verdict<'a> {
    /// Fresh, addressed to us, never seen and signed by its sender's site.
    Accepted(Envelope<'a>),
    /// Well formed, but from a site whose key we do not know yet, or signed by none of the
    /// keys we know for it (its certificate may have been renewed): ask it for a `HELLO`.
    UnknownSender(NodeId),
    /// In the session form, under a session this node does not hold: answer with
    /// [`Session::answer_lost_session`].
    UnknownSession(NodeId),
    /// A verified `HELLO` from an identity that speaks no protocol version we speak.
    /// Nothing of it was kept (its key was not learned from this `HELLO`). `first`: this
    /// identity was not refused before; `wants_reply`: the `HELLO` asks for ours.
    Incompatible {
        sender: NodeId,
        theirs: ProtocolRange,
        first: bool,
        wants_reply: bool,
    },
    /// Refused and counted.
    Dropped,
}

/// Why a message did not authenticate (and was counted).
enum Unauthenticated {
    /// No key is known for the sender's site yet, or none of its known keys signed.
    UnknownSite,
    /// A bad signature or certificate.
    Refused,
    /// A verified `HELLO` whose range we share none of (`true`: refused for the first time).
    Incompatible(ProtocolRange, bool),
}

/// What [`Session::renew`] changed.
pub struct RenewedAuthority {
    /// This node's new key, if its certificate changed.
    pub key: Option<PublicKey>,
    /// Certificates the new policy refuses: site, fingerprint, whether it was current.
    pub forgotten: Vec<(Arc<str>, [u8; FINGERPRINT_LEN], bool)>,
}

pub struct Session {
    authority: Authority,
    interner: Interner,
    /// Wall-clock time (since the Unix epoch) at the driver's `now` = 0.
    wall_offset: Duration,
    seq: u64,
    local: NodeId,
    /// Each site's verified certificates: the current one and earlier ones.
    sites: KnownSites,
    senders: Senders,
    /// When each address last had our `HELLO`.
    introduced: Pacer,
    /// On-demand answers (a `HELLO` asked for, a `CONFLICT`), and handshakes answered.
    answers: Pacer,
    handshake_answers: Pacer,
    signed_checks: SignedChecks,
    /// Sessions agreed with peers, and handshakes under way.
    pairs: Pairs,
    /// The versions this node speaks and announces.
    protocols: ProtocolRange,
    /// Identities refused for their versions, with the range they named.
    refused: HashMap<NodeId, ProtocolRange>,
    stats: SessionStats,
}

impl Session {
    pub fn new(
        local: NodeId,
        authority: Authority,
        interner: Interner,
        wall_offset: Duration,
    ) -> Session {
        let mut sites = KnownSites::new(MAX_SITES);
        if let Authority::Certified { credentials, .. } = &authority {
            let own = Certificate::new(
                credentials.public_key().clone(),
                credentials.chain().to_vec(),
            );
            sites.presented(local.site(), own, Duration::ZERO);
        }
        Session {
            authority,
            interner,
            wall_offset,
            seq: 0,
            local,
            sites,
            senders: Senders::default(),
            introduced: Pacer::new(INTRODUCTION_REFRESH, u32::MAX),
            answers: Pacer::new(ANSWER_INTERVAL, ANSWERS_PER_SECOND),
            handshake_answers: Pacer::new(HANDSHAKE_ANSWER_INTERVAL, HANDSHAKE_ANSWERS_PER_SECOND),
            signed_checks: SignedChecks::new(),
            pairs: Pairs::default(),
            protocols: ProtocolRange::CURRENT,
            refused: HashMap::new(),
            stats: SessionStats::default(),
        }
    }

    /// Speaks (and announces) `protocols` instead of this build's range: for simulations
    /// and tests of meshes that mix releases.
    pub fn set_protocols(&mut self, protocols: ProtocolRange) {
        self.protocols = protocols;
    }

    /// The versions this node speaks.
    pub fn protocols(&self) -> ProtocolRange {
        self.protocols
    }

    /// The versions `id` named in its latest `HELLO`, and the one spoken with it (the
    /// highest both hold); `None` until its `HELLO` was heard.
    pub fn peer_protocols(&self, id: &NodeId) -> Option<(ProtocolRange, u8)> {
        let theirs = self.senders.get(id)?.protocols?;
        Some((theirs, self.protocols.common(theirs)?))
    }

    /// The protocol version spoken with whoever is at `to` (the identity heard from there
    /// most recently), if its `HELLO` was heard. Unsigned (a simulation, where no `HELLO`
    /// is sent and every node runs this build): this node's highest.
    pub fn version_at(&self, to: SocketAddr) -> Option<u8> {
        if self.authority.is_unsigned() {
            return Some(self.protocols.max());
        }
        let (_, sender) = self.senders.latest_at(NodeAddr::new(to))?;
        self.protocols.common(sender.protocols?)
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    pub fn stats(&self) -> SessionStats {
        let mut stats = self.stats;
        stats.sessions = self.pairs.len() as u64;
        stats
    }

    /// Follows the driver's identity (it changes when foca rejoins). Sessions were agreed
    /// with the previous identity: they are forgotten, and agreed again.
    pub fn set_local(&mut self, local: &NodeId) {
        if self.local != *local {
            self.local = local.clone();
            self.pairs.clear();
        }
    }

    /// Forgets sessions and handshakes past their time; the driver calls it now and then.
    pub fn expire_sessions(&mut self, now: Duration) {
        self.pairs.expire(now);
    }

    /// Wall-clock milliseconds at the driver's `now`.
    pub fn wall(&self, now: Duration) -> Duration {
        self.wall_offset + now
    }

    /// Whether this identity was refused for the protocol versions it speaks.
    pub fn is_refused(&self, id: &NodeId) -> bool {
        self.refused.contains_key(id)
    }

    /// Whether a message from exactly this identity passed every check.
    pub fn is_verified(&self, id: &NodeId) -> bool {
        self.authority.is_unsigned() || self.senders.contains(id)
    }

    /// Seals `message` (kind and body) for `to` and sends it, introducing this node first if
    /// `to` has not had a `HELLO` from it lately.
    pub fn send<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        to: SocketAddr,
        message: &mut Vec<u8>,
        out: &mut O,
    ) {
        let addr = NodeAddr::new(to);
        if self.authority.is_unsigned() {
            self.seal(now, addr, message);
            count_kind(&mut self.stats.sent, message);
            out.send(to, message);
            return;
        }
        let due = self
            .introduced
            .last(addr)
            .map_or(true, |at| now.saturating_sub(at) >= INTRODUCTION_REFRESH);
        if due {
            self.send_hello(now, to, false, out);
        }
        let sent_at = self.wall(now).as_millis() as u64;
        let rekey = match self.pairs.sending(now, addr) {
            Some(session) => {
                self.seq += 1;
                let (index, rekey) = (session.their_index, session.rekey);
                seal_in_session(message, self.seq, sent_at, addr, index, session.keys);
                self.stats.session_messages_sent += 1;
                rekey
            }
            None => {
                self.seal(now, addr, message);
                true
            }
        };
        count_kind(&mut self.stats.sent, message);
        out.send(to, message);
        if rekey {
            self.start_handshake(now, to, out);
        }
    }

    /// Sends this node's `HELLO` (its certificate chain) to `to`, now.
    pub fn send_hello<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        to: SocketAddr,
        want_reply: bool,
        out: &mut O,
    ) {
        let addr = NodeAddr::new(to);
        let mut hello = Vec::with_capacity(crate::wire::MAX_MESSAGE_LEN);
        hello.push(KIND_HELLO);
        self.local.encode(&mut hello);
        let want = if want_reply { HELLO_WANT_REPLY } else { 0 };
        hello.push(want | self.protocols.hello_flags());
        let chain: &[Vec<u8>] = match &self.authority {
            Authority::Certified { credentials, .. } => credentials.chain(),
            Authority::Unsigned => &[],
        };
        hello.push(chain.len() as u8);
        for der in chain {
            hello.put_u16(der.len() as u16);
            hello.put_slice(der);
        }
        debug_assert!(
            hello.len() <= MAX_UNSEALED_LEN,
            "chain size checked at start"
        );
        self.seal(now, addr, &mut hello);
        self.introduced.note(now, addr);
        self.stats.hellos_sent += 1;
        count_kind(&mut self.stats.sent, &hello);
        out.send(to, &hello);
    }

    /// Whether an on-demand answer may go to `to` now (and, if so, records that it does):
    /// one per address per [`ANSWER_INTERVAL`], [`ANSWERS_PER_SECOND`] in all.
    pub fn may_answer(&mut self, now: Duration, to: SocketAddr) -> bool {
        self.answers
            .take(now, NodeAddr::new(to))
            .unwrap_or_else(|()| {
                self.stats.answers_withheld += 1;
                false
            })
    }

    fn seal(&mut self, now: Duration, to: NodeAddr, message: &mut Vec<u8>) {
        self.seq += 1;
        let sent_at = self.wall(now).as_millis() as u64;
        let authority = &self.authority;
        seal_message(message, self.seq, sent_at, to, |signed| {
            authority.sign(MESSAGE_DOMAIN, signed)
        });
    }

    /// Checks one decrypted message; see the module documentation for the order.
    pub fn open<'a>(&mut self, now: Duration, message: &'a [u8]) -> Verdict<'a> {
        let Ok(envelope) = Envelope::decode(message, &self.interner) else {
            self.stats.dropped_malformed += 1;
            return Verdict::Dropped;
        };
        if validate_site(envelope.sender.site()).is_err() {
            self.stats.dropped_bad_identity += 1;
            return Verdict::Dropped;
        }
        if envelope.dst != self.local.node_addr() {
            self.stats.dropped_misdirected += 1;
            return Verdict::Dropped;
        }
        let wall = self.wall(now).as_millis() as u64;
        if envelope.sent_at_ms.abs_diff(wall) > MAX_CLOCK_SKEW.as_millis() as u64 {
            self.stats.dropped_stale += 1;
            return Verdict::Dropped;
        }
        if !self.senders.admits(&envelope.sender, envelope.seq) {
            self.stats.dropped_replayed += 1;
            return Verdict::Dropped;
        }
        if envelope.kind != KIND_HELLO && self.refused.contains_key(&envelope.sender) {
            self.stats.dropped_incompatible_version += 1;
            return Verdict::Dropped;
        }
        if let Proof::Session { index, tag } = envelope.proof {
            let Some(session) = self.pairs.opening(now, index) else {
                self.stats.dropped_unknown_session += 1;
                return Verdict::UnknownSession(envelope.sender.clone());
            };
            if session.peer != envelope.sender
                || !session.keys.verifies(envelope.seq, envelope.signed, tag)
            {
                self.stats.dropped_bad_tag += 1;
                return Verdict::Dropped;
            }
            self.pairs.heard_under(index);
            self.record(now, &envelope);
            self.stats.session_messages_accepted += 1;
            count_kind(&mut self.stats.accepted, message);
            return Verdict::Accepted(envelope);
        }
        match self.authenticate(now, &envelope) {
            Ok(()) => {}
            Err(Unauthenticated::UnknownSite) => {
                return Verdict::UnknownSender(envelope.sender.clone())
            }
            Err(Unauthenticated::Refused) => return Verdict::Dropped,
            Err(Unauthenticated::Incompatible(theirs, first)) => {
                return Verdict::Incompatible {
                    sender: envelope.sender.clone(),
                    theirs,
                    first,
                    wants_reply: hello_wants_reply(envelope.body, &self.interner),
                }
            }
        }
        if !self.authority.is_unsigned() {
            self.record(now, &envelope);
        }
        count_kind(&mut self.stats.accepted, message);
        Verdict::Accepted(envelope)
    }

    fn authenticate(
        &mut self,
        now: Duration,
        envelope: &Envelope<'_>,
    ) -> Result<(), Unauthenticated> {
        if self.authority.is_unsigned() {
            if envelope.kind == KIND_HELLO {
                self.stats.hellos_received += 1;
            }
            return Ok(());
        }
        let site = envelope.sender.site();
        let signature = match envelope.proof {
            Proof::Signature(signature) => signature,
            Proof::Session { .. } => unreachable!("the session form is checked before"),
        };
        if (envelope.kind == KIND_HELLO || self.sites.get(site).is_some())
            && !self.may_check_signature(now, &envelope.sender)
        {
            self.stats.dropped_over_budget += 1;
            return Err(Unauthenticated::Refused);
        }
        let (key, chain) = if envelope.kind == KIND_HELLO {
            let certified = hello_chain(envelope.body, &self.interner)
                .ok()
                .and_then(|chain| Some((self.certified(now, site, &chain)?, chain)));
            match certified {
                Some(found) => found,
                None => {
                    self.stats.dropped_untrusted_certificate += 1;
                    return Err(Unauthenticated::Refused);
                }
            }
        } else {
            let Some(known) = self.sites.get(site) else {
                self.stats.dropped_unknown_sender += 1;
                return Err(Unauthenticated::UnknownSite);
            };
            let signer = known
                .message_keys(now)
                .position(|key| key.verify(MESSAGE_DOMAIN, envelope.signed, signature));
            return match signer {
                Some(0) => Ok(()),
                Some(_) => {
                    self.stats.previous_key_messages += 1;
                    Ok(())
                }
                None => {
                    self.stats.dropped_bad_signature += 1;
                    Err(Unauthenticated::UnknownSite)
                }
            };
        };
        if !key.verify(MESSAGE_DOMAIN, envelope.signed, signature) {
            self.stats.dropped_bad_signature += 1;
            return Err(Unauthenticated::Refused);
        }
        if envelope.kind == KIND_HELLO {
            self.stats.hellos_received += 1;
            self.check_protocols(envelope)?;
            if !self.remember_site(now, site, key, &chain) {
                self.stats.dropped_untrusted_certificate += 1;
                return Err(Unauthenticated::Refused);
            }
        }
        Ok(())
    }

    /// Whether the signature of a message claiming `sender` may be checked now: see
    /// [`budget::SignedChecks`]. A sender whose latest `HELLO` named only versions before
    /// sessions signs every message, and is never held back.
    fn may_check_signature(&mut self, now: Duration, sender: &NodeId) -> bool {
        let limit = if self.pairs.speaks_in_session(now, sender) {
            Limit::InSession
        } else if self
            .peer_protocols(sender)
            .is_some_and(|(_, spoken)| spoken < crate::wire::versions::SESSIONS_SINCE)
        {
            Limit::None
        } else {
            Limit::Total
        };
        self.signed_checks.take(now, sender.site(), limit)
    }

    /// Refuses a verified `HELLO` whose sender speaks no version we speak (reported once
    /// per identity); a compatible one lifts an earlier refusal of its identity.
    fn check_protocols(&mut self, envelope: &Envelope<'_>) -> Result<(), Unauthenticated> {
        let theirs = hello_protocols(envelope.body, &self.interner);
        if self.protocols.common(theirs).is_some() {
            self.refused.remove(&envelope.sender);
            return Ok(());
        }
        self.stats.dropped_incompatible_version += 1;
        if self.refused.len() >= REFUSED_MEMORY {
            self.refused.clear();
        }
        let first = self.refused.insert(envelope.sender.clone(), theirs) != Some(theirs);
        Err(Unauthenticated::Incompatible(theirs, first))
    }

    fn record(&mut self, now: Duration, envelope: &Envelope<'_>) {
        let addr = envelope.sender.node_addr();
        if self
            .senders
            .latest_at(addr)
            .is_some_and(|(id, _)| *id != envelope.sender)
        {
            // Another identity at an address we introduced ourselves to (a restart there):
            // it has not heard our `HELLO`, so our next message there brings one.
            self.introduced.forget(addr);
        }
        let protocols =
            (envelope.kind == KIND_HELLO).then(|| hello_protocols(envelope.body, &self.interner));
        self.senders
            .record(now, &envelope.sender, envelope.seq, protocols);
        if matches!(envelope.kind, KIND_HELLO | KIND_HANDSHAKE_INIT) {
            // A new identity at an address: whatever was agreed with the one before is
            // gone with it.
            self.pairs.forget_others_at(&envelope.sender);
        }
    }
}
