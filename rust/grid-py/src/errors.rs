//! Python exceptions, defined in `grid.errors` and raised from Rust.

use pyo3::import_exception;

import_exception!(grid.errors, InvalidKeyError);
import_exception!(grid.errors, FrameDropped);
import_exception!(grid.errors, SwimConfigError);
import_exception!(grid.errors, BindError);
import_exception!(grid.errors, BroadcastRefused);
import_exception!(grid.errors, PayloadTooLarge);
import_exception!(grid.errors, PrivateKeyMaterial);
import_exception!(grid.errors, NodeStateError);
import_exception!(grid.errors, NodeStopped);
import_exception!(grid.errors, SiteCredentialsError);
import_exception!(grid.errors, CanonicalJsonError);
