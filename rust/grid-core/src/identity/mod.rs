//! Identity and auth, the layer under the wire: who a node is (this module) and who may
//! speak as a site ([`auth`]). The wire reads both (its messages carry identities and
//! signatures), so nothing here reads the wire: identities decode with [`crate::reader`].
//!
//! A node's identity: site name, advertised address and generation.
//!
//! foca keeps one entry per [`SiteAddr`] (site and address); two identities of one site at
//! the same address are the same node at different lives, and the higher generation wins.
//! Another site's identity at that address is another member, so no identity can take
//! over a site's entry by claiming its address. A node restarts with a higher
//! generation (wall-clock milliseconds at start by default), and foca's auto-rejoin bumps it
//! by one when the cluster declares the node down while it is in fact alive.
//!
//! Identities are compact because every foca header carries two of them and every node
//! keeps one per member: the site name is an interned `Arc<str>` shared by every copy, the
//! address is 18 bytes.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::reader::{Reader, WireError};

pub mod auth;
pub mod x509;

/// Longest site name, in bytes (a DNS label).
pub const MAX_SITE_LEN: usize = 63;
/// Longest encoded identity: length byte, name, family byte, IPv6 address, port, generation.
pub const MAX_IDENTITY_LEN: usize = 1 + MAX_SITE_LEN + 1 + 16 + 2 + 8;

/// Length of [`NodeAddr::to_raw`].
pub const RAW_ADDR_LEN: usize = 18;

const FAMILY_V4: u8 = 4;
const FAMILY_V6: u8 = 6;

/// Why a site name is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteNameError(String);

impl fmt::Display for SiteNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SiteNameError {}

/// Checks a site name given by an operator: 1 to 63 bytes of ASCII letters, digits, `-`,
/// `_` and `.`. Names decoded from the wire are only checked for length and UTF-8.
pub fn validate_site(site: &str) -> Result<(), SiteNameError> {
    if site.is_empty() || site.len() > MAX_SITE_LEN {
        return Err(SiteNameError(format!(
            "site name must be 1 to {MAX_SITE_LEN} bytes, got {}",
            site.len()
        )));
    }
    if let Some(bad) = site
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(SiteNameError(format!(
            "site name may only hold ASCII letters, digits, '-', '_' and '.'; found {bad:?}"
        )));
    }
    Ok(())
}

/// A socket address in 18 bytes: IPv4 is kept IPv4-mapped.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeAddr {
    ip: [u8; 16],
    port: u16,
}

impl NodeAddr {
    pub fn new(addr: SocketAddr) -> NodeAddr {
        let ip = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        NodeAddr {
            ip,
            port: addr.port(),
        }
    }

    pub fn socket_addr(self) -> SocketAddr {
        let v6 = Ipv6Addr::from(self.ip);
        match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), self.port),
            None => SocketAddr::new(IpAddr::V6(v6), self.port),
        }
    }

    fn v4(self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.ip).to_ipv4_mapped()
    }

    /// The fixed 18-byte form (IPv4 mapped into IPv6, then the port) used in envelopes.
    pub fn to_raw(self) -> [u8; RAW_ADDR_LEN] {
        let mut raw = [0u8; RAW_ADDR_LEN];
        raw[..16].copy_from_slice(&self.ip);
        raw[16..].copy_from_slice(&self.port.to_be_bytes());
        raw
    }

    pub fn from_raw(raw: [u8; RAW_ADDR_LEN]) -> NodeAddr {
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&raw[..16]);
        NodeAddr {
            ip,
            port: u16::from_be_bytes([raw[16], raw[17]]),
        }
    }

    fn encoded_len(self) -> usize {
        1 + if self.v4().is_some() { 4 } else { 16 } + 2
    }

    fn encode(self, out: &mut impl bytes::BufMut) {
        match self.v4() {
            Some(v4) => {
                out.put_u8(FAMILY_V4);
                out.put_slice(&v4.octets());
            }
            None => {
                out.put_u8(FAMILY_V6);
                out.put_slice(&self.ip);
            }
        }
        out.put_u16(self.port);
    }

    fn decode(r: &mut Reader<'_>) -> Result<NodeAddr, WireError> {
        let ip = match r.u8()? {
            FAMILY_V4 => {
                let octets: [u8; 4] = r.array()?;
                Ipv4Addr::from(octets).to_ipv6_mapped().octets()
            }
            FAMILY_V6 => r.array()?,
            other => return Err(WireError::BadFamily(other)),
        };
        Ok(NodeAddr { ip, port: r.u16()? })
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.socket_addr())
    }
}

impl From<SocketAddr> for NodeAddr {
    fn from(addr: SocketAddr) -> NodeAddr {
        NodeAddr::new(addr)
    }
}

/// A node's identity in the cluster: where it is ([`Place`]: site and address, shared by
/// every copy) and which life of it this is.
///
/// Every node keeps one per member (foca's list, the driver's tables), so an identity is
/// three words: at 10,000 members that decides whether a node's view takes a quarter or
/// two thirds of a megabyte. Identities decoded through one [`Interner`] share their
/// place, so comparing two of them is usually a pointer comparison.
#[derive(Clone)]
pub struct NodeId {
    place: Arc<Place>,
    generation: u64,
    /// The place's site hash, inline: foca compares every member's [`SiteAddr`] while
    /// scanning its list for each message, and the sites differ at the first word without
    /// following the pointer (a scan that dereferenced every place stalled on it).
    site_key: u64,
}

/// An identity in two words, for tables that hold one per member and do not scan (the
/// site hash is read through the place).
#[derive(Clone)]
pub struct PackedId {
    place: Arc<Place>,
    generation: u64,
}

impl PackedId {
    pub fn site(&self) -> &Arc<str> {
        &self.place.site
    }

    /// The hash of the site's name (as [`SiteAddr::site_key`]).
    pub fn site_key(&self) -> u64 {
        self.place.site_key
    }

    pub fn node_addr(&self) -> NodeAddr {
        self.place.addr
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this and `id` are of one site (compared by pointer first: identities decoded
    /// through one [`Interner`] share their place).
    pub fn same_site(&self, id: &NodeId) -> bool {
        Arc::ptr_eq(&self.place, &id.place) || self.place.site == id.place.site
    }

    /// Whether this is `id`.
    pub fn is(&self, id: &NodeId) -> bool {
        self.generation == id.generation
            && (Arc::ptr_eq(&self.place, &id.place) || self.place == id.place)
    }

    pub fn unpack(&self) -> NodeId {
        NodeId::at(self.place.clone(), self.generation)
    }
}

impl From<NodeId> for PackedId {
    fn from(id: NodeId) -> PackedId {
        PackedId {
            place: id.place,
            generation: id.generation,
        }
    }
}

/// A site name in one word (through an identity's place), hashed and compared as the
/// name: for sets of sites with an entry per member.
#[derive(Clone)]
pub struct SiteName(Arc<Place>);

impl SiteName {
    pub fn as_str(&self) -> &str {
        &self.0.site
    }
}

impl std::hash::Hash for SiteName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that lookups by name (`Borrow<str>`) find it.
        self.as_str().hash(state);
    }
}

impl PartialEq for SiteName {
    fn eq(&self, other: &SiteName) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SiteName {}

impl std::borrow::Borrow<str> for SiteName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

/// A site at an address: what every identity of one node, over its lives, has in common.
#[derive(PartialEq, Eq, Hash)]
struct Place {
    addr: NodeAddr,
    /// A hash of `site`, so foca's member scans compare sites without a second pointer
    /// chase.
    site_key: u64,
    site: Arc<str>,
}

impl Place {
    fn new(site: Arc<str>, addr: NodeAddr) -> Place {
        Place {
            site_key: site_key(&site),
            site,
            addr,
        }
    }
}

impl PartialEq for NodeId {
    fn eq(&self, other: &NodeId) -> bool {
        self.generation == other.generation
            && self.site_key == other.site_key
            && (Arc::ptr_eq(&self.place, &other.place) || self.place == other.place)
    }
}

impl Eq for NodeId {}

impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.place.hash(state);
        self.generation.hash(state);
    }
}

/// What foca keys members by: a site (as the hash of its name) at an address. Compared
/// site first (see [`NodeId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiteAddr {
    pub site_key: u64,
    pub addr: NodeAddr,
}

/// FNV-1a: stable across processes and builds, unlike std's randomly keyed hasher.
fn site_key(site: &str) -> u64 {
    site.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl NodeId {
    /// An identity for this node; the site name must have passed [`validate_site`].
    pub fn new(site: Arc<str>, addr: SocketAddr, generation: u64) -> NodeId {
        debug_assert!(site.len() <= MAX_SITE_LEN);
        NodeId::at(Arc::new(Place::new(site, NodeAddr::new(addr))), generation)
    }

    fn at(place: Arc<Place>, generation: u64) -> NodeId {
        NodeId {
            site_key: place.site_key,
            place,
            generation,
        }
    }

    /// Stands for a seed whose identity we do not know yet: foca accepts an `Announce`
    /// addressed to any identity carrying the recipient's address.
    pub fn placeholder(addr: SocketAddr) -> NodeId {
        NodeId::at(Arc::new(Place::new(Arc::from(""), NodeAddr::new(addr))), 0)
    }

    pub fn site(&self) -> &Arc<str> {
        &self.place.site
    }

    pub fn node_addr(&self) -> NodeAddr {
        self.place.addr
    }

    pub fn site_name(&self) -> SiteName {
        SiteName(self.place.clone())
    }

    /// foca's key for this identity: its site at its address.
    pub fn site_addr(&self) -> SiteAddr {
        SiteAddr {
            site_key: self.site_key,
            addr: self.place.addr,
        }
    }

    /// Whether this is a seed's placeholder (no site known yet).
    pub fn is_placeholder(&self) -> bool {
        self.place.site.is_empty()
    }

    pub fn socket_addr(&self) -> SocketAddr {
        self.place.addr.socket_addr()
    }

    /// The hash of the site's name, held inline (read without following the place).
    pub fn site_key(&self) -> u64 {
        self.site_key
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn encoded_len(&self) -> usize {
        1 + self.site().len() + self.place.addr.encoded_len() + 8
    }

    /// Writes the identity; the caller has checked there is room for [`Self::encoded_len`].
    pub fn encode(&self, out: &mut impl bytes::BufMut) {
        out.put_u8(self.site().len() as u8);
        out.put_slice(self.site().as_bytes());
        self.place.addr.encode(out);
        out.put_u64(self.generation);
    }

    pub fn decode(r: &mut Reader<'_>, interner: &Interner) -> Result<NodeId, WireError> {
        Ok(RawId::decode(r)?.intern(interner))
    }

    /// Whether `raw` spells this identity.
    pub fn is_raw(&self, raw: &RawId<'_>) -> bool {
        self.generation == raw.generation
            && self.place.addr == raw.addr
            && *self.place.site == *raw.site
    }
}

/// An identity as a message spells it, before it is interned: enough to tell whether it is
/// one a node already holds without taking the interner's lock or touching a reference
/// count (a sync carries one per member, nearly all of them held already).
pub struct RawId<'a> {
    site: &'a str,
    addr: NodeAddr,
    generation: u64,
}

impl<'a> RawId<'a> {
    /// Reads an identity with the checks [`NodeId::decode`] makes.
    pub fn decode(r: &mut Reader<'a>) -> Result<RawId<'a>, WireError> {
        let len = usize::from(r.u8()?);
        if len > MAX_SITE_LEN {
            return Err(WireError::SiteTooLong(len));
        }
        let site = std::str::from_utf8(r.bytes(len)?).map_err(|_| WireError::BadUtf8)?;
        let addr = NodeAddr::decode(r)?;
        let generation = r.u64()?;
        Ok(RawId {
            site,
            addr,
            generation,
        })
    }

    /// foca's key for the identity (as [`NodeId::site_addr`]).
    pub fn site_addr(&self) -> SiteAddr {
        SiteAddr {
            site_key: site_key(self.site),
            addr: self.addr,
        }
    }

    pub fn intern(&self, interner: &Interner) -> NodeId {
        interner.node_id(self.site, self.addr, self.generation)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{:?}#{}",
            self.place.site, self.place.addr, self.generation
        )
    }
}

impl foca::Identity for NodeId {
    type Addr = SiteAddr;

    fn renew(&self) -> Option<Self> {
        Some(NodeId::at(
            self.place.clone(),
            self.generation.checked_add(1)?,
        ))
    }

    fn addr(&self) -> SiteAddr {
        self.site_addr()
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        // The later life wins; a tie (two processes claiming one address and generation)
        // is broken by name so every member picks the same winner.
        (self.generation, self.site()) > (adversary.generation, adversary.site())
    }
}

/// Shares one allocation per site name, and one [`Place`] per site at an address, among
/// every identity a node (or a whole simulated cluster) decodes, so receiving a packet
/// allocates nothing for known names and known members.
#[derive(Clone, Default)]
pub struct Interner {
    tables: Arc<Mutex<Tables>>,
}

#[derive(Default)]
struct Tables {
    names: HashSet<Arc<str>>,
    /// By foca's key; a place whose name differs from the one asked for (two names with
    /// one hash) is simply not shared.
    places: HashMap<SiteAddr, Arc<Place>>,
}

/// Names (and places) beyond this many are still decoded, just not shared: a flood of
/// made-up names cannot grow the table without bound.
const INTERNER_CAPACITY: usize = 1 << 16;

impl Tables {
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        let fresh: Arc<str> = Arc::from(name);
        if self.names.len() < INTERNER_CAPACITY {
            self.names.insert(fresh.clone());
        }
        fresh
    }
}

impl Interner {
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn intern(&self, name: &str) -> Arc<str> {
        self.tables().intern(name)
    }

    /// The identity of `site` at `addr` in its life `generation`, sharing the place with
    /// every other identity of that site at that address this interner made.
    pub fn node_id(&self, site: &str, addr: NodeAddr, generation: u64) -> NodeId {
        let key = SiteAddr {
            addr,
            site_key: site_key(site),
        };
        let mut tables = self.tables();
        let place = match tables.places.get(&key) {
            Some(place) if &*place.site == site => place.clone(),
            _ => {
                let place = Arc::new(Place {
                    addr,
                    site_key: key.site_key,
                    site: tables.intern(site),
                });
                if tables.places.len() < INTERNER_CAPACITY {
                    tables.places.insert(key, place.clone());
                }
                place
            }
        };
        NodeId::at(place, generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Identity;

    fn id(site: &str, addr: &str, generation: u64) -> NodeId {
        NodeId::new(Arc::from(site), addr.parse().unwrap(), generation)
    }

    #[test]
    fn round_trips_v4_and_v6() {
        let interner = Interner::default();
        for node in [
            id("site-a", "127.0.0.1:7946", 1_700_000_000_000),
            id("b", "[::1]:9", u64::MAX),
            id(&"x".repeat(MAX_SITE_LEN), "[2001:db8::7]:65535", 0),
            NodeId::placeholder("10.0.0.1:1".parse().unwrap()),
        ] {
            let mut buf = Vec::new();
            node.encode(&mut buf);
            assert_eq!(buf.len(), node.encoded_len());
            assert!(buf.len() <= MAX_IDENTITY_LEN);
            let mut r = Reader::new(&buf);
            assert_eq!(NodeId::decode(&mut r, &interner).unwrap(), node);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn fixed_vector() {
        // Quoted in docs/wire-format.md.
        let mut buf = Vec::new();
        id("site-a", "127.0.0.1:7946", 7).encode(&mut buf);
        assert_eq!(
            buf,
            [
                6, b's', b'i', b't', b'e', b'-', b'a', 4, 127, 0, 0, 1, 0x1f, 0x0a, 0, 0, 0, 0, 0,
                0, 0, 7
            ]
        );
    }

    #[test]
    fn decoded_names_are_shared() {
        let interner = Interner::default();
        let mut buf = Vec::new();
        id("shared", "127.0.0.1:1", 1).encode(&mut buf);
        let a = NodeId::decode(&mut Reader::new(&buf), &interner).unwrap();
        let b = NodeId::decode(&mut Reader::new(&buf), &interner).unwrap();
        assert!(Arc::ptr_eq(a.site(), b.site()));
        assert!(Arc::ptr_eq(&a.place, &b.place));
        // Equal whether or not the place is shared.
        assert_eq!(a, id("shared", "127.0.0.1:1", 1));
        assert_ne!(a, id("shared", "127.0.0.1:1", 2));
        assert_ne!(a, id("shared", "127.0.0.1:2", 1));
        assert_ne!(a, id("sharer", "127.0.0.1:1", 1));
        // Three words: every node keeps one per member.
        assert_eq!(std::mem::size_of::<NodeId>(), 24);
    }

    #[test]
    fn refuses_malformed_identities() {
        let interner = Interner::default();
        let mut buf = Vec::new();
        id("abc", "127.0.0.1:1", 1).encode(&mut buf);
        for cut in 0..buf.len() {
            assert_eq!(
                NodeId::decode(&mut Reader::new(&buf[..cut]), &interner),
                Err(WireError::Truncated)
            );
        }
        let mut long = buf.clone();
        long[0] = 64;
        assert_eq!(
            NodeId::decode(&mut Reader::new(&long), &interner),
            Err(WireError::SiteTooLong(64))
        );
        let mut family = buf.clone();
        family[4] = 5;
        assert_eq!(
            NodeId::decode(&mut Reader::new(&family), &interner),
            Err(WireError::BadFamily(5))
        );
        let mut utf8 = buf;
        utf8[1] = 0xff;
        assert_eq!(
            NodeId::decode(&mut Reader::new(&utf8), &interner),
            Err(WireError::BadUtf8)
        );
    }

    #[test]
    fn higher_generation_wins_and_renew_bumps() {
        let old = id("a", "127.0.0.1:1", 5);
        let new = old.renew().unwrap();
        assert_eq!(new.generation(), 6);
        assert_eq!(new.addr(), old.addr());
        assert!(new.win_addr_conflict(&old));
        assert!(!old.win_addr_conflict(&new));
        assert!(id("b", "127.0.0.1:1", 5).win_addr_conflict(&old));
        assert_eq!(id("a", "127.0.0.1:1", u64::MAX).renew(), None);
    }

    #[test]
    fn site_names_are_checked() {
        assert!(validate_site("eu-west.1_a").is_ok());
        assert!(validate_site("").is_err());
        assert!(validate_site(&"a".repeat(64)).is_err());
        let err = validate_site("has space").unwrap_err().to_string();
        assert!(err.contains("' '"), "{err}");
    }

    #[test]
    fn identity_stays_compact() {
        assert!(std::mem::size_of::<NodeId>() <= 56);
        assert!(std::mem::size_of::<foca::Member<NodeId>>() <= 64);
    }
}
