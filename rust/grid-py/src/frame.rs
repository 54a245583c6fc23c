use std::sync::RwLock;

use grid_core::wire::frame::{Keyring as CoreKeyring, KeyringError, OVERHEAD};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{FrameDropped, InvalidKeyError};

/// A SWIM keyring: the primary key seals, every key opens.
#[pyclass(frozen, module = "grid._native")]
pub struct Keyring {
    inner: RwLock<CoreKeyring>,
}

pub fn keyring_error(err: KeyringError) -> PyErr {
    InvalidKeyError::new_err(err.to_string())
}

impl Keyring {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, CoreKeyring> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CoreKeyring> {
        self.inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl Keyring {
    #[new]
    #[pyo3(signature = (primary, others = Vec::new()))]
    fn new(primary: &[u8], others: Vec<Vec<u8>>) -> PyResult<Self> {
        let others: Vec<&[u8]> = others.iter().map(Vec::as_slice).collect();
        let ring = CoreKeyring::new(primary, &others).map_err(keyring_error)?;
        Ok(Keyring {
            inner: RwLock::new(ring),
        })
    }

    /// Adds a key that may open frames; returns its public id.
    fn install(&self, key: &[u8]) -> PyResult<String> {
        self.write()
            .install(key)
            .map(|id| id.to_hex())
            .map_err(keyring_error)
    }

    /// Makes an installed key the one that seals.
    fn use_key(&self, key: &[u8]) -> PyResult<()> {
        self.write().use_key(key).map_err(keyring_error)
    }

    fn remove(&self, key: &[u8]) -> PyResult<()> {
        self.write().remove(key).map_err(keyring_error)
    }

    /// Public ids of the keys, primary first.
    fn key_ids(&self) -> Vec<String> {
        self.read()
            .key_ids()
            .into_iter()
            .map(|id| id.to_hex())
            .collect()
    }

    fn seal<'py>(&self, py: Python<'py>, plaintext: &[u8]) -> Bound<'py, PyBytes> {
        let ring = self.read();
        PyBytes::new_with(py, plaintext.len() + OVERHEAD, |buf| {
            let mut out = Vec::with_capacity(buf.len());
            ring.seal_into(plaintext, &mut out);
            buf.copy_from_slice(&out);
            Ok(())
        })
        .expect("writing into a fresh bytes object cannot fail")
    }

    /// Opens a frame or raises `FrameDropped` whose `reason` is one of `too_short`,
    /// `bad_magic`, `unknown_version`, `auth_failed`.
    fn open<'py>(&self, py: Python<'py>, frame: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let mut scratch = Vec::with_capacity(frame.len());
        match self.read().open_into(frame, &mut scratch) {
            Ok(()) => Ok(PyBytes::new(py, &scratch)),
            Err(reason) => Err(FrameDropped::new_err(reason.as_str())),
        }
    }

    fn __repr__(&self) -> String {
        format!("Keyring(key_ids={:?})", self.key_ids())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Keyring>()?;
    m.add("FRAME_OVERHEAD", OVERHEAD)?;
    m.add("KEY_LEN", grid_core::wire::frame::KEY_LEN)?;
    m.add("MAX_FRAME_LEN", grid_core::wire::frame::MAX_FRAME_LEN)?;
    Ok(())
}
