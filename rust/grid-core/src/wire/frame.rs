//! The encrypted UDP frame that carries every SWIM datagram.
//!
//! ```text
//! offset  size  field
//! ------  ----  -----------------------------------------------------------
//!      0     4  magic        b"GRID"
//!      4     1  version      0x01
//!      5    12  nonce        8-byte random salt | 4-byte frame counter (see below)
//!     17     n  ciphertext   AES-256-GCM of the foca datagram
//!   17+n    16  tag          GCM tag; AAD = the 5 bytes of magic + version
//! ```
//!
//! Overhead is [`OVERHEAD`] = 33 bytes; keys are [`KEY_LEN`] = 32 bytes. A frame that is
//! too short or too long, carries another magic or version, or authenticates under no key
//! of the ring is refused with a [`DropReason`]; callers drop it silently and count the
//! reason.
//!
//! Nonces follow NIST SP 800-38D's deterministic construction: a keyring draws a random
//! 8-byte salt and counts frames in the other 4 bytes, drawing a new salt before the
//! counter wraps. A nonce then never repeats under one salt, salts of different nodes
//! collide with probability about n²/2⁶⁵, and sealing costs no system call. Receivers do
//! not read the nonce: replay protection is the signed envelope's business (`envelope`).

use std::sync::Mutex;

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

pub const MAGIC: [u8; 4] = *b"GRID";
pub const VERSION: u8 = 0x01;
pub const HEADER_LEN: usize = MAGIC.len() + 1;
pub const NONCE_LEN: usize = 12;
pub const TAG_LEN: usize = 16;
pub const OVERHEAD: usize = HEADER_LEN + NONCE_LEN + TAG_LEN;
pub const KEY_LEN: usize = 32;
/// Frames never exceed this: one UDP payload that crosses common paths unfragmented.
pub const MAX_FRAME_LEN: usize = 1400;
/// The most plaintext one frame can carry; foca's `max_packet_size` is set to this.
pub const MAX_PLAINTEXT_LEN: usize = MAX_FRAME_LEN - OVERHEAD;

const AAD: [u8; HEADER_LEN] = [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], VERSION];

/// Why a received frame was dropped. Dropping never changes membership state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than the 33 bytes of overhead: cannot hold a tag, let alone a message.
    TooShort,
    /// Longer than [`MAX_FRAME_LEN`]: no Grid node sends such a frame, so it is refused
    /// before any decryption work is spent on it.
    TooLong,
    /// The first four bytes are not `GRID`: not our protocol (or another cluster's noise).
    BadMagic,
    /// A version this build does not speak; the frame is not even tried against the keys.
    UnknownVersion,
    /// No key in the ring authenticates it: wrong key, tampering, or garbage.
    AuthFailed,
}

impl DropReason {
    pub const ALL: [DropReason; 5] = [
        DropReason::TooShort,
        DropReason::TooLong,
        DropReason::BadMagic,
        DropReason::UnknownVersion,
        DropReason::AuthFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::TooShort => "too_short",
            DropReason::TooLong => "too_long",
            DropReason::BadMagic => "bad_magic",
            DropReason::UnknownVersion => "unknown_version",
            DropReason::AuthFailed => "auth_failed",
        }
    }
}

/// Errors of keyring management; none of them alters the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyringError {
    /// A key was not exactly 32 bytes.
    BadKeyLength(usize),
    /// The key named is not in the ring.
    UnknownKey,
    /// The primary key seals every outgoing frame and cannot be removed; make another
    /// key primary first.
    RemovePrimary,
}

impl core::fmt::Display for KeyringError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeyringError::BadKeyLength(n) => {
                write!(f, "SWIM keys must be {KEY_LEN} bytes, got {n}")
            }
            KeyringError::UnknownKey => f.write_str("key is not in the keyring"),
            KeyringError::RemovePrimary => {
                f.write_str("the primary key cannot be removed; make another key primary first")
            }
        }
    }
}

impl std::error::Error for KeyringError {}

struct RingKey {
    id: KeyId,
    bytes: [u8; KEY_LEN],
    cipher: LessSafeKey,
}

/// A public name for a key, safe to log: the first 8 bytes of the GCM tag the key
/// produces over a fixed message, which tells keys apart without revealing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    fn of(cipher: &LessSafeKey) -> KeyId {
        let mut block = [0u8; 8];
        let tag = cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key([0u8; NONCE_LEN]),
                Aad::from(b"grid key id"),
                &mut block,
            )
            .expect("8 bytes are within AES-GCM limits");
        let mut id = [0u8; 8];
        id.copy_from_slice(&tag.as_ref()[..8]);
        KeyId(id)
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The keys a node holds: the primary seals, every key opens.
///
/// Rotation with no dropped frames: install the new key on every node, then make it
/// primary everywhere, then remove the old key.
pub struct Keyring {
    /// `keys[0]` is the primary.
    keys: Vec<RingKey>,
    nonces: Mutex<NonceSequence>,
}

/// Salt and counter of the deterministic nonce construction.
struct NonceSequence {
    salt: [u8; 8],
    counter: u32,
}

impl NonceSequence {
    fn fresh() -> NonceSequence {
        let mut salt = [0u8; 8];
        getrandom::fill(&mut salt).expect("the OS RNG is available");
        NonceSequence { salt, counter: 0 }
    }

    fn next(&mut self) -> [u8; NONCE_LEN] {
        if self.counter == u32::MAX {
            *self = NonceSequence::fresh();
        }
        self.counter += 1;
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..8].copy_from_slice(&self.salt);
        nonce[8..].copy_from_slice(&self.counter.to_be_bytes());
        nonce
    }
}

impl Keyring {
    pub fn new(primary: &[u8], others: &[&[u8]]) -> Result<Keyring, KeyringError> {
        let mut ring = Keyring {
            keys: vec![ring_key(primary)?],
            nonces: Mutex::new(NonceSequence::fresh()),
        };
        for key in others {
            ring.install(key)?;
        }
        Ok(ring)
    }

    /// Adds a key that may open frames; installing a key already present changes nothing.
    pub fn install(&mut self, key: &[u8]) -> Result<KeyId, KeyringError> {
        let new = ring_key(key)?;
        let id = new.id;
        if !self.keys.iter().any(|k| k.bytes == new.bytes) {
            self.keys.push(new);
        }
        Ok(id)
    }

    /// Makes an installed key the one that seals.
    pub fn use_key(&mut self, key: &[u8]) -> Result<(), KeyringError> {
        let pos = self.position(key)?;
        let chosen = self.keys.remove(pos);
        self.keys.insert(0, chosen);
        Ok(())
    }

    pub fn remove(&mut self, key: &[u8]) -> Result<(), KeyringError> {
        match self.position(key)? {
            0 => Err(KeyringError::RemovePrimary),
            pos => {
                self.keys.remove(pos);
                Ok(())
            }
        }
    }

    /// Key ids, primary first.
    pub fn key_ids(&self) -> Vec<KeyId> {
        self.keys.iter().map(|k| k.id).collect()
    }

    /// Appends the sealed frame of `plaintext` to `out`.
    pub fn seal_into(&self, plaintext: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&AAD);
        let nonce = self
            .nonces
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .next();
        out.extend_from_slice(&nonce);
        let body = out.len();
        out.extend_from_slice(plaintext);
        let tag = self.keys[0]
            .cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut out[body..],
            )
            .expect("frames are far below the AES-GCM length limit");
        out.extend_from_slice(tag.as_ref());
        debug_assert_eq!(out.len() - start, plaintext.len() + OVERHEAD);
    }

    pub fn seal(&self, plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD);
        self.seal_into(plaintext, &mut out);
        out
    }

    /// Opens a frame, trying the primary key first. On success `scratch` holds the
    /// plaintext; on failure its contents are unspecified.
    pub fn open_into(&self, frame: &[u8], scratch: &mut Vec<u8>) -> Result<(), DropReason> {
        if frame.len() < OVERHEAD {
            return Err(DropReason::TooShort);
        }
        if frame.len() > MAX_FRAME_LEN {
            return Err(DropReason::TooLong);
        }
        if frame[..MAGIC.len()] != MAGIC {
            return Err(DropReason::BadMagic);
        }
        if frame[MAGIC.len()] != VERSION {
            return Err(DropReason::UnknownVersion);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&frame[HEADER_LEN..HEADER_LEN + NONCE_LEN]);
        let body = &frame[HEADER_LEN + NONCE_LEN..frame.len() - TAG_LEN];
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&frame[frame.len() - TAG_LEN..]);
        for key in &self.keys {
            scratch.clear();
            scratch.extend_from_slice(body);
            let opened = key.cipher.open_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                Tag::from(tag),
                scratch,
                0..,
            );
            if opened.is_ok() {
                return Ok(());
            }
        }
        Err(DropReason::AuthFailed)
    }

    pub fn open(&self, frame: &[u8]) -> Result<Vec<u8>, DropReason> {
        let mut out = Vec::with_capacity(frame.len().saturating_sub(OVERHEAD));
        self.open_into(frame, &mut out)?;
        Ok(out)
    }

    fn position(&self, key: &[u8]) -> Result<usize, KeyringError> {
        let bytes = key_bytes(key)?;
        self.keys
            .iter()
            .position(|k| k.bytes == bytes)
            .ok_or(KeyringError::UnknownKey)
    }
}

impl core::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ids: Vec<String> = self.keys.iter().map(|k| k.id.to_hex()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

fn key_bytes(key: &[u8]) -> Result<[u8; KEY_LEN], KeyringError> {
    key.try_into()
        .map_err(|_| KeyringError::BadKeyLength(key.len()))
}

fn ring_key(key: &[u8]) -> Result<RingKey, KeyringError> {
    let bytes = key_bytes(key)?;
    let unbound = UnboundKey::new(&AES_256_GCM, &bytes).expect("length checked above");
    let cipher = LessSafeKey::new(unbound);
    Ok(RingKey {
        id: KeyId::of(&cipher),
        bytes,
        cipher,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K1: [u8; 32] = [1; 32];
    const K2: [u8; 32] = [2; 32];

    #[test]
    fn round_trip_and_layout() {
        let ring = Keyring::new(&K1, &[]).unwrap();
        let frame = ring.seal(b"hello");
        assert_eq!(frame.len(), 5 + OVERHEAD);
        assert_eq!(&frame[..4], b"GRID");
        assert_eq!(frame[4], 1);
        assert_eq!(ring.open(&frame).unwrap(), b"hello");
    }

    #[test]
    fn nonces_count_under_a_random_salt() {
        let ring = Keyring::new(&K1, &[]).unwrap();
        let (a, b) = (ring.seal(b"x"), ring.seal(b"x"));
        assert_ne!(a[5..17], b[5..17]);
        assert_eq!(a[5..13], b[5..13]);
        assert_eq!(u32::from_be_bytes(b[13..17].try_into().unwrap()), 2);
        let other = Keyring::new(&K1, &[]).unwrap();
        assert_ne!(other.seal(b"x")[5..13], a[5..13]);
    }

    #[test]
    fn a_new_salt_is_drawn_before_the_counter_wraps() {
        let mut sequence = NonceSequence::fresh();
        sequence.counter = u32::MAX - 1;
        let last = sequence.next();
        let next = sequence.next();
        assert_eq!(last[8..], u32::MAX.to_be_bytes());
        assert_ne!(last[..8], next[..8]);
        assert_eq!(next[8..], 1u32.to_be_bytes());
    }

    #[test]
    fn known_vector_opens() {
        // key = 00..1f, nonce = 00..0b, plaintext = b"grid test vector"; sealed by an
        // independent AES-GCM (the Python test suite seals the same vector with pyca).
        let key: Vec<u8> = (0u8..32).collect();
        let frame = hex(concat!(
            "4752494401000102030405060708090a0b",
            "2070bf7fe591a768f961e1eed29d171f",
            "a646f5d68df75fe782b9e7a1940e041f",
        ));
        let ring = Keyring::new(&key, &[]).unwrap();
        assert_eq!(ring.open(&frame).unwrap(), b"grid test vector");
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn drop_reasons() {
        let ring = Keyring::new(&K1, &[]).unwrap();
        let good = ring.seal(b"payload");
        assert_eq!(ring.open(&good[..32]), Err(DropReason::TooShort));
        assert_eq!(ring.open(&[0; MAX_FRAME_LEN + 1]), Err(DropReason::TooLong));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(ring.open(&bad), Err(DropReason::BadMagic));
        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(ring.open(&bad), Err(DropReason::UnknownVersion));
        let mut bad = good.clone();
        bad[20] ^= 1;
        assert_eq!(ring.open(&bad), Err(DropReason::AuthFailed));
        let other = Keyring::new(&K2, &[]).unwrap();
        assert_eq!(other.open(&good), Err(DropReason::AuthFailed));
    }

    #[test]
    fn rotation() {
        let mut a = Keyring::new(&K1, &[]).unwrap();
        let mut b = Keyring::new(&K1, &[]).unwrap();
        b.install(&K2).unwrap();
        b.use_key(&K2).unwrap();
        // a has not installed K2 yet: b's frames fail at a until it does.
        assert_eq!(a.open(&b.seal(b"x")), Err(DropReason::AuthFailed));
        a.install(&K2).unwrap();
        assert_eq!(a.open(&b.seal(b"x")).unwrap(), b"x");
        assert_eq!(b.open(&a.seal(b"y")).unwrap(), b"y");
        assert_eq!(b.remove(&K2), Err(KeyringError::RemovePrimary));
        b.remove(&K1).unwrap();
        assert_eq!(b.key_ids().len(), 1);
        assert_eq!(b.remove(&K1), Err(KeyringError::UnknownKey));
        assert_eq!(
            Keyring::new(&[0; 31], &[]).err(),
            Some(KeyringError::BadKeyLength(31))
        );
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let ring = Keyring::new(&[0xAB; 32], &[]).unwrap();
        let text = format!("{ring:?}");
        assert!(!text.contains("171"), "{text}");
        assert!(!text.to_lowercase().contains("abab"), "{text}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_open(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let ring = Keyring::new(&K1, &[&K2]).unwrap();
            prop_assert!(ring.open(&data).is_err());
        }

        #[test]
        fn any_single_bit_flip_is_refused(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            bit in any::<prop::sample::Index>(),
        ) {
            let ring = Keyring::new(&K1, &[]).unwrap();
            let mut frame = ring.seal(&payload);
            let i = bit.index(frame.len() * 8);
            frame[i / 8] ^= 1 << (i % 8);
            prop_assert!(ring.open(&frame).is_err());
        }

        #[test]
        fn seal_open_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..MAX_PLAINTEXT_LEN)) {
            let ring = Keyring::new(&K1, &[&K2]).unwrap();
            prop_assert_eq!(ring.open(&ring.seal(&payload)).unwrap(), payload);
        }
    }
}
