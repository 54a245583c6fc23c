//! What nodes put on the wire, read back by the simulated network: the suspicions a
//! message carries and its sender's refutations (always), and, when the message log is on,
//! each datagram itself: sender, recipient, kind, fate and the membership updates it
//! carried.
//!
//! Messages are read with the codec the drivers use, after they are sealed, so the log
//! shows exactly what travelled and nothing a driver only meant to send.

use std::time::Duration;

use foca::{Codec, Message, State};

use super::net::node_index;
use super::state::{Arrival, KindTraffic};
use crate::driver::MemberState;
use crate::identity::NodeId;
use crate::wire::{
    WireCodec, KIND_CONFLICT, KIND_FOCA, KIND_HELLO, KIND_LEAVE, KIND_SYNC_REQUEST,
    KIND_SYNC_RESPONSE, TRAILER_LEN,
};

/// What a datagram is: foca's message kinds, then Grid's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// A direct probe (also Lifeguard's suspicion notice: a ping that carries the
    /// recipient's own suspicion).
    Ping,
    Ack,
    /// "Probe this member for me": to an intermediary, about the member that did not answer.
    PingReq,
    /// The intermediary's probe of the member, on the requester's behalf.
    IndirectPing,
    /// The member's answer to an indirect probe, back to the intermediary.
    IndirectAck,
    /// The intermediary passing that answer on to the requester.
    ForwardedAck,
    /// A joiner asking to be let in; answered with a feed.
    Announce,
    /// The active members, to a joiner.
    Feed,
    /// Membership updates, sent for their own sake.
    Gossip,
    /// Application items (Grid's state), no membership updates.
    Broadcast,
    /// "You are down as far as I know."
    TurnUndead,
    /// Push/pull anti-entropy: one chunk of the sender's full state...
    SyncRequest,
    /// ...and one chunk of the answer.
    SyncResponse,
    /// The sender is leaving on purpose.
    Leave,
    /// The sender's certificates.
    Hello,
    /// "Another live identity holds your site name."
    Conflict,
    /// Not a message the drivers send (it does not decode).
    Other,
}

impl MessageKind {
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Ping => "ping",
            MessageKind::Ack => "ack",
            MessageKind::PingReq => "ping-req",
            MessageKind::IndirectPing => "indirect-ping",
            MessageKind::IndirectAck => "indirect-ack",
            MessageKind::ForwardedAck => "forwarded-ack",
            MessageKind::Announce => "announce",
            MessageKind::Feed => "feed",
            MessageKind::Gossip => "gossip",
            MessageKind::Broadcast => "broadcast",
            MessageKind::TurnUndead => "turn-undead",
            MessageKind::SyncRequest => "sync-request",
            MessageKind::SyncResponse => "sync-response",
            MessageKind::Leave => "leave",
            MessageKind::Hello => "hello",
            MessageKind::Conflict => "conflict",
            MessageKind::Other => "other",
        }
    }

    /// The kind of a foca message, and the third member it names (the probed member of a
    /// ping-req or an indirect ack, the requester of an indirect ping or a forwarded ack).
    fn of_foca(message: &Message<NodeId>) -> (MessageKind, Option<&NodeId>) {
        match message {
            Message::Ping(_) => (MessageKind::Ping, None),
            Message::Ack(_) => (MessageKind::Ack, None),
            Message::PingReq { target, .. } => (MessageKind::PingReq, Some(target)),
            Message::IndirectPing { origin, .. } => (MessageKind::IndirectPing, Some(origin)),
            Message::IndirectAck { target, .. } => (MessageKind::IndirectAck, Some(target)),
            Message::ForwardedAck { origin, .. } => (MessageKind::ForwardedAck, Some(origin)),
            Message::Announce => (MessageKind::Announce, None),
            Message::Feed => (MessageKind::Feed, None),
            Message::Gossip => (MessageKind::Gossip, None),
            Message::Broadcast => (MessageKind::Broadcast, None),
            Message::TurnUndead => (MessageKind::TurnUndead, None),
        }
    }

    fn of_grid(kind: u8) -> MessageKind {
        match kind {
            KIND_SYNC_REQUEST => MessageKind::SyncRequest,
            KIND_SYNC_RESPONSE => MessageKind::SyncResponse,
            KIND_LEAVE => MessageKind::Leave,
            KIND_HELLO => MessageKind::Hello,
            KIND_CONFLICT => MessageKind::Conflict,
            _ => MessageKind::Other,
        }
    }
}

/// What became of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// On its way; it arrives at [`MessageRecord::arrives_at`] unless its recipient stops
    /// first.
    Delivered,
    /// Lost to the loss model.
    Lost,
    /// Sent across a partition.
    Cut,
    /// Sent to a crashed or departed node, or to an address that is no node.
    Undeliverable,
}

impl Fate {
    pub fn name(self) -> &'static str {
        match self {
            Fate::Delivered => "delivered",
            Fate::Lost => "lost",
            Fate::Cut => "cut",
            Fate::Undeliverable => "undeliverable",
        }
    }
}

/// One membership update a message carried: what its sender said of `subject`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberUpdate {
    pub subject: u32,
    pub generation: u64,
    pub incarnation: u16,
    /// Alive, suspect or down.
    pub state: MemberState,
}

/// One datagram the simulated network carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRecord {
    pub sent_at: Duration,
    pub from: u32,
    /// None: an address that is no simulated node.
    pub to: Option<u32>,
    /// The sender's message number (with `from`, it names the message).
    pub seq: u64,
    pub kind: MessageKind,
    /// The third member a probe message names (see [`MessageKind`]).
    pub about: Option<u32>,
    pub fate: Fate,
    pub arrives_at: Option<Duration>,
    /// As framed (see [`super::Traffic`]).
    pub bytes: u32,
    pub updates: Vec<MemberUpdate>,
}

/// A node refuted a suspicion of itself: its messages began to carry a higher incarnation
/// (in the same generation). The first such message is when it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refutation {
    pub at: Duration,
    pub node: u32,
    pub generation: u64,
    pub incarnation: u16,
}

/// A suspicion a node put on the wire.
pub(super) struct SeenSuspect {
    pub at: Duration,
    pub target: u32,
    pub generation: u64,
    pub incarnation: u16,
}

/// What one node's messages showed since the simulator last collected them.
#[derive(Default)]
pub(super) struct Seen {
    /// Traffic by kind, while the world counts it.
    pub kinds: KindTraffic,
    /// Watched item versions this node took, while any are watched.
    pub arrivals: Vec<Arrival>,
    pub suspects: Vec<SeenSuspect>,
    pub refutations: Vec<Refutation>,
    pub messages: Vec<MessageRecord>,
    /// The generation and incarnation the node's last foca message carried.
    pub incarnation: Option<(u64, u16)>,
}

/// What the message log keeps of a message beyond its envelope.
pub(super) struct Reading {
    pub kind: MessageKind,
    pub about: Option<u32>,
    pub updates: Vec<MemberUpdate>,
}

impl Reading {
    fn bare(kind: MessageKind) -> Reading {
        Reading {
            kind,
            about: None,
            updates: Vec::new(),
        }
    }
}

/// Reads a message `node` sends at `at`: notes the suspicions it carries and whether its
/// sender refuted, and, if `log`, returns what the message log keeps of it.
pub(super) fn read_sent(
    codec: &mut WireCodec,
    message: &[u8],
    at: Duration,
    node: u32,
    seen: &mut Seen,
    log: bool,
) -> Option<Reading> {
    let unsealed = &message[..message.len().saturating_sub(TRAILER_LEN)];
    let Some((&kind, mut body)) = unsealed.split_first() else {
        return log.then(|| Reading::bare(MessageKind::Other));
    };
    if kind != KIND_FOCA {
        return log.then(|| Reading::bare(MessageKind::of_grid(kind)));
    }
    let Ok(header) = codec.decode_header(&mut body) else {
        return log.then(|| Reading::bare(MessageKind::Other));
    };
    note_incarnation(
        seen,
        at,
        node,
        header.src.generation(),
        header.src_incarnation,
    );
    let mut reading = log.then(|| {
        let (kind, about) = MessageKind::of_foca(&header.message);
        Reading {
            kind,
            about: about.and_then(|id| node_index(id.socket_addr())),
            updates: Vec::new(),
        }
    });
    // Broadcast messages carry items only; every other kind with a tail carries updates.
    if body.len() < 2 || header.message == Message::Broadcast {
        return reading;
    }
    let count = u16::from_be_bytes([body[0], body[1]]);
    body = &body[2..];
    for _ in 0..count {
        let Ok(member) = codec.decode_member(&mut body) else {
            break;
        };
        let suspect = member.state() == State::Suspect;
        if !suspect && reading.is_none() {
            continue;
        }
        let Some(subject) = node_index(member.id().socket_addr()) else {
            continue;
        };
        let generation = member.id().generation();
        if suspect {
            seen.suspects.push(SeenSuspect {
                at,
                target: subject,
                generation,
                incarnation: member.incarnation(),
            });
        }
        if let Some(reading) = &mut reading {
            reading.updates.push(MemberUpdate {
                subject,
                generation,
                incarnation: member.incarnation(),
                state: match member.state() {
                    State::Alive => MemberState::Alive,
                    State::Suspect => MemberState::Suspect,
                    State::Down => MemberState::Down,
                },
            });
        }
    }
    reading
}

/// A node's incarnation only rises when it refutes, and its next message carries the new
/// one (the driver counts its refutations the same way). A node starts at incarnation 0.
fn note_incarnation(seen: &mut Seen, at: Duration, node: u32, generation: u64, incarnation: u16) {
    let (last_generation, last) = seen.incarnation.unwrap_or((generation, 0));
    if last_generation != generation {
        seen.incarnation = Some((generation, incarnation));
        return;
    }
    if incarnation > last {
        seen.refutations.push(Refutation {
            at,
            node,
            generation,
            incarnation,
        });
    }
    seen.incarnation = Some((generation, incarnation.max(last)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::config::SwimConfig;
    use crate::sim::{NetModel, SimSettings, Simulation};

    const FOREVER: Duration = Duration::MAX;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A converged cluster, formed: its clock stands at the first probe interval.
    fn cluster(n: usize, seed: u64, loss: f64) -> Simulation {
        let settings = SimSettings {
            swim: SwimConfig {
                probe_interval: secs(1.0),
                suspicion_timeout: secs(3.0),
                gossip_nodes: 3,
                push_pull_interval: secs(10.0),
            },
            net: NetModel {
                loss,
                ..NetModel::default()
            },
            ..SimSettings::default()
        };
        let mut sim = Simulation::new(n, seed, settings).unwrap();
        sim.now();
        sim
    }

    fn logged(sim: &mut Simulation, seconds: f64) -> Vec<MessageRecord> {
        sim.set_message_log(Some(1_000_000));
        let start = sim.now();
        sim.run_until(start + secs(seconds)).unwrap();
        sim.messages(start, FOREVER)
    }

    #[test]
    fn a_ping_is_answered_by_an_ack() {
        let mut sim = cluster(3, 1, 0.0);
        let messages = logged(&mut sim, 3.0);
        let pings: Vec<_> = messages
            .iter()
            .filter(|m| m.kind == MessageKind::Ping)
            .collect();
        assert!(pings.len() >= 3, "{messages:?}");
        for ping in pings {
            assert_eq!(ping.fate, Fate::Delivered);
            let arrived = ping.arrives_at.expect("delivered");
            assert!(arrived > ping.sent_at);
            let ack = messages.iter().find(|m| {
                m.kind == MessageKind::Ack
                    && m.from == ping.to.unwrap()
                    && m.to == Some(ping.from)
                    && m.sent_at >= arrived
            });
            if ping.sent_at + secs(0.5) < sim.now() {
                assert!(ack.is_some(), "no ack for {ping:?}");
            }
        }
        assert!(messages.windows(2).all(|w| w[0].sent_at <= w[1].sent_at));
    }

    #[test]
    fn the_log_holds_every_message_sent_while_it_is_on() {
        let mut sim = cluster(4, 7, 0.1);
        let sent = |sim: &Simulation| -> u64 { (0..4).map(|n| sim.traffic(n).unwrap().sent).sum() };
        let before = sent(&sim);
        let messages = logged(&mut sim, 4.0);
        assert_eq!(messages.len() as u64, sent(&sim) - before);
        assert_eq!(sim.messages_dropped(), 0);
    }

    #[test]
    fn a_crashed_member_is_probed_indirectly_then_declared_down() {
        let mut sim = cluster(5, 2, 0.0);
        sim.crash(1).unwrap();
        let messages = logged(&mut sim, 8.0);
        let requests: Vec<_> = messages
            .iter()
            .filter(|m| m.kind == MessageKind::PingReq)
            .collect();
        assert!(!requests.is_empty());
        assert!(requests
            .iter()
            .all(|m| m.about == Some(1) && m.to != Some(1)));
        // The intermediaries try the crashed member on the requester's behalf.
        let indirect: Vec<_> = messages
            .iter()
            .filter(|m| m.kind == MessageKind::IndirectPing)
            .collect();
        assert!(!indirect.is_empty());
        for probe in &indirect {
            assert_eq!((probe.to, probe.fate), (Some(1), Fate::Undeliverable));
            assert!(requests
                .iter()
                .any(|r| r.to == Some(probe.from) && Some(r.from) == probe.about));
        }
        assert!(!messages.iter().any(|m| m.from == 1));
        // The suspicion and then the down declaration travel as updates.
        let carried = |state: MemberState| {
            messages
                .iter()
                .flat_map(|m| &m.updates)
                .any(|u| u.subject == 1 && u.state == state)
        };
        assert!(carried(MemberState::Suspect));
        assert!(carried(MemberState::Down));
    }

    #[test]
    fn lost_messages_are_marked() {
        let mut sim = cluster(6, 3, 0.2);
        let lost_before: u64 = (0..6).map(|n| sim.traffic(n).unwrap().lost).sum();
        let messages = logged(&mut sim, 10.0);
        let lost_after: u64 = (0..6).map(|n| sim.traffic(n).unwrap().lost).sum();
        let marked = messages.iter().filter(|m| m.fate == Fate::Lost).count() as u64;
        assert!(marked > 0);
        assert_eq!(marked, lost_after - lost_before);
        assert!(messages
            .iter()
            .all(|m| (m.fate == Fate::Delivered) == m.arrives_at.is_some()));
    }

    #[test]
    fn the_log_keeps_at_most_its_limit_and_counts_the_rest() {
        let mut sim = cluster(5, 4, 0.0);
        sim.set_message_log(Some(10));
        let start = sim.now();
        sim.run_until(start + secs(5.0)).unwrap();
        let kept = sim.messages(Duration::ZERO, FOREVER);
        assert_eq!(kept.len(), 10);
        let sent: u64 = (0..5).map(|n| sim.traffic(n).unwrap().sent).sum();
        assert!(sim.messages_dropped() > 0);
        assert!(10 + sim.messages_dropped() <= sent);
        sim.set_message_log(None);
        sim.run_until(start + secs(6.0)).unwrap();
        assert!(sim.messages(Duration::ZERO, FOREVER).is_empty());
        assert_eq!(sim.messages_dropped(), 0);
    }

    #[test]
    fn the_log_changes_nothing_that_happens() {
        let run = |log: bool| {
            let mut sim = cluster(8, 5, 0.1);
            if log {
                sim.set_message_log(Some(100));
            }
            let start = sim.now();
            sim.crash(2).unwrap();
            sim.run_until(start + secs(12.0)).unwrap();
            (sim.trace_hash(), sim.refutations(Duration::ZERO))
        };
        assert_eq!(run(false), run(true));
    }

    #[test]
    fn refutations_are_the_drivers_and_answer_a_suspicion() {
        let mut sim = cluster(8, 6, 0.2);
        let start = sim.now();
        sim.run_until(start + secs(60.0)).unwrap();
        let refutations = sim.refutations(Duration::ZERO);
        assert!(!refutations.is_empty());
        assert_eq!(
            refutations.len() as u64,
            sim.stats().drivers.refutations,
            "{refutations:?}"
        );
        let suspicions = sim.suspicions(Duration::ZERO);
        for refutation in &refutations {
            assert!(
                suspicions.iter().any(|s| s.target == refutation.node
                    && s.generation == refutation.generation
                    && s.incarnation < refutation.incarnation
                    && s.first_at <= refutation.at),
                "{refutation:?} answers no suspicion"
            );
        }
    }
}
