//! The bounds-checked [`Reader`] every decoder of the crate reads with, and [`WireError`],
//! why bytes could not be decoded.
//!
//! They sit in a module of their own, below both [`crate::identity`] (whose identity codec
//! reads with them) and [`crate::wire`] (whose messages carry identities), so neither of
//! those two depends on the other both ways. [`crate::wire`] re-exports them: the message
//! layout and its decoders stay documented there.

use std::fmt;

/// Why bytes could not be decoded (or, for [`WireError::NoSpace`], encoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    SiteTooLong(usize),
    BadUtf8,
    BadFamily(u8),
    BadMessage(u8),
    BadState(u8),
    BadLane(u8),
    BadEntry(u8),
    /// A repair digest whose filter claims no hash function, or more than 16.
    BadDigest,
    EmptyKey,
    TrailingBytes,
    NoSpace,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => f.write_str("truncated"),
            WireError::SiteTooLong(n) => write!(f, "site name of {n} bytes"),
            WireError::BadUtf8 => f.write_str("text is not UTF-8"),
            WireError::BadFamily(b) => write!(f, "unknown address family {b}"),
            WireError::BadMessage(b) => write!(f, "unknown message tag {b}"),
            WireError::BadState(b) => write!(f, "unknown member state {b}"),
            WireError::BadLane(b) => write!(f, "unknown lane {b}"),
            WireError::BadEntry(b) => write!(f, "unknown sync entry tag {b}"),
            WireError::BadDigest => f.write_str("repair digest with a bad hash count"),
            WireError::EmptyKey => f.write_str("empty item key"),
            WireError::TrailingBytes => f.write_str("trailing bytes"),
            WireError::NoSpace => f.write_str("no room left in the packet"),
        }
    }
}

impl std::error::Error for WireError {}

/// A bounds-checked cursor: every read fails cleanly on short input instead of panicking.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// What is left to read, left in place.
    pub fn unread(&self) -> &'a [u8] {
        self.buf
    }
}
