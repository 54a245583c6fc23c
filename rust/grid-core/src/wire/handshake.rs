//! The session handshake and the session form of a message: the cryptography, no state.
//!
//! Two nodes that both speak protocol 3 agree a pair of symmetric keys once, in two signed
//! messages, and then authenticate every message between them with those keys instead of
//! a signature (see [`crate::wire::session`] for when each form is used, and
//! docs/security.md for what holds):
//!
//! ```text
//! HANDSHAKE_INIT      initiator identity | responder identity | initiator index u32 | X25519 public [32]
//! HANDSHAKE_RESPONSE  responder identity | initiator identity | initiator index u32 | responder index u32 | X25519 public [32]
//! ```
//!
//! Both travel in the signed form, so each proves its sender's site, its freshness and the
//! address it was sent to like any signed message. Each side's ephemeral X25519 key is
//! made for this handshake alone and dropped once the keys are derived:
//!
//! ```text
//! transcript = SHA-256(TRANSCRIPT_DOMAIN | init as signed | response as signed)
//! keys       = HKDF-SHA256(salt = KEY_SALT, ikm = X25519(ephemerals), info = transcript), 64 bytes
//!              first 32: initiator → responder, last 32: responder → initiator
//! ```
//!
//! "As signed" is everything the signature covers: kind, body and the trailer before the
//! signature, so the keys are bound to both identities (site, address, generation), both
//! destination addresses, both ephemeral keys, both indices and both send times. The
//! network is bound by the frame key every datagram is encrypted with.
//!
//! A message in the session form carries the receiver's index for the session and a
//! 16-byte AES-256-GCM tag over everything before it (an empty plaintext, the message as
//! associated data, the sender's sequence number as nonce: one per message under a key, as
//! the sequence number never repeats within a process).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::digest::{Context, SHA256};
use ring::hkdf::{KeyType, Salt, HKDF_SHA256};
use ring::rand::{SecureRandom, SystemRandom};

use crate::identity::{Interner, NodeId};
use crate::reader::{Reader, WireError};

/// Bytes of an X25519 public key.
pub const EPHEMERAL_LEN: usize = 32;
/// Bytes of the tag that authenticates a message in the session form.
pub const TAG_LEN: usize = 16;
/// What the transcript hash starts with: it names this use of the two messages.
const TRANSCRIPT_DOMAIN: &[u8] = b"grid session transcript v1\0";
/// The HKDF salt: separates these keys from anything else derived from an X25519 secret.
const KEY_SALT: &[u8] = b"grid session keys v1";

/// One side's ephemeral key for one handshake.
pub struct Ephemeral {
    secret: EphemeralPrivateKey,
    public: [u8; EPHEMERAL_LEN],
}

impl Ephemeral {
    pub fn generate() -> Ephemeral {
        let rng = SystemRandom::new();
        let secret =
            EphemeralPrivateKey::generate(&X25519, &rng).expect("the system random source works");
        let mut public = [0u8; EPHEMERAL_LEN];
        public.copy_from_slice(
            secret
                .compute_public_key()
                .expect("an X25519 key has a public key")
                .as_ref(),
        );
        Ephemeral { secret, public }
    }

    pub fn public(&self) -> &[u8; EPHEMERAL_LEN] {
        &self.public
    }

    /// The session keys, from the peer's public key and both handshake messages as
    /// signed; `None` if the peer's key is not a usable X25519 point. Consumes this key:
    /// it serves one handshake.
    pub fn agree(
        self,
        theirs: &[u8; EPHEMERAL_LEN],
        init: &[u8],
        response: &[u8],
        initiator: bool,
    ) -> Option<SessionKeys> {
        let transcript = transcript(init, response);
        let mut okm = [0u8; 64];
        agreement::agree_ephemeral(
            self.secret,
            &UnparsedPublicKey::new(&X25519, theirs),
            |shared| {
                Salt::new(HKDF_SHA256, KEY_SALT)
                    .extract(shared)
                    .expand(&[&transcript], Okm64)
                    .and_then(|okm_| okm_.fill(&mut okm))
            },
        )
        .ok()?
        .ok()?;
        let (to_responder, to_initiator) = okm.split_at(32);
        let (send, open) = if initiator {
            (to_responder, to_initiator)
        } else {
            (to_initiator, to_responder)
        };
        Some(SessionKeys {
            send: aead_key(send),
            open: aead_key(open),
        })
    }
}

/// The 64 bytes HKDF expands to.
struct Okm64;

impl KeyType for Okm64 {
    fn len(&self) -> usize {
        64
    }
}

fn transcript(init: &[u8], response: &[u8]) -> [u8; 32] {
    let mut context = Context::new(&SHA256);
    context.update(TRANSCRIPT_DOMAIN);
    context.update(init);
    context.update(response);
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

fn aead_key(bytes: &[u8]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("32 bytes make an AES-256 key"))
}

/// The two keys of one session: one for each direction.
pub struct SessionKeys {
    send: LessSafeKey,
    open: LessSafeKey,
}

impl SessionKeys {
    /// The tag for `covered` (the message up to the tag), sent with sequence number `seq`.
    pub fn tag(&self, seq: u64, covered: &[u8]) -> [u8; TAG_LEN] {
        let tag = self
            .send
            .seal_in_place_separate_tag(nonce(seq), Aad::from(covered), &mut [])
            .expect("an empty plaintext always seals");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Whether `tag` is the peer's tag for `covered` with sequence number `seq`.
    pub fn verifies(&self, seq: u64, covered: &[u8], tag: &[u8]) -> bool {
        let mut in_out = [0u8; TAG_LEN];
        if tag.len() != TAG_LEN {
            return false;
        }
        in_out.copy_from_slice(tag);
        self.open
            .open_in_place(nonce(seq), Aad::from(covered), &mut in_out)
            .is_ok()
    }
}

fn nonce(seq: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// A fresh, random session index (0 is never used: it stands for "none").
pub fn random_index() -> u32 {
    let rng = SystemRandom::new();
    loop {
        let mut bytes = [0u8; 4];
        rng.fill(&mut bytes)
            .expect("the system random source works");
        let index = u32::from_be_bytes(bytes);
        if index != 0 {
            return index;
        }
    }
}

/// A decoded `HANDSHAKE_INIT` body.
pub struct Init {
    pub initiator: NodeId,
    pub responder: NodeId,
    pub index: u32,
    pub ephemeral: [u8; EPHEMERAL_LEN],
}

impl Init {
    /// Appends the body (the caller writes the kind byte before it).
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.initiator.encode(out);
        self.responder.encode(out);
        out.extend_from_slice(&self.index.to_be_bytes());
        out.extend_from_slice(&self.ephemeral);
    }

    pub fn decode(body: &[u8], interner: &Interner) -> Result<Init, WireError> {
        let mut r = Reader::new(body);
        let init = Init {
            initiator: NodeId::decode(&mut r, interner)?,
            responder: NodeId::decode(&mut r, interner)?,
            index: r.u32()?,
            ephemeral: r.array()?,
        };
        finished(&r)?;
        Ok(init)
    }
}

/// A decoded `HANDSHAKE_RESPONSE` body.
pub struct Response {
    pub responder: NodeId,
    pub initiator: NodeId,
    pub initiator_index: u32,
    pub responder_index: u32,
    pub ephemeral: [u8; EPHEMERAL_LEN],
}

impl Response {
    /// Appends the body (the caller writes the kind byte before it).
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.responder.encode(out);
        self.initiator.encode(out);
        out.extend_from_slice(&self.initiator_index.to_be_bytes());
        out.extend_from_slice(&self.responder_index.to_be_bytes());
        out.extend_from_slice(&self.ephemeral);
    }

    pub fn decode(body: &[u8], interner: &Interner) -> Result<Response, WireError> {
        let mut r = Reader::new(body);
        let response = Response {
            responder: NodeId::decode(&mut r, interner)?,
            initiator: NodeId::decode(&mut r, interner)?,
            initiator_index: r.u32()?,
            responder_index: r.u32()?,
            ephemeral: r.array()?,
        };
        finished(&r)?;
        Ok(response)
    }
}

fn finished(r: &Reader<'_>) -> Result<(), WireError> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(WireError::TrailingBytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (SessionKeys, SessionKeys) {
        let (a, b) = (Ephemeral::generate(), Ephemeral::generate());
        let (a_pub, b_pub) = (*a.public(), *b.public());
        let init = b"init as signed";
        let response = b"response as signed";
        let initiator = a.agree(&b_pub, init, response, true).unwrap();
        let responder = b.agree(&a_pub, init, response, false).unwrap();
        (initiator, responder)
    }

    #[test]
    fn each_side_opens_what_the_other_tags_and_nothing_else() {
        let (initiator, responder) = pair();
        let message = b"kind body trailer index";
        let tag = initiator.tag(7, message);
        assert!(responder.verifies(7, message, &tag));
        assert!(
            !responder.verifies(8, message, &tag),
            "another sequence number"
        );
        assert!(!responder.verifies(7, b"kind body trailer indey", &tag));
        assert!(!initiator.verifies(7, message, &tag), "its own direction");
        let back = responder.tag(9, message);
        assert!(initiator.verifies(9, message, &back));
    }

    #[test]
    fn another_transcript_gives_other_keys() {
        let (a, b) = (Ephemeral::generate(), Ephemeral::generate());
        let (a_pub, b_pub) = (*a.public(), *b.public());
        let initiator = a.agree(&b_pub, b"init", b"response", true).unwrap();
        let responder = b
            .agree(&a_pub, b"init", b"another response", false)
            .unwrap();
        assert!(!responder.verifies(1, b"m", &initiator.tag(1, b"m")));
    }

    #[test]
    fn a_point_of_low_order_is_refused() {
        let ours = Ephemeral::generate();
        assert!(ours
            .agree(&[0u8; EPHEMERAL_LEN], b"i", b"r", true)
            .is_none());
    }
}
