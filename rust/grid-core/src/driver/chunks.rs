//! The chunk format of syncs and repair answers: each chunk says its sender, id, index
//! and count, then holds entries `tag u8 | len u16 | body`. Here are the entry tags, the
//! encoding of the entry bodies that are not members or items, the reading of a chunk's
//! header and entries, and [`ChunkWriter`], which packs entries into frames.
//!
//! Held apart because it is wire format, shared by [`super::sync`] and [`super::repair`],
//! with no driver state.

use bytes::BufMut;

use crate::identity::{validate_site, Interner, NodeId, RawId, MAX_SITE_LEN};
use crate::lanes::{ExportEnd, ItemName, MAX_KEY_LEN};
use crate::wire::{Reader, WireError, MAX_MESSAGE_LEN, MAX_UNSEALED_LEN};

use super::MAX_SYNC_CHUNKS;

pub(super) const ENTRY_MEMBER: u8 = 1;
pub(super) const ENTRY_ITEM: u8 = 2;
/// A site's certificate chain: `site_len u8 | site | count u8 | (len u16 | der)*`, so a
/// node can verify the items of sites it never heard from itself (a crashed one, say).
pub(super) const ENTRY_CERTIFICATE: u8 = 3;
/// First entry of a request: the item name after which the answer's items start (empty:
/// from the first name). Every node orders names alike ([`ItemName`]).
pub(super) const ENTRY_RESUME: u8 = 4;
/// In an answer's first chunk: where its items ended, `end u8 | name?` (see `WALK_*`).
pub(super) const ENTRY_WALK_END: u8 = 5;
/// In a request's first chunk, after [`ENTRY_RESUME`], empty: the answer walks only the
/// lanes that verify and reach sites (certificates, gateway, metadata), none of their
/// records (protocol 3 on; see `super::heads`).
pub(super) const ENTRY_HEADS: u8 = 6;
/// In a request's first chunk, after [`ENTRY_RESUME`] (and [`ENTRY_HEADS`]): the name the
/// answer's items stop before, so that an answer bounded so is complete once it gets
/// there (protocol 3 on; see `super::holes` and `super::stretches`).
pub(super) const ENTRY_UNTIL: u8 = 7;
/// In a request's first chunk, empty: the answer carries each item's name and version
/// ([`ENTRY_VERSION`]) in place of the item, the form of a catch-up's check round
/// (protocol 3 on).
pub(super) const ENTRY_VERSIONS: u8 = 8;
/// In an answer to a request with [`ENTRY_VERSIONS`]: `name | version u64`, the first bytes
/// of the item it stands for.
pub(super) const ENTRY_VERSION: u8 = 9;
/// In a request's first chunk, in place of [`ENTRY_RESUME`]: an item name whose latest
/// held version the answer should carry (the answer carries those items and nothing of a
/// walk; protocol 3 on).
pub(super) const ENTRY_WANT: u8 = 10;
/// In the first chunk of a request or of its answer (not of a request for named items):
/// `digest u64`, the digest of the sender's view of the members, itself included (see
/// `super::view`); the answer leaves its members out if the request's digest is its own
/// (protocol 3 on).
pub(super) const ENTRY_VIEW: u8 = 11;
/// Every held item was sent (in a bounded walk: every one before its bound).
const WALK_COMPLETE: u8 = 0;
/// The budget ran out after the name that follows (none: before the first).
const WALK_STOPPED: u8 = 1;
/// The same, after going past the last name (the walk went round once).
const WALK_WRAPPED: u8 = 2;
/// Room an answer's first chunk keeps for its walk end entry.
pub(super) const WALK_END_ROOM: usize = 3 + 2 + MAX_SITE_LEN + 2 + MAX_KEY_LEN;
/// Where a sync chunk's index and count sit: after the kind, the sender and the sync id.
fn chunk_counts_at(sender: &NodeId) -> usize {
    1 + sender.encoded_len() + 4
}
/// What a sync or repair chunk says of itself, after its sender's identity.
pub(super) struct ChunkHeader {
    pub(super) id: u32,
    pub(super) index: u16,
    pub(super) count: u16,
}

/// Reads a chunk's sender identity (known from the envelope: read, not interned), id,
/// index and count (what [`ChunkWriter`] writes); an index past the count makes the chunk
/// malformed.
pub(super) fn read_chunk_header(r: &mut Reader<'_>) -> Result<ChunkHeader, WireError> {
    RawId::decode(r)?;
    let header = ChunkHeader {
        id: r.u32()?,
        index: r.u16()?,
        count: r.u16()?,
    };
    if header.index >= header.count {
        return Err(WireError::TrailingBytes);
    }
    Ok(header)
}

/// Reads one chunk entry: `tag u8 | len u16 | body`.
pub(super) fn read_entry<'a>(r: &mut Reader<'a>) -> Result<(u8, &'a [u8]), WireError> {
    let tag = r.u8()?;
    let len = usize::from(r.u16()?);
    Ok((tag, r.bytes(len)?))
}

pub(super) fn encode_certificate_entry(site: &str, chain: &[Vec<u8>], out: &mut Vec<u8>) {
    out.clear();
    out.push(site.len() as u8);
    out.extend_from_slice(site.as_bytes());
    out.push(chain.len() as u8);
    for der in chain {
        out.put_u16(der.len() as u16);
        out.extend_from_slice(der);
    }
}

pub(super) fn decode_view_entry(body: &[u8]) -> Result<u64, WireError> {
    let bytes: [u8; 8] = body
        .try_into()
        .map_err(|_| WireError::BadEntry(ENTRY_VIEW))?;
    Ok(u64::from_be_bytes(bytes))
}

pub(super) fn decode_resume(
    body: &[u8],
    interner: &Interner,
) -> Result<Option<ItemName>, WireError> {
    if body.is_empty() {
        return Ok(None);
    }
    let mut r = Reader::new(body);
    let name = ItemName::decode(&mut r, interner)?;
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok(Some(name))
}

/// A version entry's name and version (see [`ENTRY_VERSION`]).
pub(super) fn decode_version_entry(
    body: &[u8],
    interner: &Interner,
) -> Result<(ItemName, u64), WireError> {
    let mut r = Reader::new(body);
    let name = ItemName::decode(&mut r, interner)?;
    let version = r.u64()?;
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok((name, version))
}

pub(super) fn encode_walk_end(end: &ExportEnd, out: &mut Vec<u8>) {
    match end {
        ExportEnd::Complete => out.push(WALK_COMPLETE),
        ExportEnd::Stopped { resume, wrapped } => {
            out.push(if *wrapped { WALK_WRAPPED } else { WALK_STOPPED });
            if let Some(name) = resume {
                name.encode(out);
            }
        }
    }
}

pub(super) fn decode_walk_end(body: &[u8], interner: &Interner) -> Result<ExportEnd, WireError> {
    let mut r = Reader::new(body);
    let end = r.u8()?;
    let resume = decode_resume(r.rest(), interner)?;
    match end {
        WALK_COMPLETE if resume.is_none() => Ok(ExportEnd::Complete),
        WALK_STOPPED | WALK_WRAPPED => Ok(ExportEnd::Stopped {
            resume,
            wrapped: end == WALK_WRAPPED,
        }),
        _ => Err(WireError::BadEntry(ENTRY_WALK_END)),
    }
}

/// A sync's certificate entry: the site and its chain, leaf first.
pub(super) fn decode_certificate_entry(body: &[u8]) -> Result<(&str, Vec<&[u8]>), WireError> {
    let mut r = Reader::new(body);
    let len = usize::from(r.u8()?);
    let site = std::str::from_utf8(r.bytes(len)?).map_err(|_| WireError::BadUtf8)?;
    if validate_site(site).is_err() {
        return Err(WireError::BadEntry(ENTRY_CERTIFICATE));
    }
    let count = usize::from(r.u8()?);
    if count == 0 || count > crate::identity::auth::MAX_CHAIN_LEN {
        return Err(WireError::BadEntry(ENTRY_CERTIFICATE));
    }
    let chain = (0..count)
        .map(|_| {
            let len = usize::from(r.u16()?);
            r.bytes(len)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok((site, chain))
}

/// Packs sync entries into as few chunks as possible, each within one frame.
pub(super) struct ChunkWriter {
    header: Vec<u8>,
    counts_at: usize,
    /// Room the first chunk keeps for the entry [`ChunkWriter::finish`] adds.
    reserve: usize,
    chunks: Vec<Vec<u8>>,
}

impl ChunkWriter {
    pub(super) fn new(kind: u8, sync_id: u32, sender: &NodeId, reserve: usize) -> ChunkWriter {
        let mut header = Vec::with_capacity(chunk_counts_at(sender) + 4);
        header.push(kind);
        sender.encode(&mut header);
        header.put_u32(sync_id);
        header.put_u16(0);
        header.put_u16(0);
        ChunkWriter {
            header,
            counts_at: chunk_counts_at(sender),
            reserve,
            chunks: Vec::new(),
        }
    }

    /// Adds an entry, opening a chunk only while there are fewer than `max_chunks`; false
    /// once that budget is spent.
    pub(super) fn push(&mut self, tag: u8, body: &[u8], max_chunks: usize) -> bool {
        let need = 3 + body.len();
        let room = |index: usize| MAX_UNSEALED_LEN - self.room_kept(index);
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.len() + need <= room(self.chunks.len() - 1));
        if !fits {
            if self.chunks.len() >= max_chunks.min(MAX_SYNC_CHUNKS)
                || self.header.len() + need > room(self.chunks.len())
            {
                return false;
            }
            let mut chunk = Vec::with_capacity(MAX_MESSAGE_LEN);
            chunk.extend_from_slice(&self.header);
            self.chunks.push(chunk);
        }
        let chunk = self.chunks.last_mut().expect("pushed above");
        chunk.push(tag);
        chunk.put_u16(body.len() as u16);
        chunk.extend_from_slice(body);
        true
    }

    /// Adds two entries to the same chunk (a certificate and an item it signed, so neither
    /// arrives without the other), opening a chunk as [`ChunkWriter::push`] does; false if
    /// they cannot go together within the budget.
    pub(super) fn push_pair(
        &mut self,
        first: (u8, &[u8]),
        second: (u8, &[u8]),
        max_chunks: usize,
    ) -> bool {
        let need = 6 + first.1.len() + second.1.len();
        let fits = self.chunks.last().is_some_and(|chunk| {
            chunk.len() + need <= MAX_UNSEALED_LEN - self.room_kept(self.chunks.len() - 1)
        });
        if !fits {
            if self.chunks.len() >= max_chunks.min(MAX_SYNC_CHUNKS)
                || self.header.len() + need > MAX_UNSEALED_LEN - self.room_kept(self.chunks.len())
            {
                return false;
            }
            let mut chunk = Vec::with_capacity(MAX_MESSAGE_LEN);
            chunk.extend_from_slice(&self.header);
            self.chunks.push(chunk);
        }
        self.push(first.0, first.1, max_chunks) && self.push(second.0, second.1, max_chunks)
    }

    /// How many chunks are open.
    pub(super) fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Room chunk `index` keeps for the entry [`ChunkWriter::finish`] adds.
    fn room_kept(&self, index: usize) -> usize {
        if index == 0 {
            self.reserve
        } else {
            0
        }
    }

    /// The chunks, numbered, with `last_word` (if not empty) as the first chunk's last
    /// entry, in the room kept for it.
    pub(super) fn finish(mut self, last_word: &[u8]) -> Vec<Vec<u8>> {
        if !last_word.is_empty() {
            debug_assert!(last_word.len() + 3 <= self.reserve);
            if self.chunks.is_empty() {
                self.chunks.push(self.header.clone());
            }
            let first = &mut self.chunks[0];
            first.push(ENTRY_WALK_END);
            first.put_u16(last_word.len() as u16);
            first.extend_from_slice(last_word);
        }
        let count = self.chunks.len() as u16;
        let at = self.counts_at;
        for (index, chunk) in self.chunks.iter_mut().enumerate() {
            chunk[at..at + 2].copy_from_slice(&(index as u16).to_be_bytes());
            chunk[at + 2..at + 4].copy_from_slice(&count.to_be_bytes());
        }
        self.chunks
    }
}
