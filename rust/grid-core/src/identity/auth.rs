//! Who may speak as a site: site credentials, certificate checks, signatures and replay
//! windows.
//!
//! The shared SWIM key keeps strangers out but cannot tell key holders apart. A site is
//! named by its certificate: it chains to the network CA (or matches the site's pinned
//! SHA-256 fingerprint) and carries the site name as a DNS subject alternative name. The
//! certificate's key (ECDSA P-256 or Ed25519) signs every message the site sends and every
//! item it publishes; receivers verify with the key they learned from the certificate.
//!
//! Signatures are 64 bytes for both algorithms (P-256 in the fixed `r | s` form) and cover
//! a domain label followed by the signed bytes, so a message signature can never pass for
//! an item signature or the other way round.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ring::digest::{digest, SHA256};
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING, ED25519,
};
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use webpki::{anchor_from_trusted_cert, EndEntityCert, KeyUsage, ALL_VERIFICATION_ALGS};

/// Every signature, whatever the key: ECDSA P-256 `r | s` or Ed25519.
pub const SIGNATURE_LEN: usize = 64;
/// SHA-256 of a certificate's DER: what `GridSite.spec.trust.certFingerprint` pins.
pub const FINGERPRINT_LEN: usize = 32;
/// A site presents at most this many certificates (leaf first, then intermediates).
pub const MAX_CHAIN_LEN: usize = 4;

/// Domain labels: what kind of bytes a signature vouches for.
pub const MESSAGE_DOMAIN: &[u8] = b"grid message v1\0";
pub const ITEM_DOMAIN: &[u8] = b"grid item v1\0";

/// DER prefix of a P-256 SubjectPublicKeyInfo; the 65-byte uncompressed point follows.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32-byte key follows.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Why credentials or a presented certificate were refused. A refused certificate changes
/// nothing: the sender stays unknown and its messages keep being dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthError {
    /// The private key is not PKCS#8 DER of an ECDSA P-256 or Ed25519 key.
    BadPrivateKey,
    /// A certificate is not DER X.509 that this build can parse.
    BadCertificate(String),
    /// The certificate's key is neither ECDSA P-256 nor Ed25519 (RSA signatures would not
    /// fit the packet budget).
    UnsupportedKey,
    /// The private key does not belong to the certificate.
    KeyMismatch,
    /// The certificate does not carry the site name as a DNS subject alternative name.
    NotForSite(String),
    /// The site's pinned fingerprint is another certificate's.
    PinMismatch(String),
    /// No chain to a trusted CA (or the certificate is expired, not yet valid, or not for
    /// TLS server use); the text is the path validator's reason.
    Untrusted(String),
    /// No CA and no pin: nothing could vouch for this site's certificate.
    NoTrustAnchor(String),
    /// More certificates than [`MAX_CHAIN_LEN`], or none.
    BadChain(usize),
    /// The network revoked this certificate (its fingerprint is listed): whatever it
    /// signed is refused, and what it signed before is dropped.
    Revoked(String),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::BadPrivateKey => f.write_str(
                "the site private key is not PKCS#8 DER of an ECDSA P-256 or Ed25519 key",
            ),
            AuthError::BadCertificate(why) => write!(f, "certificate does not parse: {why}"),
            AuthError::UnsupportedKey => f.write_str(
                "the certificate's key is neither ECDSA P-256 nor Ed25519; SWIM signatures \
                 need one of those",
            ),
            AuthError::Revoked(site) => write!(
                f,
                "the certificate of site {site:?} is revoked by the network; the site needs a \
                 new certificate"
            ),
            AuthError::KeyMismatch => {
                f.write_str("the site private key does not belong to the site certificate")
            }
            AuthError::NotForSite(site) => write!(
                f,
                "the certificate does not name site {site:?} (it must be a DNS subject \
                 alternative name)"
            ),
            AuthError::PinMismatch(site) => write!(
                f,
                "the certificate of site {site:?} does not match the site's pinned fingerprint"
            ),
            AuthError::Untrusted(why) => {
                write!(f, "the certificate does not chain to the network CA: {why}")
            }
            AuthError::NoTrustAnchor(site) => write!(
                f,
                "nothing vouches for site {site:?}: no network CA is configured and the site \
                 has no pinned fingerprint"
            ),
            AuthError::BadChain(n) => write!(
                f,
                "a site presents 1 to {MAX_CHAIN_LEN} certificates, got {n}"
            ),
        }
    }
}

impl std::error::Error for AuthError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyAlgorithm {
    EcdsaP256,
    Ed25519,
}

/// A site's verified public key, with the fingerprint of the certificate it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    algorithm: KeyAlgorithm,
    bytes: Arc<[u8]>,
    fingerprint: [u8; FINGERPRINT_LEN],
}

impl PublicKey {
    fn from_spki(spki: &[u8], fingerprint: [u8; FINGERPRINT_LEN]) -> Result<PublicKey, AuthError> {
        let (algorithm, raw) = if let Some(raw) = spki.strip_prefix(&P256_SPKI_PREFIX[..]) {
            (KeyAlgorithm::EcdsaP256, raw)
        } else if let Some(raw) = spki.strip_prefix(&ED25519_SPKI_PREFIX[..]) {
            (KeyAlgorithm::Ed25519, raw)
        } else {
            return Err(AuthError::UnsupportedKey);
        };
        let expected = match algorithm {
            KeyAlgorithm::EcdsaP256 => 65,
            KeyAlgorithm::Ed25519 => 32,
        };
        if raw.len() != expected {
            return Err(AuthError::UnsupportedKey);
        }
        Ok(PublicKey {
            algorithm,
            bytes: Arc::from(raw),
            fingerprint,
        })
    }

    /// SHA-256 of the certificate this key was learned from.
    pub fn fingerprint(&self) -> [u8; FINGERPRINT_LEN] {
        self.fingerprint
    }

    /// Whether `signature` is this key's over `domain | signed`.
    pub fn verify(&self, domain: &[u8], signed: &[u8], signature: &[u8]) -> bool {
        let message = [domain, signed].concat();
        let algorithm: &'static dyn ring::signature::VerificationAlgorithm = match self.algorithm {
            KeyAlgorithm::EcdsaP256 => &ECDSA_P256_SHA256_FIXED,
            KeyAlgorithm::Ed25519 => &ED25519,
        };
        UnparsedPublicKey::new(algorithm, &self.bytes[..])
            .verify(&message, signature)
            .is_ok()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PublicKey({:?}, {})",
            self.algorithm,
            hex(&self.fingerprint)
        )
    }
}

enum SigningKey {
    EcdsaP256(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// The site's private key. It signs and is never shown: `Debug` names the algorithm only.
pub struct Signer {
    key: SigningKey,
    rng: SystemRandom,
}

impl Signer {
    /// Reads a PKCS#8 DER private key (ECDSA P-256 or Ed25519).
    pub fn from_pkcs8(der: &[u8]) -> Result<Signer, AuthError> {
        let rng = SystemRandom::new();
        let key = if let Ok(pair) =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
        {
            SigningKey::EcdsaP256(pair)
        } else if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            SigningKey::Ed25519(pair)
        } else {
            return Err(AuthError::BadPrivateKey);
        };
        Ok(Signer { key, rng })
    }

    fn public_bytes(&self) -> &[u8] {
        match &self.key {
            SigningKey::EcdsaP256(pair) => pair.public_key().as_ref(),
            SigningKey::Ed25519(pair) => pair.public_key().as_ref(),
        }
    }

    /// The signature over `domain | signed`.
    pub fn sign(&self, domain: &[u8], signed: &[u8]) -> [u8; SIGNATURE_LEN] {
        let message = [domain, signed].concat();
        let mut out = [0u8; SIGNATURE_LEN];
        match &self.key {
            SigningKey::EcdsaP256(pair) => {
                let signature = pair
                    .sign(&self.rng, &message)
                    .expect("the OS RNG is available");
                out.copy_from_slice(signature.as_ref());
            }
            SigningKey::Ed25519(pair) => out.copy_from_slice(pair.sign(&message).as_ref()),
        }
        out
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let algorithm = match self.key {
            SigningKey::EcdsaP256(_) => "EcdsaP256",
            SigningKey::Ed25519(_) => "Ed25519",
        };
        write!(f, "Signer({algorithm})")
    }
}

/// What vouches for a site's certificate: the network's CA certificates, and pinned
/// fingerprints per site (where a site has pins, one must match, with or without a CA; a
/// site has two while its certificate is being rotated).
#[derive(Default)]
pub struct TrustPolicy {
    anchors: Vec<TrustAnchor<'static>>,
    pins: Pins,
    /// Fingerprints of revoked certificates: refused whatever vouches for them.
    revoked: HashSet<[u8; FINGERPRINT_LEN]>,
}

/// Pinned certificate fingerprints, by site name.
pub type Pins = HashMap<String, Vec<[u8; FINGERPRINT_LEN]>>;

impl fmt::Debug for TrustPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustPolicy")
            .field("anchors", &self.anchors.len())
            .field("pins", &self.pins.len())
            .field("revoked", &self.revoked.len())
            .finish()
    }
}

impl TrustPolicy {
    /// `anchors` are DER CA certificates.
    pub fn new(anchors: &[Vec<u8>], pins: Pins) -> Result<TrustPolicy, AuthError> {
        let anchors = anchors
            .iter()
            .map(|der| {
                anchor_from_trusted_cert(&CertificateDer::from(der.as_slice()))
                    .map(|anchor| anchor.to_owned())
                    .map_err(|err| AuthError::BadCertificate(format!("CA certificate: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustPolicy {
            anchors,
            pins,
            revoked: HashSet::new(),
        })
    }

    /// The same policy refusing the certificates with these SHA-256 fingerprints.
    pub fn with_revoked(
        mut self,
        revoked: impl IntoIterator<Item = [u8; FINGERPRINT_LEN]>,
    ) -> Self {
        self.revoked = revoked.into_iter().collect();
        self
    }

    /// Whether the certificate with this fingerprint is revoked.
    pub fn is_revoked(&self, fingerprint: &[u8; FINGERPRINT_LEN]) -> bool {
        self.revoked.contains(fingerprint)
    }

    /// Replaces the pinned fingerprints (site name → SHA-256 of its certificate).
    pub fn set_pins(&mut self, pins: Pins) {
        self.pins = pins;
    }

    /// Whether `fingerprint` is still acceptable for `site` under the pins.
    pub fn admits_fingerprint(&self, site: &str, fingerprint: &[u8; FINGERPRINT_LEN]) -> bool {
        self.pins
            .get(site)
            .map_or(true, |pins| pins.is_empty() || pins.contains(fingerprint))
    }

    /// The key that `chain` (leaf first) proves to be `site`'s at wall-clock time `now`
    /// (since the Unix epoch).
    pub fn certify(
        &self,
        site: &str,
        chain: &[&[u8]],
        now: Duration,
    ) -> Result<PublicKey, AuthError> {
        let Some((leaf_der, intermediates)) = chain.split_first() else {
            return Err(AuthError::BadChain(0));
        };
        if chain.len() > MAX_CHAIN_LEN {
            return Err(AuthError::BadChain(chain.len()));
        }
        let leaf_der = CertificateDer::from(*leaf_der);
        let leaf = EndEntityCert::try_from(&leaf_der)
            .map_err(|err| AuthError::BadCertificate(err.to_string()))?;
        if !leaf
            .valid_dns_names()
            .any(|name| name.eq_ignore_ascii_case(site))
        {
            return Err(AuthError::NotForSite(site.to_owned()));
        }
        let mut fingerprint = [0u8; FINGERPRINT_LEN];
        fingerprint.copy_from_slice(digest(&SHA256, leaf_der.as_ref()).as_ref());
        if self.revoked.contains(&fingerprint) {
            return Err(AuthError::Revoked(site.to_owned()));
        }

        let pinned = match self.pins.get(site) {
            Some(pins) if pins.is_empty() => false,
            Some(pins) if !pins.contains(&fingerprint) => {
                return Err(AuthError::PinMismatch(site.to_owned()))
            }
            Some(_) => true,
            None => false,
        };
        let intermediates: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|der| CertificateDer::from(*der))
            .collect();
        let verify = |anchors: &[TrustAnchor<'_>]| {
            leaf.verify_for_usage(
                ALL_VERIFICATION_ALGS,
                anchors,
                &intermediates,
                UnixTime::since_unix_epoch(now),
                KeyUsage::server_auth(),
                None,
                None,
            )
            .map(|_| ())
            .map_err(|err| AuthError::Untrusted(format!("{err:?}")))
        };
        let mut outcome = if self.anchors.is_empty() {
            Err(AuthError::NoTrustAnchor(site.to_owned()))
        } else {
            verify(&self.anchors)
        };
        if outcome.is_err() && pinned {
            // The operator vouched for this exact certificate, which may be self-signed:
            // it anchors itself, and its dates and usage are still checked.
            let own = anchor_from_trusted_cert(&leaf_der)
                .map_err(|err| AuthError::BadCertificate(err.to_string()))?;
            outcome = verify(&[own]);
        }
        outcome?;
        PublicKey::from_spki(leaf.subject_public_key_info().as_ref(), fingerprint)
    }
}

/// A site's own credentials: its certificate chain (presented in `HELLO`) and the key that
/// signs for it.
pub struct SiteCredentials {
    signer: Signer,
    chain: Vec<Vec<u8>>,
    public: PublicKey,
}

impl fmt::Debug for SiteCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SiteCredentials")
            .field("signer", &self.signer)
            .field("certificate", &hex(&self.public.fingerprint))
            .finish()
    }
}

impl SiteCredentials {
    /// Checks that `chain` is trusted for `site` by the network's own `policy` (peers would
    /// refuse it otherwise) and that `private_key` (PKCS#8 DER) is the leaf's key.
    pub fn new(
        site: &str,
        chain: Vec<Vec<u8>>,
        private_key: &[u8],
        policy: &TrustPolicy,
        now: Duration,
    ) -> Result<SiteCredentials, AuthError> {
        let signer = Signer::from_pkcs8(private_key)?;
        let refs: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
        let public = policy.certify(site, &refs, now)?;
        if *public.bytes != *signer.public_bytes() {
            return Err(AuthError::KeyMismatch);
        }
        Ok(SiteCredentials {
            signer,
            chain,
            public,
        })
    }

    pub fn chain(&self) -> &[Vec<u8>] {
        &self.chain
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    pub fn signer(&self) -> &Signer {
        &self.signer
    }
}

/// How a driver authenticates: with a site's credentials against the network's trust
/// policy, or not at all.
///
/// `Unsigned` is for the simulator, which studies SWIM's dynamics among thousands of
/// drivers in one process: messages keep their layout (a zeroed signature, so sizes are
/// real), every sender counts as verified, and no replay windows are kept (10,000 nodes
/// each hearing from 10,000 others would hold 10⁸ of them; a simulation has no attacker).
/// A real node always runs `Certified`.
#[derive(Debug)]
pub enum Authority {
    Certified {
        credentials: Box<SiteCredentials>,
        policy: TrustPolicy,
    },
    Unsigned,
}

impl Authority {
    pub fn sign(&self, domain: &[u8], signed: &[u8]) -> [u8; SIGNATURE_LEN] {
        match self {
            Authority::Certified { credentials, .. } => credentials.signer.sign(domain, signed),
            Authority::Unsigned => [0u8; SIGNATURE_LEN],
        }
    }

    pub fn is_unsigned(&self) -> bool {
        matches!(self, Authority::Unsigned)
    }
}

/// Sequence numbers seen from one sender: the highest, and which of the
/// [`REPLAY_WINDOW`] before it (RFC 6479's ring of bit words, so advancing the window
/// clears words instead of shifting bits).
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    top: u64,
    words: [u64; WINDOW_WORDS],
}

const WINDOW_WORDS: usize = 32;
/// Sequence numbers further than this behind the highest one seen are refused as too old.
/// One word less than the ring, as RFC 6479 keeps one word free for the advancing edge.
pub const REPLAY_WINDOW: u64 = ((WINDOW_WORDS - 1) * 64) as u64;

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            words: [0; WINDOW_WORDS],
        }
    }
}

impl ReplayWindow {
    /// Whether `seq` would be accepted (not seen, not too old); changes nothing.
    pub fn admits(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        if self.top - seq >= REPLAY_WINDOW {
            return false;
        }
        let (word, bit) = Self::slot(seq);
        self.words[word] & bit == 0
    }

    /// Records `seq`; false (and nothing recorded) if it was seen or is too old.
    pub fn accept(&mut self, seq: u64) -> bool {
        if !self.admits(seq) {
            return false;
        }
        if seq > self.top {
            let from = self.top / 64 + 1;
            let to = seq / 64;
            let steps = (to + 1).saturating_sub(from).min(WINDOW_WORDS as u64);
            for block in (to + 1 - steps)..=to {
                self.words[(block % WINDOW_WORDS as u64) as usize] = 0;
            }
            self.top = seq;
        }
        let (word, bit) = Self::slot(seq);
        self.words[word] |= bit;
        true
    }

    fn slot(seq: u64) -> (usize, u64) {
        (
            ((seq / 64) % WINDOW_WORDS as u64) as usize,
            1u64 << (seq % 64),
        )
    }
}

/// A signer and its public key from a fixed Ed25519 seed, for unit tests.
#[cfg(test)]
pub(crate) fn test_key(seed: u8) -> (Signer, PublicKey) {
    let pair = Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).expect("32-byte seed");
    let spki = [&ED25519_SPKI_PREFIX[..], pair.public_key().as_ref()].concat();
    let public = PublicKey::from_spki(&spki, [seed; FINGERPRINT_LEN]).expect("Ed25519 SPKI");
    let signer = Signer {
        key: SigningKey::Ed25519(pair),
        rng: SystemRandom::new(),
    };
    (signer, public)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_refuses_repeats_and_the_too_old() {
        let mut w = ReplayWindow::default();
        assert!(!w.accept(0));
        assert!(w.accept(1));
        assert!(!w.accept(1));
        assert!(w.accept(5));
        assert!(w.accept(3));
        assert!(!w.accept(3));
        assert!(w.accept(2));
        assert!(w.accept(5000));
        assert!(!w.accept(5000));
        assert!(!w.accept(5));
        assert!(w.accept(5000 - REPLAY_WINDOW + 1));
        assert!(!w.accept(5000 - REPLAY_WINDOW));
        // A jump of more than the whole ring forgets everything before it.
        assert!(w.accept(1 << 40));
        assert!(!w.accept(5000 - 1));
        assert!(w.accept((1 << 40) - 1));
    }

    #[test]
    fn window_accepts_every_number_once_in_any_order_within_the_window() {
        let mut w = ReplayWindow::default();
        let mut order: Vec<u64> = (1..=REPLAY_WINDOW).collect();
        // A fixed shuffle: reversed halves interleaved.
        order.reverse();
        for seq in &order {
            assert!(w.accept(*seq), "{seq}");
        }
        for seq in &order {
            assert!(!w.accept(*seq), "{seq}");
        }
    }

    #[test]
    fn spki_prefixes_pick_the_algorithm() {
        let mut p256 = P256_SPKI_PREFIX.to_vec();
        p256.extend([4u8; 65]);
        assert_eq!(
            PublicKey::from_spki(&p256, [0; 32]).unwrap().algorithm,
            KeyAlgorithm::EcdsaP256
        );
        let mut ed = ED25519_SPKI_PREFIX.to_vec();
        ed.extend([1u8; 32]);
        assert_eq!(
            PublicKey::from_spki(&ed, [0; 32]).unwrap().algorithm,
            KeyAlgorithm::Ed25519
        );
        assert_eq!(
            PublicKey::from_spki(&ed[..40], [0; 32]),
            Err(AuthError::UnsupportedKey)
        );
        assert_eq!(
            PublicKey::from_spki(&[0x30, 0x00], [0; 32]),
            Err(AuthError::UnsupportedKey)
        );
    }

    #[test]
    fn bad_private_keys_are_refused() {
        assert_eq!(
            Signer::from_pkcs8(b"not a key").unwrap_err(),
            AuthError::BadPrivateKey
        );
    }
}
