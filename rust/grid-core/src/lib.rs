//! Grid's SWIM transport core: pure Rust, no Python.
//!
//! - [`frame`]: the AES-256-GCM UDP frame and the keyring.

pub mod frame;
