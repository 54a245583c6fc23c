//! Reading a `HELLO` body: whether it asks for an answer, the protocol versions it names
//! and its certificate chain (the layout is in [`crate::wire`]).

use crate::identity::auth::MAX_CHAIN_LEN;
use crate::identity::{Interner, NodeId};
use crate::wire::versions::ProtocolRange;
use crate::wire::{Reader, WireError, KIND_HELLO};

/// `HELLO` flag: the sender has not verified us and asks for our `HELLO` in return.
pub(super) const HELLO_WANT_REPLY: u8 = 0x01;

/// Whether a `HELLO` body asks for our `HELLO` in return.
pub fn hello_wants_reply(body: &[u8], interner: &Interner) -> bool {
    let mut r = Reader::new(body);
    NodeId::decode(&mut r, interner).is_ok() && r.u8().is_ok_and(|f| f & HELLO_WANT_REPLY != 0)
}

/// The protocol versions a `HELLO` body names (its flags; see [`crate::wire::versions`]).
pub(super) fn hello_protocols(body: &[u8], interner: &Interner) -> ProtocolRange {
    let mut r = Reader::new(body);
    match NodeId::decode(&mut r, interner).and_then(|_| r.u8()) {
        Ok(flags) => ProtocolRange::from_hello_flags(flags),
        Err(_) => ProtocolRange::UNADVERTISED,
    }
}

/// The certificate chain of a `HELLO` body (identity, flags, count, length-prefixed DER).
pub(super) fn hello_chain<'a>(
    body: &'a [u8],
    interner: &Interner,
) -> Result<Vec<&'a [u8]>, WireError> {
    let mut r = Reader::new(body);
    NodeId::decode(&mut r, interner)?;
    r.u8()?;
    let count = usize::from(r.u8()?);
    if count == 0 || count > MAX_CHAIN_LEN {
        return Err(WireError::BadEntry(KIND_HELLO));
    }
    let mut chain = Vec::with_capacity(count);
    for _ in 0..count {
        let len = usize::from(r.u16()?);
        chain.push(r.bytes(len)?);
    }
    if !r.is_empty() {
        return Err(WireError::TrailingBytes);
    }
    Ok(chain)
}
