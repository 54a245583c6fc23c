//! Protocol versions: which forms of the wire and of the state items a node speaks, how it
//! says so, and what two nodes speak together.
//!
//! A protocol version names one whole set of rules: the message kinds and their bodies
//! ([`crate::wire`]), the item lanes, keys and payload formats, and what a receiver does
//! with each. A node speaks a contiguous range of versions and says which in every `HELLO`
//! it sends, in the high bits of the flags byte, under its signature:
//!
//! ```text
//! bit  0     want reply (the sender asks for our HELLO)
//! bits 1..3  span: the sender's highest version minus its lowest (0..7)
//! bits 4..7  the sender's highest version (1..15); 0: no range given
//! ```
//!
//! Release 0.1.0 sent no range (those bits were 0) and reads only bit 0, so a range costs
//! it nothing; a `HELLO` without a range stands for protocol 1 alone. To each peer a node
//! speaks the highest version both ranges hold; a peer whose range shares no version with
//! this node's is refused (see [`crate::wire::session`]), never half heard.
//!
//! | version | first release | what it adds to the one before |
//! |---------|---------------|--------------------------------|
//! | 1       | 0.1.0         | (the first: signed messages with trailers, `HELLO`, `DIGEST`, `REPAIR`, signals pages) |
//! | 2       | 0.2.0         | the sender's range in `HELLO`'s flags |
//! | 3       | 0.3.0         | certificate renewal without loss: a sync carries a site's earlier certificates before the items they signed, a receiver keeps the newest certificate as current; a held version taken again with its origin's renewed signature; session keys: `HANDSHAKE_INIT`, `HANDSHAKE_RESPONSE`, `HANDSHAKE_CONFIRM` and the session form of every message; a sync request may ask for the heads of every site only (certificates, gateway, metadata), and bound its answer's items before a name, ask for names and versions alone, and ask for items by name; a sync carries a digest of the sender's view and leaves its members out when the peer's agrees |
//!
//! A release speaks its own version and the one before, so a mesh can run two releases side
//! by side while it is upgraded one site at a time (docs/upgrading.md).

use std::fmt;

/// The lowest protocol version this build speaks.
pub const PROTOCOL_MIN: u8 = 2;
/// The highest protocol version this build speaks.
pub const PROTOCOL_MAX: u8 = 3;
/// The first version whose nodes may be sent a site's earlier certificates in a sync:
/// older ones take any relayed certificate as the site's current one.
pub const EARLIER_CERTIFICATES_SINCE: u8 = 3;
/// The first version whose nodes agree session keys and authenticate messages between
/// them under those keys instead of signing each ([`crate::wire::handshake`]).
pub const SESSIONS_SINCE: u8 = 3;
/// The first version whose nodes answer a sync request that walks only the lanes that
/// verify and reach sites (an older one refuses the request's entry).
pub const HEADS_WALK_SINCE: u8 = 3;
/// The first version whose nodes answer a sync request with a bound, stopping the answer's
/// items before a given name, a request for names and versions alone, and one for items
/// by name (an older one refuses each of those requests' entries).
pub const BOUNDED_WALK_SINCE: u8 = 3;
/// The first version whose nodes read a sync's view digest, and leave out of a sync the
/// members a peer whose digest agrees already holds (an older one refuses the entry).
pub const VIEW_DIGEST_SINCE: u8 = 3;

/// `HELLO` flag bits that hold the span of the sender's range.
const SPAN_BITS: u8 = 0b0000_1110;
const SPAN_SHIFT: u32 = 1;
/// `HELLO` flag bits that hold the sender's highest version.
const MAX_BITS: u8 = 0b1111_0000;
const MAX_SHIFT: u32 = 4;
/// The largest version the flags can name.
const LARGEST_ADVERTISED: u8 = MAX_BITS >> MAX_SHIFT;
/// The largest span the flags can name.
const LARGEST_SPAN: u8 = SPAN_BITS >> SPAN_SHIFT;

/// The contiguous range of protocol versions a node speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProtocolRange {
    min: u8,
    max: u8,
}

/// Why a range cannot be spoken or advertised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeError(pub String);

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RangeError {}

impl ProtocolRange {
    /// What this build speaks.
    pub const CURRENT: ProtocolRange = ProtocolRange {
        min: PROTOCOL_MIN,
        max: PROTOCOL_MAX,
    };
    /// What a `HELLO` without a range stands for: release 0.1.0, protocol 1 alone.
    pub const UNADVERTISED: ProtocolRange = ProtocolRange { min: 1, max: 1 };

    /// `min..=max`, if the `HELLO` flags can carry it (1 ≤ min ≤ max ≤ 15, at most 7 apart).
    pub fn new(min: u8, max: u8) -> Result<ProtocolRange, RangeError> {
        if min == 0 || min > max || max > LARGEST_ADVERTISED || max - min > LARGEST_SPAN {
            return Err(RangeError(format!(
                "a protocol range is 1 <= min <= max <= {LARGEST_ADVERTISED} with at most \
                 {LARGEST_SPAN} between them, got {min}..{max}"
            )));
        }
        Ok(ProtocolRange { min, max })
    }

    pub fn min(self) -> u8 {
        self.min
    }

    pub fn max(self) -> u8 {
        self.max
    }

    /// The range a `HELLO`'s flags byte announces. Every byte reads as some range: a
    /// highest version of 0 is the unadvertised range of 0.1.0, and a span reaching below 1
    /// is cut at 1 (the sender's own signature covers the byte, so it is its word).
    pub fn from_hello_flags(flags: u8) -> ProtocolRange {
        let max = (flags & MAX_BITS) >> MAX_SHIFT;
        if max == 0 {
            return ProtocolRange::UNADVERTISED;
        }
        let span = (flags & SPAN_BITS) >> SPAN_SHIFT;
        ProtocolRange {
            min: max.saturating_sub(span).max(1),
            max,
        }
    }

    /// The flag bits that announce this range (bit 0, want reply, left clear).
    pub fn hello_flags(self) -> u8 {
        (self.max << MAX_SHIFT) | ((self.max - self.min) << SPAN_SHIFT)
    }

    /// The highest version both ranges hold, if any.
    pub fn common(self, other: ProtocolRange) -> Option<u8> {
        let highest = self.max.min(other.max);
        (highest >= self.min.max(other.min)).then_some(highest)
    }
}

impl fmt::Display for ProtocolRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_range_survives_the_flags_and_leaves_want_reply_alone() {
        for min in 1..=LARGEST_ADVERTISED {
            for max in min..=LARGEST_ADVERTISED.min(min + LARGEST_SPAN) {
                let range = ProtocolRange::new(min, max).unwrap();
                assert_eq!(range.hello_flags() & 1, 0);
                assert_eq!(ProtocolRange::from_hello_flags(range.hello_flags()), range);
                assert_eq!(
                    ProtocolRange::from_hello_flags(range.hello_flags() | 1),
                    range
                );
            }
        }
    }

    #[test]
    fn a_hello_without_a_range_is_protocol_one() {
        assert_eq!(
            ProtocolRange::from_hello_flags(0),
            ProtocolRange::UNADVERTISED
        );
        assert_eq!(
            ProtocolRange::from_hello_flags(1),
            ProtocolRange::UNADVERTISED
        );
        // Span bits without a highest version still read as 0.1.0's HELLO.
        assert_eq!(
            ProtocolRange::from_hello_flags(0b1110),
            ProtocolRange::UNADVERTISED
        );
    }

    #[test]
    fn this_build_speaks_the_release_before_it() {
        assert_eq!(ProtocolRange::CURRENT.hello_flags(), 0x32);
        // Release 0.1.0 (no range announced) is two releases back: not spoken.
        assert_eq!(
            ProtocolRange::CURRENT.common(ProtocolRange::UNADVERTISED),
            None
        );
        assert_eq!(
            ProtocolRange::CURRENT.common(ProtocolRange::new(1, 2).unwrap()),
            Some(2)
        );
        assert_eq!(
            ProtocolRange::CURRENT.common(ProtocolRange::CURRENT),
            Some(3)
        );
    }

    #[test]
    fn the_highest_shared_version_is_spoken_and_disjoint_ranges_share_none() {
        let r = |min, max| ProtocolRange::new(min, max).unwrap();
        assert_eq!(r(1, 3).common(r(2, 5)), Some(3));
        assert_eq!(r(2, 5).common(r(1, 3)), Some(3));
        assert_eq!(r(4, 4).common(r(1, 4)), Some(4));
        assert_eq!(r(1, 2).common(r(3, 4)), None);
        assert_eq!(r(3, 4).common(r(1, 2)), None);
    }

    #[test]
    fn a_span_below_one_is_cut_and_ranges_the_flags_cannot_carry_are_refused() {
        // Highest 2, span 7: the sender speaks 1..2.
        assert_eq!(
            ProtocolRange::from_hello_flags(0x2e),
            ProtocolRange::new(1, 2).unwrap()
        );
        assert!(ProtocolRange::new(0, 1).is_err());
        assert!(ProtocolRange::new(3, 2).is_err());
        assert!(ProtocolRange::new(1, 16).is_err());
        assert!(ProtocolRange::new(1, 9).is_err());
    }
}
