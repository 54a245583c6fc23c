//! Wire and frames, the layer between identity and auth (below) and the item store and
//! the SWIM driver (above): what travels between nodes, and the checks it passes.
//!
//! - [`frame`]: the encrypted UDP frame around every datagram, and the keyring;
//! - this module: what travels inside a frame (below);
//! - [`session`]: the authenticated layer: what goes out is signed or tagged under a
//!   session key, what comes in is checked;
//! - [`handshake`]: how two nodes agree session keys, and the session form's tag;
//! - [`sites`]: the certificates a session knows for each site, current and earlier;
//! - [`versions`]: the protocol versions a node speaks and announces in its `HELLO`.
//!
//! What travels inside a frame: one signed message.
//!
//! ```text
//! message = kind u8 | body | seq u64 | sent_at_ms u64 | dst ip [16] | dst port u16 | signature [64]
//!
//! kind  name           body (every body starts with the sender's identity)
//! ----  -------------  ----------------------------------------------------------------
//! 0x01  FOCA           a foca datagram, encoded by [`WireCodec`] (its source identity first)
//! 0x02  SYNC_REQUEST   one chunk of the sender's full state; the recipient applies it and,
//!                      on chunk 0, answers with its own state as SYNC_RESPONSE chunks
//! 0x03  SYNC_RESPONSE  one chunk of the answer to a SYNC_REQUEST
//! 0x04  LEAVE          the sender's identity: it is leaving on purpose (seen as `left`)
//! 0x05  HELLO          identity | flags u8 | count u8 | (len u16 | certificate DER)*
//! 0x06  CONFLICT       identity | the identity that already holds the sender's site name
//! 0x07  DIGEST         identity | a Bloom filter of the item versions the sender stored
//!                      lately ([`crate::lanes::repair`]); the recipient answers with REPAIR
//! 0x08  REPAIR         one chunk (sync chunk layout, item entries only) of the items a
//!                      DIGEST showed the sender lacks
//! 0x09  HANDSHAKE_INIT      identity | responder identity | index u32 | X25519 public [32]
//! 0x0A  HANDSHAKE_RESPONSE  identity | initiator identity | initiator index u32 |
//!                      responder index u32 | X25519 public [32] ([`handshake`])
//! 0x0B  HANDSHAKE_CONFIRM   identity (only in the session form: the initiator holds the
//!                      keys)
//! ```
//!
//! The trailer makes every message fresh, addressed and attributable: `seq` counts the
//! sender's messages (one counter per process), `sent_at_ms` is the sender's wall clock,
//! `dst` the address it was sent to, and the signature (by the sender site's certificate
//! key, over [`crate::identity::auth::MESSAGE_DOMAIN`] and everything before it) proves the
//! sender.
//!
//! Between two nodes that agreed session keys ([`handshake`], protocol 3), a message takes
//! the session form instead: the kind byte has [`SESSION_FORM`] set, and the signature is
//! replaced by the receiver's session index and a tag under the session key:
//!
//! ```text
//! message = kind|0x80 u8 | body | seq u64 | sent_at_ms u64 | dst ip [16] | dst port u16 | index u32 | tag [16]
//! ```
//!
//! Every integer is big-endian. An identity is `site_len u8 | site | family u8 (4 or 6) |
//! ip (4 or 16) | port u16 | generation u64` (see [`crate::identity`]). A foca message is
//! `src | src_incarnation u16 | dst | tag u8 | fields`, then foca's own update count, members
//! (`identity | incarnation u16 | state u8`) and length-prefixed broadcast items. A sync chunk
//! is `sender identity | sync_id u32 | index u16 | count u16 | entries`, each entry
//! `tag u8 (1 member, 2 item, 3 certificate, 4 resume, 5 walk end, 6 earlier certificate) |
//! len u16 | body`, members carrying state 3 for `left`, certificates (current or earlier,
//! the latter only to peers speaking protocol 3) as `site_len u8 | site | count u8 |
//! (len u16 | der)*`.
//! docs/wire-format.md has the whole table.
//!
//! The decoding cursor [`Reader`] and [`WireError`] are defined in [`crate::reader`], below
//! [`crate::identity`] (which decodes identities with them and which this module needs),
//! and re-exported here.

use bytes::{Buf, BufMut};
use foca::{Codec, Header, Member, Message, State};

use crate::identity::auth::SIGNATURE_LEN;
use crate::identity::{Interner, NodeAddr, NodeId, MAX_IDENTITY_LEN, RAW_ADDR_LEN};
use crate::wire::handshake::{SessionKeys, TAG_LEN};

/// The decoding cursor and its error, defined below the identity codec (which reads with
/// them too) in [`crate::reader`]; every other decoder takes them from here.
pub use crate::reader::{Reader, WireError};

pub mod frame;
pub mod handshake;
pub mod session;
pub mod sites;
pub mod versions;

pub const KIND_FOCA: u8 = 0x01;
pub const KIND_SYNC_REQUEST: u8 = 0x02;
pub const KIND_SYNC_RESPONSE: u8 = 0x03;
pub const KIND_LEAVE: u8 = 0x04;
pub const KIND_HELLO: u8 = 0x05;
pub const KIND_CONFLICT: u8 = 0x06;
pub const KIND_DIGEST: u8 = 0x07;
pub const KIND_REPAIR: u8 = 0x08;
pub const KIND_HANDSHAKE_INIT: u8 = 0x09;
pub const KIND_HANDSHAKE_RESPONSE: u8 = 0x0A;
pub const KIND_HANDSHAKE_CONFIRM: u8 = 0x0B;
/// Set in the kind byte of a message in the session form (tagged under a session key
/// instead of signed).
pub const SESSION_FORM: u8 = 0x80;

/// The most plaintext one frame carries: a whole signed message.
pub const MAX_MESSAGE_LEN: usize = crate::wire::frame::MAX_PLAINTEXT_LEN;
/// `seq`, `sent_at_ms`, `dst` and the signature after every signed body.
pub const TRAILER_LEN: usize = 8 + 8 + RAW_ADDR_LEN + SIGNATURE_LEN;
/// `seq`, `sent_at_ms`, `dst`, the session index and the tag after a body in the session
/// form.
pub const SESSION_TRAILER_LEN: usize = 8 + 8 + RAW_ADDR_LEN + 4 + TAG_LEN;
/// What a message holds before its trailer (either form: the signed one is the longer):
/// kind byte and body.
pub const MAX_UNSEALED_LEN: usize = MAX_MESSAGE_LEN - TRAILER_LEN;
/// foca's `max_packet_size`: what is left after our kind byte and the trailer.
pub const MAX_FOCA_PACKET: usize = MAX_UNSEALED_LEN - 1;

/// What proves a message's sender.
pub enum Proof<'a> {
    /// A signature by the sender site's certificate key.
    Signature(&'a [u8]),
    /// A tag under the session key the receiver knows by `index`.
    Session { index: u32, tag: &'a [u8] },
}

/// A decoded message, not yet verified.
pub struct Envelope<'a> {
    /// The kind, without the [`SESSION_FORM`] bit.
    pub kind: u8,
    /// The identity the body starts with: who says it sent this.
    pub sender: NodeId,
    /// Everything after the kind byte and before the trailer (sender identity included).
    pub body: &'a [u8],
    pub seq: u64,
    pub sent_at_ms: u64,
    pub dst: NodeAddr,
    /// The bytes the proof covers: kind, body and the trailer before the proof (the
    /// signature, or the tag).
    pub signed: &'a [u8],
    pub proof: Proof<'a>,
}

impl<'a> Envelope<'a> {
    /// Splits a message into its parts; fails on anything too short or without a
    /// decodable sender identity.
    pub fn decode(message: &'a [u8], interner: &Interner) -> Result<Envelope<'a>, WireError> {
        let Some(&first) = message.first() else {
            return Err(WireError::Truncated);
        };
        let session = first & SESSION_FORM != 0;
        let trailer_len = if session {
            SESSION_TRAILER_LEN
        } else {
            TRAILER_LEN
        };
        if message.len() < 1 + trailer_len || message.len() > MAX_MESSAGE_LEN {
            return Err(WireError::Truncated);
        }
        let proof_len = if session { TAG_LEN } else { SIGNATURE_LEN };
        let (signed, proof) = message.split_at(message.len() - proof_len);
        let (unsealed, trailer) = signed.split_at(signed.len() - (trailer_len - proof_len));
        let mut t = Reader::new(trailer);
        let seq = t.u64()?;
        let sent_at_ms = t.u64()?;
        let dst = NodeAddr::from_raw(t.array()?);
        let proof = if session {
            Proof::Session {
                index: t.u32()?,
                tag: proof,
            }
        } else {
            Proof::Signature(proof)
        };
        let (&kind, body) = unsealed.split_first().ok_or(WireError::Truncated)?;
        let sender = NodeId::decode(&mut Reader::new(body), interner)?;
        Ok(Envelope {
            kind: kind & !SESSION_FORM,
            sender,
            body,
            seq,
            sent_at_ms,
            dst,
            signed,
            proof,
        })
    }

    /// Whether it came in the session form.
    pub fn in_session(&self) -> bool {
        matches!(self.proof, Proof::Session { .. })
    }
}

/// Appends the trailer to `message` (kind and body): `seq`, `sent_at_ms`, `dst`, and the
/// signature `sign` makes over everything before it.
pub fn seal_message(
    message: &mut Vec<u8>,
    seq: u64,
    sent_at_ms: u64,
    dst: NodeAddr,
    sign: impl FnOnce(&[u8]) -> [u8; SIGNATURE_LEN],
) {
    message.put_u64(seq);
    message.put_u64(sent_at_ms);
    message.put_slice(&dst.to_raw());
    let signature = sign(message);
    message.put_slice(&signature);
}

/// Turns `message` (kind and body) into the session form for the receiver's session
/// `index`: sets [`SESSION_FORM`] in its kind byte and appends `seq`, `sent_at_ms`,
/// `dst`, the index and the tag under `keys`.
pub fn seal_in_session(
    message: &mut Vec<u8>,
    seq: u64,
    sent_at_ms: u64,
    dst: NodeAddr,
    index: u32,
    keys: &SessionKeys,
) {
    message[0] |= SESSION_FORM;
    message.put_u64(seq);
    message.put_u64(sent_at_ms);
    message.put_slice(&dst.to_raw());
    message.put_u32(index);
    let tag = keys.tag(seq, message);
    message.put_slice(&tag);
}

const MSG_PING: u8 = 0;
const MSG_ACK: u8 = 1;
const MSG_PING_REQ: u8 = 2;
const MSG_INDIRECT_PING: u8 = 3;
const MSG_INDIRECT_ACK: u8 = 4;
const MSG_FORWARDED_ACK: u8 = 5;
const MSG_ANNOUNCE: u8 = 6;
const MSG_FEED: u8 = 7;
const MSG_GOSSIP: u8 = 8;
const MSG_BROADCAST: u8 = 9;
const MSG_TURN_UNDEAD: u8 = 10;

pub const STATE_ALIVE: u8 = 0;
pub const STATE_SUSPECT: u8 = 1;
pub const STATE_DOWN: u8 = 2;
/// Only in sync entries: down because it left on purpose.
pub const STATE_LEFT: u8 = 3;

pub fn state_byte(state: State) -> u8 {
    match state {
        State::Alive => STATE_ALIVE,
        State::Suspect => STATE_SUSPECT,
        State::Down => STATE_DOWN,
    }
}

pub fn state_of(byte: u8) -> Result<State, WireError> {
    match byte {
        STATE_ALIVE => Ok(State::Alive),
        STATE_SUSPECT => Ok(State::Suspect),
        STATE_DOWN => Ok(State::Down),
        other => Err(WireError::BadState(other)),
    }
}

/// foca's codec: hand-written over [`NodeId`], no serde on the hot path.
#[derive(Clone, Default)]
pub struct WireCodec {
    interner: Interner,
}

impl WireCodec {
    pub fn new(interner: Interner) -> WireCodec {
        WireCodec { interner }
    }
}

fn message_len(message: &Message<NodeId>) -> usize {
    1 + match message {
        Message::Ping(_) | Message::Ack(_) => 1,
        Message::PingReq { target: id, .. }
        | Message::IndirectPing { origin: id, .. }
        | Message::IndirectAck { target: id, .. }
        | Message::ForwardedAck { origin: id, .. } => id.encoded_len() + 1,
        Message::Announce
        | Message::Feed
        | Message::Gossip
        | Message::Broadcast
        | Message::TurnUndead => 0,
    }
}

fn encode_message(message: &Message<NodeId>, out: &mut impl BufMut) {
    match message {
        Message::Ping(n) => {
            out.put_u8(MSG_PING);
            out.put_u8(*n);
        }
        Message::Ack(n) => {
            out.put_u8(MSG_ACK);
            out.put_u8(*n);
        }
        Message::PingReq {
            target,
            probe_number,
        } => encode_probe(MSG_PING_REQ, target, *probe_number, out),
        Message::IndirectPing {
            origin,
            probe_number,
        } => encode_probe(MSG_INDIRECT_PING, origin, *probe_number, out),
        Message::IndirectAck {
            target,
            probe_number,
        } => encode_probe(MSG_INDIRECT_ACK, target, *probe_number, out),
        Message::ForwardedAck {
            origin,
            probe_number,
        } => encode_probe(MSG_FORWARDED_ACK, origin, *probe_number, out),
        Message::Announce => out.put_u8(MSG_ANNOUNCE),
        Message::Feed => out.put_u8(MSG_FEED),
        Message::Gossip => out.put_u8(MSG_GOSSIP),
        Message::Broadcast => out.put_u8(MSG_BROADCAST),
        Message::TurnUndead => out.put_u8(MSG_TURN_UNDEAD),
    }
}

fn encode_probe(tag: u8, id: &NodeId, probe_number: u8, out: &mut impl BufMut) {
    out.put_u8(tag);
    id.encode(out);
    out.put_u8(probe_number);
}

fn decode_message(r: &mut Reader<'_>, interner: &Interner) -> Result<Message<NodeId>, WireError> {
    let tag = r.u8()?;
    Ok(match tag {
        MSG_PING => Message::Ping(r.u8()?),
        MSG_ACK => Message::Ack(r.u8()?),
        MSG_PING_REQ => Message::PingReq {
            target: NodeId::decode(r, interner)?,
            probe_number: r.u8()?,
        },
        MSG_INDIRECT_PING => Message::IndirectPing {
            origin: NodeId::decode(r, interner)?,
            probe_number: r.u8()?,
        },
        MSG_INDIRECT_ACK => Message::IndirectAck {
            target: NodeId::decode(r, interner)?,
            probe_number: r.u8()?,
        },
        MSG_FORWARDED_ACK => Message::ForwardedAck {
            origin: NodeId::decode(r, interner)?,
            probe_number: r.u8()?,
        },
        MSG_ANNOUNCE => Message::Announce,
        MSG_FEED => Message::Feed,
        MSG_GOSSIP => Message::Gossip,
        MSG_BROADCAST => Message::Broadcast,
        MSG_TURN_UNDEAD => Message::TurnUndead,
        other => return Err(WireError::BadMessage(other)),
    })
}

/// Decodes from the contiguous head of `buf` and advances it by what was consumed.
fn decode_from<B: Buf, T>(
    mut buf: B,
    decode: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<T, WireError> {
    let chunk = buf.chunk();
    let before = chunk.len();
    let mut r = Reader::new(chunk);
    let value = decode(&mut r)?;
    let consumed = before - r.remaining();
    buf.advance(consumed);
    Ok(value)
}

/// Encodes a member entry (shared with sync chunks).
pub fn encode_member(member: &Member<NodeId>, state: u8, out: &mut impl BufMut) {
    member.id().encode(out);
    out.put_u16(member.incarnation());
    out.put_u8(state);
}

pub fn member_len(id: &NodeId) -> usize {
    id.encoded_len() + 3
}

/// Decodes a member entry; the state byte may be [`STATE_LEFT`] only if `allow_left`.
pub fn decode_member(
    r: &mut Reader<'_>,
    interner: &Interner,
    allow_left: bool,
) -> Result<(Member<NodeId>, bool), WireError> {
    let id = NodeId::decode(r, interner)?;
    let incarnation = r.u16()?;
    let byte = r.u8()?;
    if allow_left && byte == STATE_LEFT {
        return Ok((Member::new(id, incarnation, State::Down), true));
    }
    Ok((Member::new(id, incarnation, state_of(byte)?), false))
}

impl Codec<NodeId> for WireCodec {
    type Error = WireError;

    fn encode_header(
        &mut self,
        header: &Header<NodeId>,
        mut buf: impl BufMut,
    ) -> Result<(), WireError> {
        let len =
            header.src.encoded_len() + 2 + header.dst.encoded_len() + message_len(&header.message);
        if buf.remaining_mut() < len {
            return Err(WireError::NoSpace);
        }
        header.src.encode(&mut buf);
        buf.put_u16(header.src_incarnation);
        header.dst.encode(&mut buf);
        encode_message(&header.message, &mut buf);
        Ok(())
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<Header<NodeId>, WireError> {
        let interner = &self.interner;
        decode_from(buf, |r| {
            Ok(Header {
                src: NodeId::decode(r, interner)?,
                src_incarnation: r.u16()?,
                dst: NodeId::decode(r, interner)?,
                message: decode_message(r, interner)?,
            })
        })
    }

    fn encode_member(
        &mut self,
        member: &Member<NodeId>,
        mut buf: impl BufMut,
    ) -> Result<(), WireError> {
        if buf.remaining_mut() < member_len(member.id()) {
            return Err(WireError::NoSpace);
        }
        encode_member(member, state_byte(member.state()), &mut buf);
        Ok(())
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<Member<NodeId>, WireError> {
        let interner = &self.interner;
        decode_from(buf, |r| decode_member(r, interner, false).map(|(m, _)| m))
    }
}

/// The largest foca header: source, destination and a third identity in the message.
pub const MAX_HEADER_LEN: usize = 3 * MAX_IDENTITY_LEN + 2 + 1 + 1;
/// The largest header of a foca `Broadcast`: source, incarnation, destination, tag.
pub const MAX_BROADCAST_HEADER_LEN: usize = 2 * MAX_IDENTITY_LEN + 2 + 1;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn id(site: &str, port: u16, generation: u64) -> NodeId {
        NodeId::new(
            Arc::from(site),
            format!("127.0.0.1:{port}").parse().unwrap(),
            generation,
        )
    }

    fn all_messages() -> Vec<Message<NodeId>> {
        let t = id("t", 3, 9);
        vec![
            Message::Ping(1),
            Message::Ack(2),
            Message::PingReq {
                target: t.clone(),
                probe_number: 3,
            },
            Message::IndirectPing {
                origin: t.clone(),
                probe_number: 4,
            },
            Message::IndirectAck {
                target: t.clone(),
                probe_number: 5,
            },
            Message::ForwardedAck {
                origin: t,
                probe_number: 6,
            },
            Message::Announce,
            Message::Feed,
            Message::Gossip,
            Message::Broadcast,
            Message::TurnUndead,
        ]
    }

    #[test]
    fn headers_round_trip() {
        let mut codec = WireCodec::default();
        for message in all_messages() {
            let header = Header {
                src: id("src", 1, 7),
                src_incarnation: 513,
                dst: id("dst", 2, 8),
                message,
            };
            let mut buf = Vec::new();
            codec.encode_header(&header, &mut buf).unwrap();
            let mut slice = &buf[..];
            assert_eq!(codec.decode_header(&mut slice).unwrap(), header);
            assert!(slice.is_empty());
        }
    }

    #[test]
    fn members_round_trip() {
        let mut codec = WireCodec::default();
        for state in [State::Alive, State::Suspect, State::Down] {
            let member = Member::new(id("m", 4, 1), 65535, state);
            let mut buf = Vec::new();
            codec.encode_member(&member, &mut buf).unwrap();
            let mut slice = &buf[..];
            assert_eq!(codec.decode_member(&mut slice).unwrap(), member);
            assert!(slice.is_empty());
        }
    }

    #[test]
    fn encoding_without_room_writes_nothing() {
        let mut codec = WireCodec::default();
        let header = Header {
            src: id("src", 1, 7),
            src_incarnation: 0,
            dst: id("dst", 2, 8),
            message: Message::Ping(0),
        };
        let mut buf = bytes::BytesMut::new().limit(10);
        assert_eq!(
            codec.encode_header(&header, &mut buf),
            Err(WireError::NoSpace)
        );
        assert!(buf.get_ref().is_empty());
        let member = Member::new(id("m", 4, 1), 0, State::Alive);
        assert_eq!(
            codec.encode_member(&member, &mut buf),
            Err(WireError::NoSpace)
        );
        assert!(buf.get_ref().is_empty());
    }

    #[test]
    fn header_budget_covers_the_largest_header() {
        let long = NodeId::new(
            Arc::from("s".repeat(crate::identity::MAX_SITE_LEN).as_str()),
            "[2001:db8::1]:1".parse().unwrap(),
            u64::MAX,
        );
        let header = Header {
            src: long.clone(),
            src_incarnation: 0,
            dst: long.clone(),
            message: Message::PingReq {
                target: long,
                probe_number: 0,
            },
        };
        let mut buf = Vec::new();
        WireCodec::default()
            .encode_header(&header, &mut buf)
            .unwrap();
        assert_eq!(buf.len(), MAX_HEADER_LEN);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_decoders(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut codec = WireCodec::default();
            let _ = codec.decode_header(&mut &data[..]);
            let _ = codec.decode_member(&mut &data[..]);
        }
    }
}
