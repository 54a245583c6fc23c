//! Python exceptions, defined in `grid.errors` and raised from Rust.

use pyo3::import_exception;

import_exception!(grid.errors, InvalidKeyError);
import_exception!(grid.errors, FrameDropped);
