//! The simulated network: where node `i` lives, how long a message takes, whether it is
//! lost, and the errors a scenario step can run into.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use rand::Rng;

use crate::driver::config::ConfigError;
use crate::lanes::PublishError;

/// Every simulated node listens on this port; node `i` has the loopback address
/// `127.x.y.z` that encodes `i + 1`.
pub const SIM_PORT: u16 = 7946;
/// Nodes a simulation may hold (addresses stay below `127.255.255.255`, the phantom peer
/// that hands converged clusters their member lists).
pub const MAX_NODES: usize = 1 << 20;

/// Node `index`'s address.
pub fn node_addr(index: u32) -> SocketAddr {
    let n = index + 1;
    let ip = Ipv4Addr::new(127, (n >> 16) as u8, (n >> 8) as u8, n as u8);
    SocketAddr::V4(SocketAddrV4::new(ip, SIM_PORT))
}

/// The node an address belongs to, if it is a simulated node's address at all.
pub fn node_index(addr: SocketAddr) -> Option<u32> {
    let SocketAddr::V4(v4) = addr else {
        return None;
    };
    let [first, a, b, c] = v4.ip().octets();
    if first != 127 || v4.port() != SIM_PORT {
        return None;
    }
    let n = (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c);
    let index = n.checked_sub(1)?;
    (usize::try_from(index).ok()? < MAX_NODES).then_some(index)
}

/// The address of the peer that hands out member lists when a converged cluster is set
/// up; it is never a node.
pub fn phantom_addr() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(127, 255, 255, 255),
        SIM_PORT,
    ))
}

/// Extra delay on top of the fixed one, drawn per message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    None,
    /// Uniform in `[0, max]`.
    Uniform(Duration),
    /// Exponential with this mean (a long tail: the occasional very late message).
    Exponential(Duration),
}

/// How every link behaves unless told otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct NetModel {
    /// The fixed one-way delay. It is also the simulator's lookahead: nothing a node does
    /// can reach another node sooner, so nodes advance independently within this span.
    pub delay: Duration,
    pub jitter: Jitter,
    /// Probability that a message is lost, independently per message.
    pub loss: f64,
}

impl Default for NetModel {
    /// Sites spread over the zones of a region: 5 ms plus an exponential tail averaging
    /// 5 ms (median about 8.5 ms, 99th percentile about 28 ms), no loss.
    fn default() -> NetModel {
        NetModel {
            delay: Duration::from_millis(5),
            jitter: Jitter::Exponential(Duration::from_millis(5)),
            loss: 0.0,
        }
    }
}

/// The smallest fixed delay: below it the simulator would advance in slivers.
pub const MIN_DELAY: Duration = Duration::from_micros(10);
/// The largest fixed delay or jitter.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

impl NetModel {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.delay < MIN_DELAY || self.delay > MAX_DELAY {
            return Err(SimError::BadDelay {
                what: "delay",
                value: self.delay,
            });
        }
        match self.jitter {
            Jitter::None => {}
            Jitter::Uniform(d) | Jitter::Exponential(d) if d <= MAX_DELAY => {}
            Jitter::Uniform(d) | Jitter::Exponential(d) => {
                return Err(SimError::BadDelay {
                    what: "jitter",
                    value: d,
                })
            }
        }
        check_probability("loss", self.loss)
    }

    /// One message's one-way delay.
    pub fn sample_delay(&self, rng: &mut impl Rng) -> Duration {
        let extra = match self.jitter {
            Jitter::None => Duration::ZERO,
            Jitter::Uniform(max) if max.is_zero() => Duration::ZERO,
            Jitter::Uniform(max) => {
                Duration::from_nanos(rng.random_range(0..=max.as_nanos() as u64))
            }
            Jitter::Exponential(mean) => {
                let u: f64 = rng.random();
                // u is in [0, 1), so 1 - u is never 0.
                let draw = -(1.0 - u).ln() * mean.as_secs_f64();
                Duration::from_secs_f64(draw.min(MAX_DELAY.as_secs_f64()))
            }
        };
        self.delay + extra
    }
}

pub fn check_probability(what: &'static str, value: f64) -> Result<(), SimError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(SimError::BadProbability { what, value })
    }
}

/// A scenario step or setting that was refused; nothing was changed.
#[derive(Clone, Debug, PartialEq)]
pub enum SimError {
    Config(ConfigError),
    TooManyNodes(usize),
    UnknownNode(u32),
    /// The step needs a running node (join, leave, slow down) and this one has crashed or
    /// left.
    NotRunning(u32),
    /// A restart of a node that is still running.
    StillRunning(u32),
    NodeInTwoGroups(u32),
    BadProbability {
        what: &'static str,
        value: f64,
    },
    BadDelay {
        what: &'static str,
        value: Duration,
    },
    TimeInPast {
        requested: Duration,
        now: Duration,
    },
    /// A node's driver refused to publish an item.
    Publish(PublishError),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(err) => write!(f, "{err}"),
            SimError::TooManyNodes(n) => {
                write!(
                    f,
                    "a simulation holds at most {MAX_NODES} nodes, asked for {n}"
                )
            }
            SimError::UnknownNode(i) => write!(f, "no node {i} in this simulation"),
            SimError::NotRunning(i) => write!(f, "node {i} is not running (crashed or left)"),
            SimError::StillRunning(i) => {
                write!(
                    f,
                    "node {i} is still running; crash it before restarting it"
                )
            }
            SimError::NodeInTwoGroups(i) => write!(f, "node {i} is listed in two groups"),
            SimError::BadProbability { what, value } => {
                write!(
                    f,
                    "{what} must be a probability between 0 and 1, got {value}"
                )
            }
            SimError::BadDelay { what, value } => write!(
                f,
                "{what} must be between {MIN_DELAY:?} and {MAX_DELAY:?}, got {value:?}"
            ),
            SimError::TimeInPast { requested, now } => write!(
                f,
                "cannot run until {:.6} s: the simulation is already at {:.6} s",
                requested.as_secs_f64(),
                now.as_secs_f64()
            ),
            SimError::Publish(err) => write!(f, "publish refused: {err}"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<ConfigError> for SimError {
    fn from(err: ConfigError) -> SimError {
        SimError::Config(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn addresses_round_trip() {
        for index in [0, 1, 254, 255, 256, 65_535, 65_536, (MAX_NODES - 1) as u32] {
            let addr = node_addr(index);
            assert!(addr.ip().is_loopback());
            assert_eq!(node_index(addr), Some(index));
        }
        assert_eq!(node_index(phantom_addr()), None);
        assert_eq!(node_index("127.0.0.0:7946".parse().unwrap()), None);
        assert_eq!(node_index("127.0.0.1:7947".parse().unwrap()), None);
        assert_eq!(node_index("10.0.0.1:7946".parse().unwrap()), None);
        assert_eq!(node_index("[::1]:7946".parse().unwrap()), None);
    }

    #[test]
    fn delays_stay_in_range() {
        let mut rng = SmallRng::seed_from_u64(3);
        let uniform = NetModel {
            delay: Duration::from_millis(2),
            jitter: Jitter::Uniform(Duration::from_millis(1)),
            loss: 0.0,
        };
        let exponential = NetModel {
            jitter: Jitter::Exponential(Duration::from_millis(1)),
            ..uniform.clone()
        };
        let mut total = Duration::ZERO;
        for _ in 0..10_000 {
            let d = uniform.sample_delay(&mut rng);
            assert!(d >= Duration::from_millis(2) && d <= Duration::from_millis(3));
            let e = exponential.sample_delay(&mut rng);
            assert!(e >= Duration::from_millis(2));
            total += e - Duration::from_millis(2);
        }
        let mean = total.as_secs_f64() / 10_000.0;
        assert!((0.0009..0.0011).contains(&mean), "{mean}");
    }

    #[test]
    fn bad_models_are_named() {
        let model = NetModel {
            loss: 1.5,
            ..NetModel::default()
        };
        assert!(model.validate().unwrap_err().to_string().contains("loss"));
        let model = NetModel {
            delay: Duration::ZERO,
            ..NetModel::default()
        };
        assert!(model.validate().unwrap_err().to_string().contains("delay"));
        let model = NetModel {
            jitter: Jitter::Uniform(Duration::from_secs(61)),
            ..NetModel::default()
        };
        assert!(model.validate().unwrap_err().to_string().contains("jitter"));
        assert!(check_probability("p", f64::NAN).is_err());
    }
}
