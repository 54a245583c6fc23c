//! What a simulation remembers: membership changes as each node learned them, suspicions
//! seen on the wire, traffic counters, and the running fingerprint of the event trace.

use std::time::Duration;

/// A membership change as one node learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    Up,
    /// Declared down: by this node's own expired suspicion or by news from a peer.
    Down,
    /// Down because it said it was leaving.
    Left,
    /// The same address as a newer identity (a restart or a rejoin after a false down).
    Renamed,
}

/// One thing one node learned, in the order it learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub at_ns: u64,
    pub subject: u32,
    pub generation: u64,
    pub learned: Learned,
    /// `Down` decided by this node itself (its suspicion expired) rather than heard.
    pub own: bool,
    /// An own `Down` of a node that was in fact running, in the same life.
    pub false_positive: bool,
}

impl Record {
    pub fn at(&self) -> Duration {
        Duration::from_nanos(self.at_ns)
    }
}

/// Which kind of change a query is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The subject's current life is up (joined, restarted or renewed).
    Up,
    /// The subject's current life is down or left.
    Down,
}

impl Change {
    pub fn matches(self, learned: Learned) -> bool {
        match self {
            Change::Up => matches!(learned, Learned::Up | Learned::Renamed),
            Change::Down => matches!(learned, Learned::Down | Learned::Left),
        }
    }
}

/// A suspicion episode: someone's probe of `target` failed at `incarnation`. Seen on the
/// wire, so `first_at` is when the first message carrying it left, and `by` is the node
/// that sent it (a node whose probe failed: nobody else can have had it yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspicion {
    pub first_at: Duration,
    pub target: u32,
    pub generation: u64,
    pub incarnation: u16,
    pub by: u32,
    /// The target was running, in that life, when the suspicion was first seen.
    pub target_alive: bool,
}

/// Messages and bytes of one node. Bytes count as if framed: our message (kind byte
/// included) plus the 33-byte frame overhead; IP and UDP headers are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub sent: u64,
    pub sent_bytes: u64,
    pub received: u64,
    pub received_bytes: u64,
    /// Sent but lost to the loss model.
    pub lost: u64,
    /// Sent across a partition.
    pub cut: u64,
    /// Sent to a crashed or departed node, or to an address that is no node.
    pub undeliverable: u64,
}

impl Traffic {
    pub fn add(&mut self, other: &Traffic) {
        self.sent += other.sent;
        self.sent_bytes += other.sent_bytes;
        self.received += other.received;
        self.received_bytes += other.received_bytes;
        self.lost += other.lost;
        self.cut += other.cut;
        self.undeliverable += other.undeliverable;
    }
}

/// Folds one value into a running fingerprint (the splitmix64 finaliser: every input bit
/// affects every output bit).
pub fn mix(hash: u64, value: u64) -> u64 {
    let mut z = (hash ^ value).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn mix_bytes(mut hash: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        hash = mix(hash, u64::from_le_bytes(word.try_into().expect("8 bytes")));
    }
    let mut tail = [0u8; 8];
    let rest = words.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    mix(
        hash,
        u64::from_le_bytes(tail) ^ ((bytes.len() as u64) << 56),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_depends_on_every_byte_and_the_order() {
        let base = mix_bytes(0, b"hello, world");
        assert_ne!(base, mix_bytes(0, b"hello, worle"));
        assert_ne!(base, mix_bytes(0, b"hello, world\0"));
        assert_ne!(mix(mix(0, 1), 2), mix(mix(0, 2), 1));
        assert_eq!(base, mix_bytes(0, b"hello, world"));
    }

    #[test]
    fn changes_match_what_was_learned() {
        assert!(Change::Up.matches(Learned::Renamed));
        assert!(Change::Down.matches(Learned::Left));
        assert!(!Change::Down.matches(Learned::Up));
    }
}
