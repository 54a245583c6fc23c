//! Repair by pull: every [`REPAIR_INTERVAL`] a node tells one random member which item
//! versions it stored lately, and the member sends back those it holds and the node lacks.
//!
//! Push gossip takes an item version to nearly every member within a fraction of a
//! second, but only nearly: a member that lost every copy keeps the older version until a
//! newer one comes or the periodic push/pull sync walks past the name, tens of seconds to
//! minutes later in a large store. A signals page superseded a few seconds later is then
//! never seen at all. So each node sends a `DIGEST`: a Bloom filter of the versions it
//! stored in the last [`REPAIR_WINDOW`] (the newest [`MAX_DIGEST_ENTRIES`] at most, the
//! window shortened to what they cover). The member answers with a `REPAIR` message: the
//! versions it stored in that window, held for [`REPAIR_SETTLE`] at least (push gossip's
//! own copies are still on their way before that), that are still its latest and that the
//! filter does not hold, in at most [`MAX_REPAIR_CHUNKS`] messages. A missed version thus
//! arrives within about the settle time plus one interval, for a few hundred bytes a
//! second each way.
//!
//! The filter errs one way only: a false positive (about 1 % at [`BITS_PER_ENTRY`] and
//! [`HASHES`]) makes the member keep back an item the node lacks, and each digest draws a
//! fresh seed, so the next one, to another member, is independent. What a filter leaves
//! out costs bytes, not state: an item already held is not news. Older misses are the
//! push/pull sync's to repair.

use std::time::Duration;

use bytes::BufMut;

use crate::lanes::names::Lane;
use crate::wire::{Reader, WireError};

/// How often a node sends a digest (to one random member).
pub const REPAIR_INTERVAL: Duration = Duration::from_millis(500);
/// How far back a digest reaches: the versions stored this recently.
pub const REPAIR_WINDOW: Duration = Duration::from_secs(4);
/// How long a member must have held a version before it offers it: by then push gossip
/// has delivered the copies that were coming.
pub const REPAIR_SETTLE: Duration = Duration::from_millis(300);
/// Most versions one digest describes (the newest first); its filter then fits a message.
pub const MAX_DIGEST_ENTRIES: usize = 800;
/// Filter bits per described version: with [`HASHES`], about 1 % false positives.
pub const BITS_PER_ENTRY: usize = 10;
/// Bit positions set per version.
pub const HASHES: u8 = 7;
/// The largest filter a digest may carry, and the smallest.
pub const MAX_FILTER_BYTES: usize = MAX_DIGEST_ENTRIES * BITS_PER_ENTRY / 8;
const MIN_FILTER_BYTES: usize = 8;
/// Messages one answer may take: what a member spends on any one digest.
pub const MAX_REPAIR_CHUNKS: usize = 4;

/// A 64-bit FNV-1a hash of an item version's name and version, the same on every node.
pub fn version_hash(origin: &str, lane: Lane, key: &str, version: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let parts: [&[u8]; 5] = [
        &[origin.len() as u8],
        origin.as_bytes(),
        &[lane as u8, key.len() as u8],
        key.as_bytes(),
        &version.to_be_bytes(),
    ];
    parts
        .into_iter()
        .flatten()
        .fold(OFFSET_BASIS, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        })
}

/// splitmix64's finalizer: spreads a seeded hash over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The item versions a node stored lately, as a Bloom filter.
///
/// Wire layout (after the sender identity): `seed u64 | window_ms u16 | hashes u8 | filter`,
/// the filter's bit `i` being bit `i % 8` of byte `i / 8`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    seed: u64,
    /// How far back the described versions reach.
    window: Duration,
    hashes: u8,
    filter: Vec<u8>,
}

impl Digest {
    /// A filter of `versions` (from [`version_hash`]), sized for their count.
    pub fn new(seed: u64, window: Duration, versions: &[u64]) -> Digest {
        let bytes = (versions.len() * BITS_PER_ENTRY)
            .div_ceil(8)
            .clamp(MIN_FILTER_BYTES, MAX_FILTER_BYTES);
        let mut digest = Digest {
            seed,
            window: window.min(Duration::from_millis(u64::from(u16::MAX))),
            hashes: HASHES,
            filter: vec![0; bytes],
        };
        for &version in versions {
            for bit in digest.positions(version) {
                digest.filter[bit / 8] |= 1 << (bit % 8);
            }
        }
        digest
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Whether the version may be described (certainly not, when false).
    pub fn may_hold(&self, version: u64) -> bool {
        self.positions(version)
            .all(|bit| self.filter[bit / 8] & (1 << (bit % 8)) != 0)
    }

    fn positions(&self, version: u64) -> impl Iterator<Item = usize> {
        let bits = (self.filter.len() * 8) as u64;
        let first = mix(version ^ self.seed);
        let step = mix(first) | 1;
        (0..u64::from(self.hashes))
            .map(move |i| (first.wrapping_add(i.wrapping_mul(step)) % bits) as usize)
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.seed);
        out.put_u16(self.window.as_millis() as u16);
        out.put_u8(self.hashes);
        out.put_slice(&self.filter);
    }

    /// Reads a digest that takes the rest of `r`: a filter of 8 to [`MAX_FILTER_BYTES`]
    /// bytes, 1 to 16 hashes.
    pub fn decode(r: &mut Reader<'_>) -> Result<Digest, WireError> {
        let seed = r.u64()?;
        let window = Duration::from_millis(u64::from(r.u16()?));
        let hashes = r.u8()?;
        let filter = r.rest();
        if !(1..=16).contains(&hashes) {
            return Err(WireError::BadDigest);
        }
        if filter.len() < MIN_FILTER_BYTES {
            return Err(WireError::Truncated);
        }
        if filter.len() > MAX_FILTER_BYTES {
            return Err(WireError::TrailingBytes);
        }
        Ok(Digest {
            seed,
            window,
            hashes,
            filter: filter.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(n: u64, salt: &str) -> Vec<u64> {
        (0..n)
            .map(|i| version_hash("site-a", Lane::State, salt, i))
            .collect()
    }

    #[test]
    fn described_versions_are_always_held() {
        let described = hashes(800, "page");
        let digest = Digest::new(7, REPAIR_WINDOW, &described);
        assert!(described.iter().all(|&v| digest.may_hold(v)));
        assert_eq!(digest.filter.len(), MAX_FILTER_BYTES);
    }

    #[test]
    fn false_positives_stay_near_one_percent_and_change_with_the_seed() {
        let described = hashes(300, "page");
        let others = hashes(20_000, "other");
        let first = Digest::new(1, REPAIR_WINDOW, &described);
        let second = Digest::new(2, REPAIR_WINDOW, &described);
        let wrong = |d: &Digest| others.iter().filter(|&&v| d.may_hold(v)).count();
        assert!(wrong(&first) < 20_000 * 2 / 100, "{}", wrong(&first));
        let both = others
            .iter()
            .filter(|&&v| first.may_hold(v) && second.may_hold(v))
            .count();
        assert!(both < 20, "{both}");
    }

    #[test]
    fn the_hash_tells_versions_and_names_apart() {
        let a = version_hash("a", Lane::State, "k", 1);
        assert_ne!(a, version_hash("a", Lane::State, "k", 2));
        assert_ne!(a, version_hash("a", Lane::Gateway, "k", 1));
        assert_ne!(
            version_hash("ab", Lane::State, "k", 1),
            version_hash("a", Lane::State, "bk", 1)
        );
    }

    #[test]
    fn a_digest_survives_the_wire_and_bad_ones_are_refused() {
        let digest = Digest::new(9, Duration::from_millis(1234), &hashes(50, "x"));
        let mut bytes = Vec::new();
        digest.encode(&mut bytes);
        assert_eq!(Digest::decode(&mut Reader::new(&bytes)), Ok(digest));

        let mut no_hashes = bytes.clone();
        no_hashes[10] = 0;
        assert_eq!(
            Digest::decode(&mut Reader::new(&no_hashes)),
            Err(WireError::BadDigest)
        );
        assert_eq!(
            Digest::decode(&mut Reader::new(&bytes[..15])),
            Err(WireError::Truncated)
        );
        let mut huge = bytes[..11].to_vec();
        huge.resize(11 + MAX_FILTER_BYTES + 1, 0xff);
        assert_eq!(
            Digest::decode(&mut Reader::new(&huge)),
            Err(WireError::TrailingBytes)
        );
    }
}
