//! The item encoding: `origin_len u8 | origin | lane u8 | key_len u8 | key | version u64 |
//! payload | signature [64]`; the checks a local publish passes before it is encoded and
//! signed, and the decoding of a received item into a borrowed view.

use bytes::BufMut;

use super::{Lane, PublishError, MAX_ITEM_LEN, MAX_KEY_LEN, PRIVATE_KEY_MARKER};
use crate::identity::auth::SIGNATURE_LEN;
use crate::identity::MAX_SITE_LEN;
use crate::lanes::names::read_name;
use crate::wire::{Reader, WireError};

pub fn contains_private_key(payload: &[u8]) -> bool {
    payload
        .windows(PRIVATE_KEY_MARKER.len())
        .any(|w| w == PRIVATE_KEY_MARKER)
}

pub fn encoded_item_len(origin: &str, key: &str, payload: &[u8]) -> usize {
    1 + origin.len() + 1 + 1 + key.len() + 8 + payload.len() + SIGNATURE_LEN
}

/// Checks a local item and encodes it into `out`, signed by `sign` (which gets the bytes
/// the signature covers, without the domain label).
pub fn encode_publish(
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
    sign: impl FnOnce(&[u8]) -> [u8; SIGNATURE_LEN],
) -> Result<(), PublishError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(PublishError::BadKey(format!(
            "item key must be 1 to {MAX_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    let len = encoded_item_len(origin, key, payload);
    if len > MAX_ITEM_LEN {
        return Err(PublishError::TooLarge {
            len,
            max: MAX_ITEM_LEN,
        });
    }
    if lane == Lane::Cert && contains_private_key(payload) {
        return Err(PublishError::PrivateKey);
    }
    let start = out.len();
    encode_unsigned(origin, lane, key, version, payload, out);
    let signature = sign(&out[start..]);
    out.put_slice(&signature);
    Ok(())
}

pub(super) fn encode_unsigned(
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
    out: &mut impl BufMut,
) {
    debug_assert!(origin.len() <= MAX_SITE_LEN && key.len() <= MAX_KEY_LEN);
    out.put_u8(origin.len() as u8);
    out.put_slice(origin.as_bytes());
    out.put_u8(lane as u8);
    out.put_u8(key.len() as u8);
    out.put_slice(key.as_bytes());
    out.put_u64(version);
    out.put_slice(payload);
}

pub(super) struct ItemView<'a> {
    pub(super) origin: &'a str,
    pub(super) lane: Lane,
    pub(super) key: &'a str,
    pub(super) version: u64,
    pub(super) payload: &'a [u8],
    /// Everything the signature covers (after the domain label).
    pub(super) signed: &'a [u8],
    pub(super) signature: [u8; SIGNATURE_LEN],
}

pub(super) fn decode_item(data: &[u8]) -> Result<ItemView<'_>, WireError> {
    if data.len() > MAX_ITEM_LEN {
        return Err(WireError::TrailingBytes);
    }
    if data.len() < SIGNATURE_LEN {
        return Err(WireError::Truncated);
    }
    let (signed, signature) = data.split_at(data.len() - SIGNATURE_LEN);
    let mut r = Reader::new(signed);
    let (origin, lane, key) = read_name(&mut r)?;
    let version = r.u64()?;
    Ok(ItemView {
        origin,
        lane,
        key,
        version,
        payload: r.rest(),
        signed,
        signature: signature.try_into().expect("split at the signature length"),
    })
}
