//! What authenticating a SWIM message costs through the whole session layer, signed form
//! against session form, in one run; what a handshake costs; and what a key holder's
//! forged flood costs its target.
//!
//! Two [`Session`]s of two sites under one CA introduce themselves to each other; for the
//! signed form both speak only protocol 2 (the release before session keys), for the
//! session form they agree keys first. Then, for messages filling 256- and 1,400-byte
//! frames:
//!
//! - send: `Session::send` (sequence number, trailer, signature or tag) and the frame's
//!   AES-256-GCM seal;
//! - receive: the frame's open and `Session::open` (decode, address, clock, replay window,
//!   signature or session tag), each message a fresh one.
//!
//! Each figure is the median of 15 rounds of 2,000 operations; ratios are the signed form
//! over the session form in the same run. A handshake is timed whole (both sides: two
//! signatures, two verifications, two X25519 agreements, a confirm), median of 201. The
//! flood is 20,000 messages claiming a site that holds a session with the target, signed
//! by a key holder's own key, delivered within one second of the target's clock (the
//! signature-check budget's second): the CPU they take is the share of a core the flood
//! costs at 20,000 messages a second; median of 5 seconds.
//!
//! Run: `cargo run --release -p grid-core --example session_cost`

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use grid_core::driver::Transmit;
use grid_core::identity::auth::{Authority, SiteCredentials, TrustPolicy, MESSAGE_DOMAIN};
use grid_core::identity::{Interner, NodeAddr, NodeId};
use grid_core::wire::frame::{Keyring, OVERHEAD};
use grid_core::wire::session::{hello_wants_reply, Session, Verdict};
use grid_core::wire::versions::ProtocolRange;
use grid_core::wire::{
    seal_message, KIND_FOCA, KIND_HANDSHAKE_INIT, KIND_HANDSHAKE_RESPONSE, KIND_HELLO,
    SESSION_TRAILER_LEN, TRAILER_LEN,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, PKCS_ECDSA_P256_SHA256};

const ROUNDS: usize = 15;
const OPS: usize = 2_000;
const FLOOD: usize = 20_000;

#[derive(Default)]
struct Outbox(Vec<(SocketAddr, Vec<u8>)>);

impl Transmit for Outbox {
    fn send(&mut self, to: SocketAddr, message: &[u8]) {
        self.0.push((to, message.to_vec()));
    }
}

struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Ca { key, cert }
    }

    fn policy(&self) -> TrustPolicy {
        TrustPolicy::new(&[self.cert.der().to_vec()], HashMap::new()).unwrap()
    }

    fn authority(&self, site: &str) -> Authority {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let leaf = CertificateParams::new(vec![site.to_owned()])
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        let policy = self.policy();
        let credentials = SiteCredentials::new(
            site,
            vec![leaf.der().to_vec()],
            &key.serialize_der(),
            &policy,
            wall(),
        )
        .unwrap();
        Authority::Certified {
            credentials: Box::new(credentials),
            policy,
        }
    }
}

fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Two sessions that introduced themselves to each other (and, `in_session`, agreed keys).
struct Pair {
    ca: Ca,
    interner: Interner,
    a: Session,
    b: Session,
    a_id: NodeId,
    b_id: NodeId,
    now: Duration,
}

impl Pair {
    fn new(in_session: bool) -> Pair {
        let ca = Ca::new();
        let interner = Interner::default();
        let a_id = NodeId::new(interner.intern("site-a"), addr(7001), 1);
        let b_id = NodeId::new(interner.intern("site-b"), addr(7002), 1);
        let offset = wall();
        let mut a = Session::new(
            a_id.clone(),
            ca.authority("site-a"),
            interner.clone(),
            offset,
        );
        let mut b = Session::new(
            b_id.clone(),
            ca.authority("site-b"),
            interner.clone(),
            offset,
        );
        if !in_session {
            let before_sessions = ProtocolRange::new(2, 2).unwrap();
            a.set_protocols(before_sessions);
            b.set_protocols(before_sessions);
        }
        let mut pair = Pair {
            ca,
            interner,
            a,
            b,
            a_id,
            b_id,
            now: Duration::from_secs(1),
        };
        let mut out = Outbox::default();
        pair.a
            .send_hello(pair.now, pair.b_id.socket_addr(), true, &mut out);
        pair.deliver(out);
        let mut first = vec![KIND_FOCA];
        pair.a_id.encode(&mut first);
        let mut out = Outbox::default();
        pair.a
            .send(pair.now, pair.b_id.socket_addr(), &mut first, &mut out);
        pair.deliver(out);
        pair
    }

    /// Delivers messages both ways, answering `HELLO`s and handshakes as the driver does,
    /// until none is left.
    fn deliver(&mut self, mut out: Outbox) {
        while let Some((to, message)) = out.0.pop() {
            let (receiver, from) = if to == self.a_id.socket_addr() {
                (&mut self.a, self.b_id.socket_addr())
            } else {
                (&mut self.b, self.a_id.socket_addr())
            };
            let mut replies = Outbox::default();
            if let Verdict::Accepted(envelope) = receiver.open(self.now, &message) {
                match envelope.kind {
                    KIND_HELLO if hello_wants_reply(envelope.body, &self.interner) => {
                        receiver.send_hello(self.now, from, false, &mut replies)
                    }
                    KIND_HANDSHAKE_INIT => {
                        receiver.answer_handshake(self.now, &envelope, &mut replies)
                    }
                    KIND_HANDSHAKE_RESPONSE => {
                        receiver.complete_handshake(self.now, &envelope, &mut replies)
                    }
                    _ => {}
                }
            }
            out.0.extend(replies.0);
        }
    }

    /// A message from a to b filling `plain_len` bytes once sealed in `form_trailer`.
    fn body(&self, plain_len: usize, form_trailer: usize) -> Vec<u8> {
        let mut body = vec![KIND_FOCA];
        self.a_id.encode(&mut body);
        body.resize(plain_len - form_trailer, 0xAB);
        body
    }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median ns per send and per receive of `ROUNDS` × `OPS` messages from a to b.
fn send_and_receive(
    pair: &mut Pair,
    ring: &Keyring,
    frame_len: usize,
    in_session: bool,
) -> (f64, f64) {
    let trailer = if in_session {
        SESSION_TRAILER_LEN
    } else {
        TRAILER_LEN
    };
    let body = pair.body(frame_len - OVERHEAD, trailer);
    let to = pair.b_id.socket_addr();
    let mut frames = Vec::with_capacity(ROUNDS * OPS);
    let mut send_rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let mut out = Outbox::default();
        let start = Instant::now();
        for _ in 0..OPS {
            let mut message = body.clone();
            pair.a.send(pair.now, to, &mut message, &mut out);
            frames.push(ring.seal(&out.0.pop().unwrap().1));
        }
        send_rounds.push(start.elapsed().as_nanos() as f64 / OPS as f64);
        assert!(out.0.is_empty(), "no introduction or handshake in the way");
    }
    assert_eq!(frames[0].len(), frame_len);
    let mut scratch = Vec::with_capacity(frame_len);
    let mut receive_rounds = Vec::with_capacity(ROUNDS);
    for round in frames.chunks(OPS) {
        let start = Instant::now();
        for frame in round {
            ring.open_into(frame, &mut scratch).unwrap();
            assert!(matches!(
                pair.b.open(pair.now, &scratch),
                Verdict::Accepted(_)
            ));
        }
        receive_rounds.push(start.elapsed().as_nanos() as f64 / OPS as f64);
    }
    (median(send_rounds), median(receive_rounds))
}

/// Median ns of one whole handshake (a rekey of a's session with b).
fn handshake(pair: &mut Pair) -> f64 {
    let samples = (0..201)
        .map(|_| {
            // Past the rekey time, and past the introduction's refresh so no HELLO is due
            // in between: a's next message starts a handshake.
            pair.now += Duration::from_secs(121);
            let mut message = vec![KIND_FOCA];
            pair.a_id.encode(&mut message);
            let mut out = Outbox::default();
            let start = Instant::now();
            pair.a
                .send(pair.now, pair.b_id.socket_addr(), &mut message, &mut out);
            pair.deliver(out);
            start.elapsed().as_nanos() as f64
        })
        .collect();
    median(samples)
}

/// Nanoseconds the target spends on `FLOOD` forged messages within one second: key
/// holder site-m claims a, which holds a session with b, in the signed form.
fn flood(pair: &mut Pair, ring: &Keyring, seq: &mut u64) -> f64 {
    let mallory = pair.ca.authority("site-m");
    pair.now += Duration::from_secs(1);
    let wall_ms = (wall() + pair.now - Duration::from_secs(1)).as_millis() as u64;
    let b = NodeAddr::new(pair.b_id.socket_addr());
    let frames: Vec<Vec<u8>> = (0..FLOOD)
        .map(|_| {
            *seq += 1;
            let mut message = pair.body(256 - OVERHEAD, TRAILER_LEN);
            seal_message(&mut message, *seq, wall_ms, b, |signed| {
                mallory.sign(MESSAGE_DOMAIN, signed)
            });
            ring.seal(&message)
        })
        .collect();
    let mut scratch = Vec::with_capacity(256);
    let start = Instant::now();
    for frame in &frames {
        ring.open_into(frame, &mut scratch).unwrap();
        assert!(!matches!(
            pair.b.open(pair.now, &scratch),
            Verdict::Accepted(_)
        ));
    }
    start.elapsed().as_nanos() as f64
}

fn main() {
    let ring = Keyring::new(&[7; 32], &[]).unwrap();
    let mut signed = Pair::new(false);
    let mut session = Pair::new(true);
    assert_eq!(signed.a.stats().sessions, 0);
    assert!(session.a.stats().sessions >= 1);
    println!("per message, ECDSA P-256 site keys, frame seal/open included");
    println!(
        "{:>6}  {:>12} {:>12} {:>14} {:>14} {:>7} {:>7}",
        "frame",
        "signed send",
        "session send",
        "signed receive",
        "session receive",
        "send x",
        "recv x"
    );
    for frame_len in [256usize, 1_400] {
        let (signed_send, signed_receive) = send_and_receive(&mut signed, &ring, frame_len, false);
        let (session_send, session_receive) =
            send_and_receive(&mut session, &ring, frame_len, true);
        println!(
            "{frame_len:>6}  {signed_send:>10.0}ns {session_send:>10.0}ns {signed_receive:>12.0}ns {session_receive:>13.0}ns {:>7.1} {:>7.1}",
            signed_send / session_send,
            signed_receive / session_receive,
        );
    }
    let before = session.a.stats().handshakes_completed;
    let took = handshake(&mut session);
    assert!(session.a.stats().handshakes_completed >= before + 200);
    println!(
        "handshake, both sides: {:.0} µs median ({:.0} handshakes a second on one core)",
        took / 1e3,
        1e9 / took
    );
    let mut seq = 1u64 << 50;
    let before = session.b.stats();
    let seconds: Vec<f64> = (0..5)
        .map(|_| flood(&mut session, &ring, &mut seq))
        .collect();
    let after = session.b.stats();
    let checked = after.dropped_bad_signature - before.dropped_bad_signature;
    let unchecked = after.dropped_over_budget - before.dropped_over_budget;
    assert_eq!(checked + unchecked, 5 * FLOOD as u64);
    let cost = median(seconds);
    println!(
        "forged flood at {FLOOD}/s claiming a site in session: {:.1} ms of CPU a second ({:.1} % of a core); {checked} signatures checked, {unchecked} refused unchecked in 5 s",
        cost / 1e6,
        cost / 1e7,
    );
}
