//! Certificates for tests: a network CA and site certificates it issues, made fresh with
//! rcgen, and signed messages crafted the way a key holder could.
#![allow(dead_code)] // each test file uses part of this

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use grid_core::driver::node::NodeTrust;
use grid_core::identity::auth::{Authority, SiteCredentials, TrustPolicy, MESSAGE_DOMAIN};
use grid_core::identity::NodeAddr;
use grid_core::wire::seal_message;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// The wall clock of driver tests at `now` = 0.
pub const WALL: Duration = Duration::from_secs(1_800_000_000);

pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A site's certificate (DER) and private key (PKCS#8 DER).
#[derive(Clone)]
pub struct Issued {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa { cert, key }
    }

    pub fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }

    pub fn issue(&self, site: &str) -> Issued {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![site.to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert: cert.der().to_vec(),
            key: key.serialize_der(),
        }
    }

    /// A certificate for `site` issued `days` after the ones [`TestCa::issue`] gives (its
    /// `notBefore` is later: a renewal).
    pub fn renew(&self, site: &str, days: u8) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![site.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, days);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert: cert.der().to_vec(),
            key: key.serialize_der(),
        }
    }

    pub fn policy(&self) -> TrustPolicy {
        TrustPolicy::new(&[self.der()], HashMap::new()).unwrap()
    }

    pub fn authority(&self, site: &str) -> Authority {
        self.authority_of(site, self.issue(site))
    }

    /// The authority of a site that holds `issued` and refuses the certificates with these
    /// fingerprints.
    pub fn authority_revoking(
        &self,
        site: &str,
        issued: Issued,
        revoked: &[[u8; 32]],
    ) -> Authority {
        let policy = self.policy().with_revoked(revoked.iter().copied());
        let credentials =
            SiteCredentials::new(site, vec![issued.cert], &issued.key, &policy, WALL).unwrap();
        Authority::Certified {
            credentials: Box::new(credentials),
            policy,
        }
    }

    /// The authority of a site that holds `issued`.
    pub fn authority_of(&self, site: &str, issued: Issued) -> Authority {
        let policy = self.policy();
        let credentials =
            SiteCredentials::new(site, vec![issued.cert], &issued.key, &policy, WALL).unwrap();
        Authority::Certified {
            credentials: Box::new(credentials),
            policy,
        }
    }

    pub fn node_trust(&self, site: &str) -> NodeTrust {
        let issued = self.issue(site);
        NodeTrust {
            chain: vec![issued.cert],
            private_key: issued.key,
            anchors: vec![self.der()],
            pins: HashMap::new(),
            revoked: Vec::new(),
        }
    }
}

/// A message as `authority` would sign it: `kind`, `body` (which must start with the
/// sender's identity), then the trailer.
pub fn forge(
    authority: &Authority,
    kind: u8,
    body: &[u8],
    seq: u64,
    sent_at_ms: u64,
    to: SocketAddr,
) -> Vec<u8> {
    let mut message = vec![kind];
    message.extend_from_slice(body);
    seal_message(&mut message, seq, sent_at_ms, NodeAddr::new(to), |signed| {
        authority.sign(MESSAGE_DOMAIN, signed)
    });
    message
}
