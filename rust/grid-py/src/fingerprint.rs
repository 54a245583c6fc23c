//! The overlay candidate's `stable_id` and the FNV-1a hash behind it.

use pyo3::prelude::*;

/// FNV-1a, 32 bits, over `data`.
#[pyfunction]
fn fnv1a_32(data: &[u8]) -> u32 {
    grid_core::fnv::fnv1a_32([data])
}

/// FNV-1a 32 over the UTF-8 of `kind/name/site/cluster`, as 8 lowercase hex digits.
#[pyfunction]
fn stable_id(kind: &str, name: &str, site: &str, cluster: &str) -> String {
    grid_core::fnv::stable_id(kind, name, site, cluster)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fnv1a_32, m)?)?;
    m.add_function(wrap_pyfunction!(stable_id, m)?)?;
    Ok(())
}
