//! Score breakdowns for many candidates at once: each signal times its weight rounded to
//! `decimals` places, then the rounded sum of those rounded contributions, as
//! `grid.scoring.signals.score_breakdown` computes them (the reference the tests compare
//! this with, value for value).

use grid_core::rounding::round_decimals;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyTuple};

/// `round(value, decimals)`: the fast exact path, or Python's own `round` where it does
/// not apply.
fn round_like_python(py: Python<'_>, value: f64, decimals: i32) -> PyResult<f64> {
    match round_decimals(value, decimals) {
        Some(rounded) => Ok(rounded),
        None => py
            .import("builtins")?
            .getattr("round")?
            .call1((value, decimals))?
            .extract(),
    }
}

/// One dict per row, `names` (one more than the signals: the last is the total) mapping
/// to the rounded contributions and their rounded sum, in that order.
#[pyfunction]
fn score_breakdowns<'py>(
    py: Python<'py>,
    signals: Vec<Vec<f64>>,
    weights: Vec<Vec<f64>>,
    decimals: i32,
    names: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyList>> {
    if signals.len() != weights.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{} rows of signals but {} of weights",
            signals.len(),
            weights.len()
        )));
    }
    let names: Vec<Bound<'py, PyAny>> = names.iter().collect();
    let breakdowns = PyList::empty(py);
    for (row, (signals, weights)) in signals.iter().zip(&weights).enumerate() {
        if signals.len() != weights.len() || signals.len() + 1 != names.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "row {row}: {} signals and {} weights for {} names (signals, then the total)",
                signals.len(),
                weights.len(),
                names.len()
            )));
        }
        let breakdown = PyDict::new(py);
        // Summed left to right from the first contribution, as Python's `a + b + ...`.
        let mut total: Option<f64> = None;
        for ((signal, weight), name) in signals.iter().zip(weights).zip(&names) {
            let contribution = round_like_python(py, signal * weight, decimals)?;
            total = Some(total.map_or(contribution, |sum| sum + contribution));
            breakdown.set_item(name, PyFloat::new(py, contribution))?;
        }
        let total = round_like_python(py, total.unwrap_or(0.0), decimals)?;
        breakdown.set_item(&names[signals.len()], PyFloat::new(py, total))?;
        breakdowns.append(breakdown)?;
    }
    Ok(breakdowns)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(score_breakdowns, m)?)?;
    Ok(())
}
