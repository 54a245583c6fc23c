//! Grid's SWIM transport core: pure Rust, no Python.
//!
//! The modules form layers, each folder one layer; a layer uses those listed before it and
//! never one listed after it (tests/module_cycles.rs fails on any circle among the modules
//! or the layers):
//!
//! - [`reader`]: the bounds-checked decoding cursor and its error, under every decoder.
//! - [`identity`]: identity and auth: who a node is (site, address, generation) and who
//!   may speak as a site ([`identity::auth`]: credentials, signatures, replay windows).
//! - [`wire`]: wire and frames: the AES-256-GCM UDP frame and the keyring
//!   ([`wire::frame`]), our message kinds inside a frame and foca's codec, the signed
//!   session every message passes ([`wire::session`]), and the protocol versions a node
//!   speaks ([`wire::versions`]).
//! - [`lanes`]: the item store: versioned broadcast items on four lanes, how they are named
//!   ([`lanes::names`]), the relay queue that hands them to foca ([`lanes::relay`]) and the
//!   digests that repair what push gossip missed ([`lanes::repair`]).
//! - [`driver`]: the SWIM driver: the sans-IO driver around foca, its timer queue
//!   ([`driver::timers`]), `GridNetwork.spec.swim` mapped onto foca ([`driver::config`]),
//!   and a real node running it on its own thread with a UDP socket ([`driver::node`]).
//! - [`sim`]: the simulator: many drivers on one virtual clock over an in-memory network.
//!
//! Beside the layers, for the routing overlay (no SWIM module uses them, nor they any):
//!
//! - [`canonical`]: RFC 8785 canonical JSON and compact JSON.
//! - [`fnv`]: FNV-1a, for the overlay's `stable_id`.
//! - [`rounding`]: Python's `round(x, n)`, for the overlay's score breakdown.

pub mod canonical;
pub mod driver;
pub mod fnv;
pub mod identity;
pub mod lanes;
pub mod reader;
pub mod rounding;
pub mod sim;
pub mod wire;
