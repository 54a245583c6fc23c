//! Grid's SWIM transport core: pure Rust, no Python.
//!
//! - [`frame`]: the AES-256-GCM UDP frame and the keyring.
//! - [`wire`]: our message kinds inside a frame, and foca's codec.
//! - [`reader`]: the bounds-checked decoding cursor and its error, under both [`wire`] and
//!   [`identity`].
//! - [`identity`]: who a node is (site, address, generation).
//! - [`lanes`]: versioned broadcast items on four lanes.
//! - [`names`]: how an item is named (lane, name, backlog key), under [`lanes`], [`relay`]
//!   and [`repair`] alike.
//! - [`relay`]: the items waiting to be gossiped, handed to foca a few at a time.
//! - [`repair`]: digests of recent item versions, so members send each other what push
//!   gossip missed.
//! - [`config`]: `GridNetwork.spec.swim` mapped onto foca.
//! - [`timers`]: the single ordered timer queue.
//! - [`versions`]: the protocol versions a node speaks and announces in its `HELLO`.
//! - [`driver`]: the sans-IO driver around foca (also used by simulations).
//! - [`node`]: a real node: the driver on its own thread with a UDP socket.
//! - [`canonical`]: RFC 8785 canonical JSON and compact JSON for the routing overlay.
//! - [`fnv`]: FNV-1a, for the overlay's `stable_id`.
//! - [`rounding`]: Python's `round(x, n)`, for the overlay's score breakdown.

pub mod auth;
pub mod canonical;
pub mod config;
pub mod driver;
pub mod fnv;
pub mod frame;
pub mod identity;
pub mod lanes;
pub mod names;
pub mod node;
pub mod reader;
pub mod relay;
pub mod repair;
pub mod rounding;
pub mod session;
pub mod sim;
pub mod timers;
pub mod versions;
pub mod wire;
