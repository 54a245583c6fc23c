//! A site's certificate over its life, the driver's part (docs/security.md, "Certificate
//! renewal"): pins replaced, the node's own certificate renewed in place, its own items
//! held under an earlier key signed again under the current one, earlier certificates
//! forgotten once they vouch for nothing held or no longer pass the trust policy, and
//! revoked certificates' sites and items dropped.

use std::sync::Arc;
use std::time::Duration;

use foca::{Member, State};

use crate::driver::timers::TimerEvent;
use crate::identity::auth::{Authority, Pins, FINGERPRINT_LEN, ITEM_DOMAIN, SIGNATURE_LEN};
use crate::lanes::keys::Role;
use crate::lanes::{encode_publish, lock, BroadcastKey};
use crate::wire::session::{Transmit, ANSWER_INTERVAL};

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
        self.forget_certificates(Duration::ZERO, forgotten, &mut NoTransmit);
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
        self.forget_certificates(now, renewed.forgotten, out);
        let Some(key) = renewed.key else {
            self.settle(now);
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
    /// A revoked certificate's items are dropped as a left site's are, and a site whose
    /// current certificate is revoked is taken out of the membership as if it had left.
    fn forget_certificates<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        forgotten: Vec<(Arc<str>, [u8; FINGERPRINT_LEN], bool)>,
        out: &mut O,
    ) {
        for (site, fingerprint, current) in forgotten {
            let revoked = self.session.is_revoked(&fingerprint);
            {
                let mut store = lock(&self.store);
                if revoked {
                    store.revoke_key(&site, &fingerprint);
                }
                if current {
                    store.distrust_origin(&site);
                } else {
                    store.forget_earlier_key(&site, &fingerprint);
                }
            }
            if revoked && current {
                self.drop_revoked_site(now, &site, out);
            }
        }
    }

    /// A site whose current certificate was revoked: nothing it said is taken as verified
    /// any more, and its live identities are down as if they had left, so the host drops
    /// its records. It comes back with a certificate the network trusts.
    fn drop_revoked_site<O: Transmit + ?Sized>(&mut self, now: Duration, site: &str, out: &mut O) {
        self.session.forget_identities(site);
        let live: Vec<_> = self
            .foca
            .iter_membership_state()
            .filter(|member| &**member.id().site() == site && member.state() != State::Down)
            .map(|member| member.id().clone())
            .collect();
        for id in live {
            self.stats.members_revoked += 1;
            self.remember_left(&id);
            let down = Member::new(id, 0, State::Down);
            self.foca_call(now, out, |foca, rt| {
                foca.apply_many(std::iter::once(down), true, rt)
            });
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

    /// Asks the sites whose items wait for their certificate for a `HELLO`: at once when
    /// items start waiting (`always` false), and at every push/pull while any still wait, so
    /// a lost introduction does not strand them until a sync walk comes round. A site is
    /// asked at the last identity gossip named for it, within the answer budget.
    pub(super) fn ask_for_waiting_keys<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        always: bool,
        out: &mut O,
    ) {
        let origins = lock(&self.store).waiting_origins(always);
        let mut held_back = false;
        for origin in origins {
            let Some(id) = self.introductions.get(&origin) else {
                continue;
            };
            let to = id.socket_addr();
            if self.session.may_answer(now, to) {
                self.stats.keys_asked += 1;
                self.session.send_hello(now, to, true, out);
            } else {
                held_back = true;
            }
        }
        if held_back && !std::mem::replace(&mut self.ask_armed, true) {
            self.timers
                .push(now + ANSWER_INTERVAL, TimerEvent::AskForKeys);
        }
    }

    /// The retry [`Driver::ask_for_waiting_keys`] armed.
    pub(super) fn ask_again<O: Transmit + ?Sized>(&mut self, now: Duration, out: &mut O) {
        self.ask_armed = false;
        if !self.stopped() {
            self.ask_for_waiting_keys(now, true, out);
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

/// Where nothing is sent: pins replaced between inputs send nothing.
struct NoTransmit;

impl Transmit for NoTransmit {
    fn send(&mut self, _to: std::net::SocketAddr, _message: &[u8]) {}
}
