//! `grid._native`: the thin PyO3 face of `grid-core`. Exceptions are defined in
//! `grid/errors.py` and raised from here.

use pyo3::prelude::*;

mod errors;
mod frame;
mod sim;
mod swim;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    frame::register(m)?;
    swim::register(m)?;
    sim::register(m)?;
    Ok(())
}
