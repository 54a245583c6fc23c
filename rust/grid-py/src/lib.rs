//! `grid._native`: the thin PyO3 face of `grid-core`. Exceptions are defined in
//! `grid/errors.py` and raised from here.

use pyo3::prelude::*;

mod breakdown;
mod canonical;
mod errors;
mod fingerprint;
mod frame;
mod sim;
mod sim_state;
mod swim;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    breakdown::register(m)?;
    canonical::register(m)?;
    fingerprint::register(m)?;
    frame::register(m)?;
    swim::register(m)?;
    sim::register(m)?;
    sim_state::register(m)?;
    Ok(())
}
