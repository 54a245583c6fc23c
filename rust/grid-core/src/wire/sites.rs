//! The sites a session knows: each site's current certificate (the key its messages are
//! signed with) and the earlier certificates that still vouch for items it signed before
//! a renewal (docs/security.md, "Certificate renewal").
//!
//! A site's current certificate is the one its own `HELLO` presented last. A certificate
//! relayed by a peer (in a sync) becomes current only if no certificate is known for the
//! site or it was issued after the current one (a peer that has not heard of a renewal yet
//! must not turn it back); otherwise it is kept as an earlier one. Earlier certificates are
//! bounded per site; messages signed by the key a site used before its latest `HELLO` are
//! still taken for [`KEY_SWITCH_GRACE`] (they were on their way when it renewed).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::identity::auth::{PublicKey, FINGERPRINT_LEN};
use crate::identity::x509;

/// Messages signed by a site's previous key are taken this long after its new key was
/// learned: what it sent just before it renewed is still on its way.
pub const KEY_SWITCH_GRACE: Duration = Duration::from_secs(10);
/// Earlier certificates kept per site (the item store trusts as many earlier keys): a
/// certificate renewed every few minutes has its items signed again long before this many
/// renewals pass; past it, the oldest is forgotten first.
pub const MAX_EARLIER_CERTIFICATES: usize = 4;

/// A certificate known for a site and the key it proved.
#[derive(Clone)]
pub struct Certificate {
    pub key: PublicKey,
    pub chain: Vec<Vec<u8>>,
    /// When (wall clock, since the Unix epoch) it became valid, if its leaf could be read.
    pub not_before: Option<Duration>,
}

impl Certificate {
    pub fn new(key: PublicKey, chain: Vec<Vec<u8>>) -> Certificate {
        let not_before = chain
            .first()
            .and_then(|leaf| x509::validity(leaf).ok())
            .map(|validity| validity.not_before);
        Certificate {
            key,
            chain,
            not_before,
        }
    }

    pub fn fingerprint(&self) -> [u8; FINGERPRINT_LEN] {
        self.key.fingerprint()
    }
}

/// What a site's certificate is to a session.
pub struct KnownSite {
    pub current: Certificate,
    /// When the current chain was last checked against the policy (driver time).
    pub checked: Duration,
    /// Earlier certificates, the most recent first, each with when it stopped being current
    /// (driver time).
    earlier: Vec<(Certificate, Duration)>,
}

impl KnownSite {
    pub fn earlier(&self) -> impl Iterator<Item = &Certificate> {
        self.earlier.iter().map(|(certificate, _)| certificate)
    }

    /// Whether `key` is this site's current key or one of its earlier ones.
    fn knows(&self, key: &PublicKey) -> bool {
        self.current.key == *key || self.earlier().any(|earlier| earlier.key == *key)
    }

    /// The keys a message of this site may be signed with at `now`: the current one, and
    /// one replaced within [`KEY_SWITCH_GRACE`].
    pub fn message_keys(&self, now: Duration) -> impl Iterator<Item = &PublicKey> {
        std::iter::once(&self.current.key).chain(
            self.earlier
                .iter()
                .filter(move |(_, until)| now.saturating_sub(*until) < KEY_SWITCH_GRACE)
                .map(|(certificate, _)| &certificate.key),
        )
    }

    fn push_earlier(&mut self, certificate: Certificate, until: Duration) {
        self.earlier
            .retain(|(known, _)| known.key != certificate.key && known.key != self.current.key);
        self.earlier.insert(0, (certificate, until));
        self.earlier.truncate(MAX_EARLIER_CERTIFICATES);
    }

    /// Makes `certificate` current; the one it replaces becomes an earlier one.
    fn make_current(&mut self, certificate: Certificate, now: Duration) {
        let previous = std::mem::replace(&mut self.current, certificate);
        self.checked = now;
        self.earlier
            .retain(|(known, _)| known.key != self.current.key);
        self.push_earlier(previous, now);
    }
}

/// What learning a certificate did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// It is the site's current certificate now.
    Current,
    /// It is kept as an earlier certificate of the site.
    Earlier,
    /// It was known already, as it is.
    Known,
    /// Not kept: the table of sites is full.
    Full,
    /// Not kept: not a certificate of an earlier life of this node's own site.
    Refused,
}

/// Every site's certificates, at most `capacity` sites.
pub struct KnownSites {
    sites: HashMap<Arc<str>, KnownSite>,
    capacity: usize,
}

impl KnownSites {
    pub fn new(capacity: usize) -> KnownSites {
        KnownSites {
            sites: HashMap::new(),
            capacity,
        }
    }

    pub fn get(&self, site: &str) -> Option<&KnownSite> {
        self.sites.get(site)
    }

    pub fn len(&self) -> usize {
        self.sites.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The site's own words (its `HELLO`, or this node's own credentials): `certificate` is
    /// current, checked against the policy at `now` unless it was current already.
    pub fn presented(
        &mut self,
        site: &Arc<str>,
        certificate: Certificate,
        now: Duration,
    ) -> Learned {
        match self.sites.get_mut(site) {
            Some(known) if known.current.key == certificate.key => Learned::Known,
            Some(known) => {
                known.make_current(certificate, now);
                Learned::Current
            }
            None => self.insert(site, certificate, now),
        }
    }

    /// A certificate of `site` a peer relayed: current if none is known or it was issued
    /// after the current one, else an earlier one.
    pub fn relayed(&mut self, site: &Arc<str>, certificate: Certificate, now: Duration) -> Learned {
        let Some(known) = self.sites.get_mut(site) else {
            return self.insert(site, certificate, now);
        };
        if known.knows(&certificate.key) {
            return Learned::Known;
        }
        let newer = match (certificate.not_before, known.current.not_before) {
            (Some(relayed), Some(current)) => relayed > current,
            _ => false,
        };
        if newer {
            known.make_current(certificate, now);
            Learned::Current
        } else {
            known.push_earlier(certificate, Duration::ZERO);
            Learned::Earlier
        }
    }

    /// An earlier certificate of a site whose current one is not to be replaced by relays
    /// (this node's own). Only one issued before the current one can be an earlier life's:
    /// a later one (or one whose dates cannot be read) is refused, so a certificate issued
    /// for this site's name after its own never makes it sign anything again.
    pub fn relayed_earlier(&mut self, site: &Arc<str>, certificate: Certificate) -> Learned {
        let Some(known) = self.sites.get_mut(site) else {
            return Learned::Refused;
        };
        if known.knows(&certificate.key) {
            return Learned::Known;
        }
        let issued_before = match (certificate.not_before, known.current.not_before) {
            (Some(relayed), Some(current)) => relayed <= current,
            _ => false,
        };
        if !issued_before {
            return Learned::Refused;
        }
        known.push_earlier(certificate, Duration::ZERO);
        Learned::Earlier
    }

    fn insert(&mut self, site: &Arc<str>, certificate: Certificate, now: Duration) -> Learned {
        if self.sites.len() >= self.capacity {
            return Learned::Full;
        }
        self.sites.insert(
            site.clone(),
            KnownSite {
                current: certificate,
                checked: now,
                earlier: Vec::new(),
            },
        );
        Learned::Current
    }

    /// The certificate chain of `site` whose leaf has this fingerprint, current or earlier.
    pub fn chain(&self, site: &str, fingerprint: &[u8; FINGERPRINT_LEN]) -> Option<&[Vec<u8>]> {
        let known = self.sites.get(site)?;
        std::iter::once(&known.current)
            .chain(known.earlier())
            .find(|certificate| certificate.fingerprint() == *fingerprint)
            .map(|certificate| certificate.chain.as_slice())
    }

    /// Forgets every certificate of `site`.
    pub fn remove(&mut self, site: &str) {
        self.sites.remove(site);
    }

    /// Forgets the earlier certificate of `site` with this fingerprint.
    pub fn forget_earlier(&mut self, site: &str, fingerprint: &[u8; FINGERPRINT_LEN]) {
        if let Some(known) = self.sites.get_mut(site) {
            known
                .earlier
                .retain(|(certificate, _)| certificate.fingerprint() != *fingerprint);
        }
    }

    /// Forgets every certificate for which `drop` holds: an earlier one alone, or a site's
    /// current one with all of the site's certificates (it must present a new one). Returns
    /// what was forgotten: site, fingerprint, and whether it was the site's current one.
    pub fn forget_where(
        &mut self,
        mut drop: impl FnMut(&str, &Certificate) -> bool,
    ) -> Vec<(Arc<str>, [u8; FINGERPRINT_LEN], bool)> {
        let mut forgotten = Vec::new();
        self.sites.retain(|site, known| {
            known.earlier.retain(|(certificate, _)| {
                let gone = drop(site, certificate);
                if gone {
                    forgotten.push((site.clone(), certificate.fingerprint(), false));
                }
                !gone
            });
            if drop(site, &known.current) {
                forgotten.push((site.clone(), known.current.fingerprint(), true));
                for certificate in known.earlier() {
                    forgotten.push((site.clone(), certificate.fingerprint(), false));
                }
                return false;
            }
            true
        });
        forgotten
    }

    /// How many earlier certificates are kept, all sites together.
    pub fn earlier_count(&self) -> usize {
        self.sites.values().map(|known| known.earlier.len()).sum()
    }

    /// Every earlier certificate: site and certificate.
    pub fn all_earlier(&self) -> Vec<(Arc<str>, Certificate)> {
        self.sites
            .iter()
            .flat_map(|(site, known)| {
                known
                    .earlier()
                    .map(move |certificate| (site.clone(), certificate.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::auth::test_key;

    fn issued(key: u8, not_before: u64) -> Certificate {
        Certificate {
            key: test_key(key).1,
            chain: vec![vec![key]],
            not_before: Some(Duration::from_secs(not_before)),
        }
    }

    #[test]
    fn the_newest_relayed_certificate_is_current_and_an_older_one_earlier() {
        let mut sites = KnownSites::new(8);
        let site: Arc<str> = Arc::from("site-a");
        assert_eq!(
            sites.relayed(&site, issued(1, 100), Duration::ZERO),
            Learned::Current
        );
        assert_eq!(
            sites.relayed(&site, issued(2, 200), Duration::ZERO),
            Learned::Current
        );
        // A peer that has not heard of the renewal relays the old one: it stays earlier.
        assert_eq!(
            sites.relayed(&site, issued(1, 100), Duration::ZERO),
            Learned::Known
        );
        assert_eq!(
            sites.relayed(&site, issued(3, 150), Duration::ZERO),
            Learned::Earlier
        );
        let known = sites.get(&site).unwrap();
        assert_eq!(known.current.key, test_key(2).1);
        assert_eq!(sites.earlier_count(), 2);
    }

    #[test]
    fn only_a_certificate_issued_before_its_own_is_an_earlier_life_of_this_site() {
        let mut sites = KnownSites::new(8);
        let own: Arc<str> = Arc::from("me");
        sites.presented(&own, issued(1, 100), Duration::ZERO);
        assert_eq!(sites.relayed_earlier(&own, issued(2, 50)), Learned::Earlier);
        assert_eq!(
            sites.relayed_earlier(&own, issued(3, 150)),
            Learned::Refused
        );
        let undated = Certificate {
            not_before: None,
            ..issued(4, 0)
        };
        assert_eq!(sites.relayed_earlier(&own, undated), Learned::Refused);
        assert_eq!(sites.earlier_count(), 1);
    }

    #[test]
    fn messages_under_a_replaced_key_are_taken_only_within_the_grace() {
        let mut sites = KnownSites::new(8);
        let site: Arc<str> = Arc::from("site-a");
        sites.presented(&site, issued(1, 100), Duration::ZERO);
        let switch = Duration::from_secs(60);
        sites.presented(&site, issued(2, 200), switch);
        let known = sites.get(&site).unwrap();
        assert_eq!(known.message_keys(switch + KEY_SWITCH_GRACE / 2).count(), 2);
        assert_eq!(known.message_keys(switch + KEY_SWITCH_GRACE).count(), 1);
    }
}
