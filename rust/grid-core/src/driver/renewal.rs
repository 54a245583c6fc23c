//! A site's certificate over its life, the driver's part (docs/security.md, "Certificate
//! renewal"): pins replaced, the node's own certificate renewed in place, its own items
//! held under an earlier key signed again under the current one, and earlier certificates
//! forgotten once they vouch for nothing held or no longer pass the trust policy.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::auth::{Authority, Pins, FINGERPRINT_LEN, ITEM_DOMAIN, SIGNATURE_LEN};
use crate::lanes::keys::Role;
use crate::lanes::{encode_publish, lock, BroadcastKey};
use crate::wire::session::Transmit;

use super::Driver;

/// Why a renewal was refused: the node signs nothing (a simulation), so there is no
/// certificate to renew. It keeps running as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsigned;

impl std::fmt::Display for Unsigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this node signs nothing: there is no certificate to renew")
    }
}

impl std::error::Error for Unsigned {}

impl Driver {
    /// Replaces the pinned certificate fingerprints. A site whose current certificate no
    /// longer matches its pin is forgotten: its messages and items are refused until it
    /// introduces itself with a certificate that passes. An earlier certificate that no
    /// longer matches stops vouching for what it signed.
    pub fn set_pins(&mut self, pins: Pins) {
        let forgotten = self.session.set_pins(pins);
        self.forget_certificates(forgotten);
    }

    /// Signs and verifies with `authority` from now on, without a restart (a renewed
    /// site certificate, new trust anchors or pins; checked by the caller for this node's
    /// site). A new certificate: the node introduces itself again to every member, signs
    /// its own items again under the new key, and keeps the previous certificate as an
    /// earlier one, vouching for what it signed until nothing held needs it. Certificates
    /// of other sites the new policy refuses are forgotten, as [`Driver::set_pins`] does.
    pub fn renew<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        authority: Authority,
        out: &mut O,
    ) -> Result<(), Unsigned> {
        let renewed = self.session.renew(now, authority).ok_or(Unsigned)?;
        self.forget_certificates(renewed.forgotten);
        let Some(key) = renewed.key else {
            return Ok(());
        };
        let own = self.foca.identity().site().clone();
        lock(&self.store).trust_origin(&own, key, Role::Current);
        self.stats.renewals += 1;
        let members: Vec<_> = self
            .foca
            .iter_members()
            .map(|member| member.id().socket_addr())
            .collect();
        for member in members {
            self.session.send_hello(now, member, false, out);
        }
        self.settle(now);
        Ok(())
    }

    /// Takes what the session forgot out of the store: a site's current certificate with
    /// all its keys (its items wait for a certificate that passes), an earlier one alone.
    fn forget_certificates(&mut self, forgotten: Vec<(Arc<str>, [u8; FINGERPRINT_LEN], bool)>) {
        let mut store = lock(&self.store);
        for (site, fingerprint, current) in forgotten {
            if current {
                store.distrust_origin(&site);
            } else {
                store.forget_earlier_key(&site, &fingerprint);
            }
        }
    }

    /// Signs again, under the current key, this site's own items held under an earlier one
    /// (after a renewal, or taken back from peers after a restart with a new certificate),
    /// and relays them: peers replace the earlier signature, late joiners get items the
    /// current certificate vouches for.
    pub(super) fn sign_own_items_again(&mut self) {
        let stale = lock(&self.store).take_stale_own();
        if stale.is_empty() {
            return;
        }
        let origin = self.foca.identity().site().clone();
        for item in stale {
            self.scratch.clear();
            let authority = self.session.authority();
            let encoded = encode_publish(
                &origin,
                item.lane,
                &item.key,
                item.version,
                &item.payload,
                &mut self.scratch,
                |signed| authority.sign(ITEM_DOMAIN, signed),
            );
            if encoded.is_err() {
                continue; // it was taken once, so it encodes; nothing to sign otherwise
            }
            let mut signature = [0u8; SIGNATURE_LEN];
            signature.copy_from_slice(&self.scratch[self.scratch.len() - SIGNATURE_LEN..]);
            if !lock(&self.store).replace_signature(&origin, item.lane, &item.key, signature) {
                continue;
            }
            let key = BroadcastKey::new(origin.clone(), item.lane, item.key, item.version);
            lock(&self.relays).queue.push(key, self.scratch.clone());
            self.stats.items_signed_again += 1;
            self.broadcast_pending = true;
        }
    }

    /// Forgets earlier certificates that no longer pass the trust policy (expired, say) and
    /// earlier keys that sign nothing held any more, in the session and the store alike.
    pub(super) fn tidy_earlier_certificates(&mut self, now: Duration) {
        let untrusted = self.session.forget_untrusted_earlier(now);
        let unused = {
            let mut store = lock(&self.store);
            for (site, fingerprint) in &untrusted {
                store.forget_earlier_key(site, fingerprint);
            }
            store.forget_unused_earlier_keys()
        };
        for (site, fingerprint) in unused {
            self.session.forget_earlier(&site, &fingerprint);
        }
    }
}
