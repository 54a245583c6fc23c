//! What authenticating a SWIM message costs, beside the frame alone, in one run.
//!
//! For messages that fill frames of 256 and 1,400 bytes: the frame alone (seal, open:
//! AES-256-GCM with the counter nonce, the whole cost per message before signatures), then
//! the frame plus the signed trailer (sign + seal; open + decode + verify) with an ECDSA
//! P-256 and an Ed25519 site key. Each figure is the median of 15 rounds of 2,000
//! operations; ratios are against the frame alone at the same size.
//!
//! Run: `cargo run --release -p grid-core --example auth_cost`

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use grid_core::identity::auth::{SiteCredentials, TrustPolicy, MESSAGE_DOMAIN};
use grid_core::identity::{Interner, NodeAddr, NodeId};
use grid_core::wire::frame::{Keyring, OVERHEAD};
use grid_core::wire::{seal_message, Envelope, Proof, KIND_FOCA, TRAILER_LEN};
use rcgen::{
    BasicConstraints, CertificateParams, IsCa, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ED25519,
};

const ROUNDS: usize = 15;
const OPS: usize = 2_000;

fn credentials(
    site: &str,
    algorithm: &'static rcgen::SignatureAlgorithm,
) -> (SiteCredentials, TrustPolicy) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate_for(algorithm).unwrap();
    let leaf = CertificateParams::new(vec![site.to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let policy = TrustPolicy::new(&[ca.der().to_vec()], HashMap::new()).unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let creds = SiteCredentials::new(
        site,
        vec![leaf.der().to_vec()],
        &key.serialize_der(),
        &policy,
        now,
    )
    .unwrap();
    (creds, policy)
}

/// Median nanoseconds per operation.
fn median_ns(mut op: impl FnMut()) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..OPS {
                op();
            }
            start.elapsed().as_nanos() as f64 / OPS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let ring = Keyring::new(&[7; 32], &[]).unwrap();
    let interner = Interner::default();
    let to: SocketAddr = "127.0.0.1:7946".parse().unwrap();
    let sender = NodeId::new(
        interner.intern("site-a"),
        "127.0.0.1:7947".parse().unwrap(),
        1,
    );
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let keys = [
        (
            "ECDSA P-256",
            credentials("site-a", &PKCS_ECDSA_P256_SHA256),
        ),
        ("Ed25519", credentials("site-a", &PKCS_ED25519)),
    ];
    println!(
        "bytes added per message: {TRAILER_LEN} (seq 8, sent_at 8, destination 18, signature 64)"
    );
    println!(
        "{:>6}  {:<12} {:>14} {:>14} {:>8} {:>8}",
        "frame", "key", "send ns/msg", "receive ns/msg", "send x", "recv x"
    );
    for frame_len in [256usize, 1_400] {
        let plain_len = frame_len - OVERHEAD;
        let mut body = Vec::new();
        body.push(KIND_FOCA);
        sender.encode(&mut body);
        body.resize(plain_len, 0xAB);
        let mut frame = Vec::with_capacity(frame_len);
        let mut scratch = Vec::with_capacity(frame_len);
        let sealed = ring.seal(&body);
        let seal = median_ns(|| {
            frame.clear();
            ring.seal_into(&body, &mut frame);
        });
        let open = median_ns(|| {
            ring.open_into(&sealed, &mut scratch).unwrap();
        });
        println!(
            "{frame_len:>6}  {:<12} {seal:>14.0} {open:>14.0} {:>8.2} {:>8.2}",
            "frame alone", 1.0, 1.0
        );
        let unsigned = &body[..plain_len - TRAILER_LEN];
        for (name, (creds, _policy)) in &keys {
            let signer = creds.signer();
            let public = creds.public_key();
            let mut message = Vec::with_capacity(plain_len);
            let mut seq = 0u64;
            let send = median_ns(|| {
                seq += 1;
                message.clear();
                message.extend_from_slice(unsigned);
                seal_message(
                    &mut message,
                    seq,
                    wall.as_millis() as u64,
                    NodeAddr::new(to),
                    |s| signer.sign(MESSAGE_DOMAIN, s),
                );
                frame.clear();
                ring.seal_into(&message, &mut frame);
            });
            assert_eq!(frame.len(), frame_len);
            let sealed = frame.clone();
            let receive = median_ns(|| {
                ring.open_into(&sealed, &mut scratch).unwrap();
                let envelope = Envelope::decode(&scratch, &interner).unwrap();
                let Proof::Signature(signature) = envelope.proof else {
                    unreachable!("sealed in the signed form")
                };
                assert!(public.verify(MESSAGE_DOMAIN, envelope.signed, signature));
            });
            println!(
                "{frame_len:>6}  {name:<12} {send:>14.0} {receive:>14.0} {:>8.2} {:>8.2}",
                send / seal,
                receive / open
            );
        }
    }
}
