//! What a node is made of (its settings and the credentials it signs and verifies with),
//! and how making or driving one fails.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::driver::config::{ConfigError, SwimConfig};
use crate::identity::auth::{
    AuthError, Authority, Pins, SiteCredentials, TrustPolicy, FINGERPRINT_LEN,
};
use crate::identity::{validate_site, SiteNameError};
use crate::lanes::PublishError;
use crate::wire::frame::KeyringError;
use crate::wire::MAX_UNSEALED_LEN;

#[derive(Clone, Debug)]
pub struct NodeSettings {
    pub bind: SocketAddr,
    /// What peers use to reach us; defaults to the bound address.
    pub advertise: Option<SocketAddr>,
    pub site: String,
    /// Defaults to wall-clock milliseconds, so a restart wins over the previous life.
    pub generation: Option<u64>,
    pub swim: SwimConfig,
    /// Membership events kept for a slow reader; more are dropped and counted. Items are
    /// never dropped (see [`super::events::EventQueue`]).
    pub event_capacity: usize,
    /// Item names the node remembers (1 to [`crate::driver::MAX_ITEM_CAPACITY`]).
    pub item_capacity: usize,
}

/// What a node signs with and trusts.
#[derive(Clone)]
pub struct NodeTrust {
    /// The site certificate (DER), then any intermediates.
    pub chain: Vec<Vec<u8>>,
    /// The certificate's private key, PKCS#8 DER.
    pub private_key: Vec<u8>,
    /// The network CA certificates (DER).
    pub anchors: Vec<Vec<u8>>,
    /// Pinned SHA-256 fingerprints of site certificates, by site name.
    pub pins: Pins,
    /// SHA-256 fingerprints of revoked site certificates.
    pub revoked: Vec<[u8; FINGERPRINT_LEN]>,
}

impl fmt::Debug for NodeTrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTrust")
            .field("chain", &self.chain.len())
            .field("anchors", &self.anchors.len())
            .field("pins", &self.pins.len())
            .field("revoked", &self.revoked.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum NodeError {
    Config(ConfigError),
    Site(SiteNameError),
    Keyring(KeyringError),
    /// The site's certificate, key or trust anchors cannot work; nothing was bound.
    Credentials(AuthError),
    Bind {
        addr: SocketAddr,
        source: io::Error,
    },
    Io(io::Error),
    Publish(PublishError),
    /// The node is not running (never started, left or closed).
    Stopped,
    AlreadyStarted,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Config(err) => err.fmt(f),
            NodeError::Site(err) => err.fmt(f),
            NodeError::Keyring(err) => err.fmt(f),
            NodeError::Credentials(err) => write!(f, "site credentials: {err}"),
            NodeError::Bind { addr, source } => write!(f, "cannot bind UDP {addr}: {source}"),
            NodeError::Io(err) => write!(f, "socket setup failed: {err}"),
            NodeError::Publish(err) => err.fmt(f),
            NodeError::Stopped => f.write_str("the SWIM node is not running"),
            NodeError::AlreadyStarted => f.write_str("the SWIM node was already started"),
        }
    }
}

impl std::error::Error for NodeError {}

impl NodeTrust {
    /// The credentials and policy a node of `site` would sign and verify with, checked as
    /// [`super::Node::bind`] checks them, at wall-clock time `now`.
    pub fn check(self, site: &str, now: Duration) -> Result<Authority, NodeError> {
        validate_site(site).map_err(NodeError::Site)?;
        let policy = TrustPolicy::new(&self.anchors, self.pins)
            .map_err(NodeError::Credentials)?
            .with_revoked(self.revoked);
        let credentials = SiteCredentials::new(site, self.chain, &self.private_key, &policy, now)
            .map_err(NodeError::Credentials)?;
        let hello_len = 1
            + crate::identity::MAX_IDENTITY_LEN
            + 2
            + credentials
                .chain()
                .iter()
                .map(|der| 2 + der.len())
                .sum::<usize>();
        if hello_len > MAX_UNSEALED_LEN {
            return Err(NodeError::Config(ConfigError(format!(
                "the site certificate chain takes {hello_len} bytes in a HELLO message, more \
                 than the {MAX_UNSEALED_LEN} one frame can carry; present the leaf alone or \
                 use smaller certificates"
            ))));
        }
        Ok(Authority::Certified {
            credentials: Box::new(credentials),
            policy,
        })
    }
}
