//! `GridNetwork.spec.swim` and how it maps onto foca's `Config`.
//!
//! | spec.swim            | default | foca / Grid                                             |
//! |----------------------|---------|---------------------------------------------------------|
//! | `probeInterval` P    | 5 s     | `probe_period` = P; `probe_rtt` = P/2                   |
//! | `suspicionTimeout` S | 10 s    | `suspect_to_down_after` = S                             |
//! | `gossipNodes` g      | 3       | `num_indirect_probes` = g; periodic gossip fanout = g   |
//! | (derived)            |         | periodic gossip every P/5; announce every 6P to 1;      |
//! |                      |         | announce to down members every 13P to 2                 |
//! | (derived, live)      |         | `max_transmissions` = 4·ceil(log10(N+1)), re-tuned as   |
//! |                      |         | the cluster size N changes                              |
//! | `pushPullInterval`   | 30 s    | full-state sync every interval·(ceil(log2 N − 5) + 1)   |
//!
//! docs/swim.md derives the failure-detection bound from these.

use std::fmt;
use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

use foca::{Config, PeriodicParams};

use crate::wire::MAX_FOCA_PACKET;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwimConfig {
    pub probe_interval: Duration,
    pub suspicion_timeout: Duration,
    pub gossip_nodes: usize,
    pub push_pull_interval: Duration,
}

impl Default for SwimConfig {
    fn default() -> SwimConfig {
        SwimConfig {
            probe_interval: Duration::from_secs(5),
            suspicion_timeout: Duration::from_secs(10),
            gossip_nodes: 3,
            push_pull_interval: Duration::from_secs(30),
        }
    }
}

/// A setting out of range; the message names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(10);
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
pub const MAX_GOSSIP_NODES: usize = 32;
/// Down members stay listed (as down or left) this long before foca forgets them.
const REMOVE_DOWN_AFTER: Duration = Duration::from_secs(24 * 3600);

fn check_range(name: &str, value: Duration, min: Duration) -> Result<(), ConfigError> {
    if value < min || value > MAX_INTERVAL {
        return Err(ConfigError(format!(
            "{name} must be between {min:?} and 24h, got {value:?}"
        )));
    }
    Ok(())
}

impl SwimConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range("probeInterval", self.probe_interval, MIN_PROBE_INTERVAL)?;
        check_range(
            "suspicionTimeout",
            self.suspicion_timeout,
            MIN_PROBE_INTERVAL,
        )?;
        check_range(
            "pushPullInterval",
            self.push_pull_interval,
            self.probe_interval,
        )?;
        if !(1..=MAX_GOSSIP_NODES).contains(&self.gossip_nodes) {
            return Err(ConfigError(format!(
                "gossipNodes must be between 1 and {MAX_GOSSIP_NODES}, got {}",
                self.gossip_nodes
            )));
        }
        Ok(())
    }

    /// How long a direct ping waits for its ack before indirect probes start; the other
    /// half of the period leaves room for the four hops of the indirect cycle.
    pub fn probe_rtt(&self) -> Duration {
        self.probe_interval / 2
    }

    pub fn gossip_interval(&self) -> Duration {
        self.probe_interval / 5
    }

    /// foca's configuration for a cluster of `cluster_size` nodes (this one included).
    /// How many times a node tells a member it suspects so: at once, then every gossip
    /// interval while the suspicion stands, the last at least one interval before the
    /// suspicion timeout, so that an answer can still arrive in time. Every notice is a
    /// round trip that refutes the suspicion, so each one left cuts the odds that an alive
    /// member is declared down for lost packets alone.
    pub fn suspicion_notices(&self) -> u8 {
        let rounds = self.suspicion_timeout.as_nanos() / self.gossip_interval().as_nanos().max(1);
        rounds.saturating_sub(1).clamp(1, u128::from(u8::MAX)) as u8
    }

    pub fn foca_config(&self, cluster_size: usize) -> Config {
        let fanout = NonZeroUsize::new(self.gossip_nodes).unwrap_or(NonZeroUsize::MIN);
        Config {
            probe_period: self.probe_interval,
            probe_rtt: self.probe_rtt(),
            num_indirect_probes: fanout,
            max_transmissions: max_transmissions(cluster_size),
            suspect_to_down_after: self.suspicion_timeout,
            remove_down_after: REMOVE_DOWN_AFTER,
            max_packet_size: NonZeroUsize::new(MAX_FOCA_PACKET).expect("positive"),
            notify_down_members: true,
            periodic_announce: Some(PeriodicParams {
                frequency: self.probe_interval * 6,
                num_members: NonZeroUsize::MIN,
            }),
            periodic_announce_to_down_members: Some(PeriodicParams {
                frequency: self.probe_interval * 13,
                num_members: NonZeroUsize::new(2).expect("positive"),
            }),
            periodic_gossip: Some(PeriodicParams {
                frequency: self.gossip_interval(),
                num_members: fanout,
            }),
        }
    }

    /// Time between push/pull syncs: the base interval up to 32 nodes, then one interval
    /// more per doubling, so a large cluster's total sync traffic grows slowly.
    pub fn push_pull_period(&self, cluster_size: usize) -> Duration {
        const THRESHOLD: f64 = 32.0;
        let n = cluster_size as f64;
        if n <= THRESHOLD {
            return self.push_pull_interval;
        }
        let multiplier = (n.log2() - THRESHOLD.log2()).ceil() + 1.0;
        self.push_pull_interval.mul_f64(multiplier)
    }

    /// Worst case from a crash until every survivor has declared the crashed node down,
    /// without counting on gossip: each survivor probes every member at least once in
    /// 2(N−1)−1 probe periods (a shuffled round-robin), notices the failure at its next
    /// probe tick and declares it down `suspicionTimeout` later. Gossip usually makes it
    /// much faster; see docs/swim.md.
    pub fn detection_bound(&self, cluster_size: usize) -> Duration {
        let members = cluster_size.saturating_sub(1).max(1) as u32;
        self.probe_interval * (2 * members) + self.suspicion_timeout
    }
}

/// Retransmissions per update: 4·ceil(log10(N+1)), at least 1 and at most 255, so an
/// update outlives the O(log N) rounds it needs to reach everyone.
pub fn max_transmissions(cluster_size: usize) -> NonZeroU8 {
    let scale = ((cluster_size as f64) + 1.0).log10().ceil().max(1.0);
    let value = (4.0 * scale).min(255.0) as u8;
    NonZeroU8::new(value).unwrap_or(NonZeroU8::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_spec() {
        let config = SwimConfig::default();
        config.validate().unwrap();
        let foca = config.foca_config(5);
        assert_eq!(foca.probe_period, Duration::from_secs(5));
        assert_eq!(foca.probe_rtt, Duration::from_millis(2500));
        assert_eq!(foca.suspect_to_down_after, Duration::from_secs(10));
        assert_eq!(foca.num_indirect_probes.get(), 3);
        assert_eq!(
            foca.periodic_gossip.unwrap().frequency,
            Duration::from_secs(1)
        );
        assert_eq!(foca.max_packet_size.get(), 1268);
    }

    #[test]
    fn suspicion_notices_fill_the_suspicion_timeout() {
        assert_eq!(SwimConfig::default().suspicion_notices(), 9);
        let tight = SwimConfig {
            suspicion_timeout: Duration::from_millis(500),
            ..SwimConfig::default()
        };
        assert_eq!(tight.suspicion_notices(), 1);
    }

    #[test]
    fn retransmissions_scale_with_log_n() {
        let values: Vec<u8> = [1, 9, 10, 99, 100, 999, 1000, 10_000]
            .into_iter()
            .map(|n| max_transmissions(n).get())
            .collect();
        assert_eq!(values, [4, 4, 8, 8, 12, 12, 16, 20]);
    }

    #[test]
    fn push_pull_slows_down_above_32_nodes() {
        let config = SwimConfig::default();
        assert_eq!(config.push_pull_period(32), Duration::from_secs(30));
        assert_eq!(config.push_pull_period(64), Duration::from_secs(60));
        assert_eq!(config.push_pull_period(65), Duration::from_secs(90));
    }

    #[test]
    fn detection_bound_is_documented_formula() {
        let config = SwimConfig {
            probe_interval: Duration::from_millis(300),
            suspicion_timeout: Duration::from_secs(1),
            ..SwimConfig::default()
        };
        assert_eq!(config.detection_bound(5), Duration::from_millis(3400));
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = SwimConfig {
            gossip_nodes: 0,
            ..SwimConfig::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("gossipNodes"));
        let bad = SwimConfig {
            probe_interval: Duration::from_millis(1),
            ..SwimConfig::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("probeInterval"));
        let bad = SwimConfig {
            push_pull_interval: Duration::from_secs(1),
            ..SwimConfig::default()
        };
        assert!(bad.validate().unwrap_err().0.contains("pushPullInterval"));
    }

    #[test]
    fn foca_accepts_retuning() {
        let config = SwimConfig::default();
        let mut foca = foca::Foca::new(
            crate::identity::NodeId::placeholder("127.0.0.1:1".parse().unwrap()),
            config.foca_config(1),
            <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1),
            crate::wire::WireCodec::default(),
        );
        foca.set_config(config.foca_config(1000)).unwrap();
    }
}
