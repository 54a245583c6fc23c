//! What a session lets others make it do: answers to an address (a `HELLO` asked for, a
//! handshake answered), and signatures checked for messages that claim a site.
//!
//! Both are counted per second, by wall of the driver's clock, so that whatever a key
//! holder sends, the asymmetric work it causes here (and the answers it draws to addresses
//! of its choosing) stays under a stated bound.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::identity::NodeAddr;

/// Addresses whose last answer a [`Pacer`] remembers.
const ADDRESS_MEMORY: usize = 8192;
/// Sites a [`SignedChecks`] counts in one second; a message claiming yet another site in
/// that second waits for the next one.
const SITES_PER_SECOND: usize = 4096;

/// Answers to addresses: at most one per address per `interval`, `per_second` in all.
pub(super) struct Pacer {
    interval: Duration,
    per_second: u32,
    last: HashMap<NodeAddr, Duration>,
    second: u64,
    in_second: u32,
}

impl Pacer {
    pub(super) fn new(interval: Duration, per_second: u32) -> Pacer {
        Pacer {
            interval,
            per_second,
            last: HashMap::new(),
            second: 0,
            in_second: 0,
        }
    }

    /// Whether an answer may go to `addr` now, and if so, records that it does. `Err`
    /// when the second's budget is spent (the caller counts it), `Ok(false)` when the
    /// address had one lately.
    pub(super) fn take(&mut self, now: Duration, addr: NodeAddr) -> Result<bool, ()> {
        if self
            .last
            .get(&addr)
            .is_some_and(|at| now.saturating_sub(*at) < self.interval)
        {
            return Ok(false);
        }
        let second = now.as_secs();
        if second != self.second {
            self.second = second;
            self.in_second = 0;
        }
        if self.in_second >= self.per_second {
            return Err(());
        }
        if !remember(&mut self.last, addr, now, self.interval) {
            return Ok(false);
        }
        self.in_second += 1;
        Ok(true)
    }

    /// Records that something went to `addr` now (an introduction), without spending
    /// the second's budget.
    pub(super) fn note(&mut self, now: Duration, addr: NodeAddr) {
        remember(&mut self.last, addr, now, self.interval);
    }

    /// When something last went to `addr`.
    pub(super) fn last(&self, addr: NodeAddr) -> Option<Duration> {
        self.last.get(&addr).copied()
    }

    pub(super) fn clear(&mut self) {
        self.last.clear();
    }

    /// Forgets what went to `addr`.
    pub(super) fn forget(&mut self, addr: NodeAddr) {
        self.last.remove(&addr);
    }
}

/// Records `now` for `addr` in a bounded map, forgetting entries older than `expiry` when
/// it is full; false if there is still no room (the caller then skips the answer).
fn remember(
    map: &mut HashMap<NodeAddr, Duration>,
    addr: NodeAddr,
    now: Duration,
    expiry: Duration,
) -> bool {
    if map.len() >= ADDRESS_MEMORY && !map.contains_key(&addr) {
        map.retain(|_, at| now.saturating_sub(*at) < expiry);
        if map.len() >= ADDRESS_MEMORY {
            return false;
        }
    }
    map.insert(addr, now);
    true
}

/// Signature checks of signed messages in one second: per site for identities that send to
/// this node under a session (they have no reason to sign more than a few), and in all for
/// other senders not known to speak only the signed form.
pub(super) struct SignedChecks {
    second: u64,
    total: u32,
    per_site: HashMap<Arc<str>, u32>,
}

/// Which limit a signed message from its sender falls under.
pub(super) enum Limit {
    /// The sender speaks only the signed form (a release before sessions): every message
    /// of its is signed, so none is held back.
    None,
    /// The sender may speak the session form but holds no session with us yet.
    Total,
    /// The sender sends to us under a session: it signs only to introduce itself, while
    /// it rekeys, or after it lost the session.
    InSession,
}

impl SignedChecks {
    pub(super) fn new() -> SignedChecks {
        SignedChecks {
            second: 0,
            total: 0,
            per_site: HashMap::new(),
        }
    }

    /// Whether a signature of a message from `site` may be checked now (and if so,
    /// counts it).
    pub(super) fn take(&mut self, now: Duration, site: &Arc<str>, limit: Limit) -> bool {
        let second = now.as_secs();
        if second != self.second {
            self.second = second;
            self.total = 0;
            self.per_site.clear();
        }
        match limit {
            Limit::None => true,
            Limit::Total => {
                if self.total >= SIGNED_CHECKS_PER_SECOND {
                    return false;
                }
                self.total += 1;
                true
            }
            Limit::InSession => {
                if self.per_site.len() >= SITES_PER_SECOND && !self.per_site.contains_key(site) {
                    return false;
                }
                let count = self.per_site.entry(site.clone()).or_default();
                if *count >= SIGNED_IN_SESSION_PER_SECOND {
                    return false;
                }
                *count += 1;
                true
            }
        }
    }
}

/// Signed messages a node checks in one second from senders that may speak the session
/// form and hold no session with it: about 7 % of a core at 70 µs a check.
pub const SIGNED_CHECKS_PER_SECOND: u32 = 1000;
/// Signed messages a node checks in one second from the identities of one site that
/// send to it under a session.
pub const SIGNED_IN_SESSION_PER_SECOND: u32 = 50;
