//! What a session trusts: each site's certificates (current and earlier, checked against
//! the trust policy), what renewing this node's credentials or the network's pins,
//! anchors or revocations changes, and what is forgotten when a certificate no longer
//! passes.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::auth::{Authority, Pins, PublicKey, FINGERPRINT_LEN};
use crate::wire::sites::{Certificate, KnownSites, Learned};

use super::{RenewedAuthority, Session, RECHECK_CERTIFICATES};

impl Session {
    /// Replaces the pins; returns the certificates that no longer match their site's pin:
    /// site, fingerprint and whether it was the site's current one (then the site is
    /// forgotten and must introduce itself again).
    pub fn set_pins(&mut self, pins: Pins) -> Vec<(Arc<str>, [u8; FINGERPRINT_LEN], bool)> {
        let Authority::Certified { policy, .. } = &mut self.authority else {
            return Vec::new();
        };
        policy.set_pins(pins);
        let local = self.local.site().clone();
        self.sites.forget_where(|site, certificate| {
            *site != *local && !policy.admits_fingerprint(site, &certificate.fingerprint())
        })
    }

    /// Whether the network revoked the certificate with this fingerprint.
    pub fn is_revoked(&self, fingerprint: &[u8; FINGERPRINT_LEN]) -> bool {
        match &self.authority {
            Authority::Certified { policy, .. } => policy.is_revoked(fingerprint),
            Authority::Unsigned => false,
        }
    }

    /// Forgets every identity of `site` this session verified: gossip about them is not
    /// taken until they introduce themselves again with a certificate that passes.
    pub fn forget_identities(&mut self, site: &str) {
        self.senders.forget_site(site);
        self.pairs.forget_site(site);
    }

    /// The key verified for `site`'s current certificate, if any.
    pub fn key(&self, site: &str) -> Option<&PublicKey> {
        self.sites.get(site).map(|known| &known.current.key)
    }

    /// The sites this session knows certificates for, and their certificates.
    pub fn sites(&self) -> &KnownSites {
        &self.sites
    }

    /// Forgets an earlier certificate of `site` (nothing held is signed by its key any
    /// more, or it no longer passes the policy).
    pub fn forget_earlier(&mut self, site: &str, fingerprint: &[u8; FINGERPRINT_LEN]) {
        self.sites.forget_earlier(site, fingerprint);
    }

    /// Signs and verifies with `authority` from now on: the site's certificate renewed,
    /// the network's trust anchors or pins changed, or both. A new certificate of this
    /// node's stays with the previous one as an earlier one (it vouches for what it
    /// signed), and every address is introduced to it before its next message. Other
    /// sites' certificates that the new policy refuses are forgotten; returns them as
    /// [`Session::set_pins`] does. `None` (nothing changed) for a session that signs
    /// nothing.
    pub fn renew(&mut self, now: Duration, authority: Authority) -> Option<RenewedAuthority> {
        let Authority::Certified {
            credentials,
            policy,
        } = &authority
        else {
            return None;
        };
        if self.authority.is_unsigned() {
            return None;
        }
        let key = credentials.public_key().clone();
        let certificate = Certificate::new(key.clone(), credentials.chain().to_vec());
        let wall = self.wall_offset + now;
        let local = self.local.site().clone();
        let forgotten = self.sites.forget_where(|site, known| {
            let chain: Vec<&[u8]> = known.chain.iter().map(Vec::as_slice).collect();
            *site != *local && policy.certify(site, &chain, wall).is_err()
        });
        let renewed = self.sites.presented(&local, certificate, now) == Learned::Current;
        self.authority = authority;
        if renewed {
            self.introduced.clear();
        }
        Some(RenewedAuthority {
            key: renewed.then_some(key),
            forgotten,
        })
    }

    /// Earlier certificates that no longer pass the trust policy at `now` (expired, or
    /// refused otherwise), forgotten here; returns each as site and fingerprint.
    pub fn forget_untrusted_earlier(
        &mut self,
        now: Duration,
    ) -> Vec<(Arc<str>, [u8; FINGERPRINT_LEN])> {
        let Authority::Certified { policy, .. } = &self.authority else {
            return Vec::new();
        };
        let wall = self.wall_offset + now;
        let untrusted: Vec<_> = self
            .sites
            .all_earlier()
            .into_iter()
            .filter(|(site, certificate)| {
                let chain: Vec<&[u8]> = certificate.chain.iter().map(Vec::as_slice).collect();
                policy.certify(site, &chain, wall).is_err()
            })
            .map(|(site, certificate)| (site, certificate.fingerprint()))
            .collect();
        for (site, fingerprint) in &untrusted {
            self.sites.forget_earlier(site, fingerprint);
        }
        untrusted
    }

    /// The key `chain` proves for `site`: checked against the policy, or taken from the
    /// site's known chain when it is the same certificate and was checked lately.
    pub(super) fn certified(
        &self,
        now: Duration,
        site: &str,
        chain: &[&[u8]],
    ) -> Option<PublicKey> {
        let Authority::Certified { policy, .. } = &self.authority else {
            return None;
        };
        let leaf = ring::digest::digest(&ring::digest::SHA256, chain.first()?);
        match self.sites.get(site) {
            Some(known)
                if known.current.fingerprint()[..] == *leaf.as_ref()
                    && now.saturating_sub(known.checked) < RECHECK_CERTIFICATES =>
            {
                Some(known.current.key.clone())
            }
            _ => policy.certify(site, chain, self.wall_offset + now).ok(),
        }
    }

    /// Keeps `key` (proved by `chain`, presented by the site itself) as `site`'s current
    /// key; false when the table of sites is full.
    pub(super) fn remember_site(
        &mut self,
        now: Duration,
        site: &Arc<str>,
        key: PublicKey,
        chain: &[&[u8]],
    ) -> bool {
        if site == self.local.site() {
            // This node's own certificate is the one it holds, whatever peers relay.
            return true;
        }
        let chain = chain.iter().map(|der| der.to_vec()).collect();
        self.sites
            .presented(site, Certificate::new(key, chain), now)
            != Learned::Full
    }

    /// Learns a certificate of `site` as a peer relayed it (in a sync): the certificate
    /// vouches for itself, whoever carries it. It is the site's current one if none is
    /// known or it was issued after the current one, else an earlier one (this node's own
    /// earlier certificates included: they vouch for what an earlier life of this node
    /// signed). Returns the key and which it is, `None` if it does not pass.
    pub fn learn_certificate(
        &mut self,
        now: Duration,
        site: &Arc<str>,
        chain: &[&[u8]],
    ) -> Option<(PublicKey, Learned)> {
        let own = site == self.local.site();
        if own
            && chain.first().is_some_and(|leaf| {
                let found = ring::digest::digest(&ring::digest::SHA256, leaf);
                self.key(site)
                    .is_some_and(|key| key.fingerprint()[..] == *found.as_ref())
            })
        {
            return None;
        }
        let Some(key) = self.certified(now, site, chain) else {
            self.stats.dropped_untrusted_certificate += 1;
            return None;
        };
        let certificate = Certificate::new(key.clone(), chain.iter().map(|d| d.to_vec()).collect());
        let learned = if own {
            self.sites.relayed_earlier(site, certificate)
        } else {
            self.sites.relayed(site, certificate, now)
        };
        let learned = match learned {
            Learned::Full | Learned::Refused => return None,
            Learned::Known if self.key(site) == Some(&key) => Learned::Current,
            Learned::Known => Learned::Earlier,
            learned => learned,
        };
        Some((key, learned))
    }

    /// The current certificate chain of `site` (this node's own included), for syncs.
    pub fn certificate_chain(&self, site: &str) -> Option<&[Vec<u8>]> {
        self.sites
            .get(site)
            .map(|known| known.current.chain.as_slice())
    }

    /// The certificate chain of `site` whose leaf has this fingerprint (current or
    /// earlier), for syncs that carry items it signed.
    pub fn chain_of(&self, site: &str, fingerprint: &[u8; FINGERPRINT_LEN]) -> Option<&[Vec<u8>]> {
        self.sites.chain(site, fingerprint)
    }
}
