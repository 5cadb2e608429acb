//! traceconv's compiled core: the hot paths (reading big Chrome/Kineto JSON into the model's
//! columns, flows, nesting, Perfetto and Chrome JSON encoding) behind the Python package's API.
//! Each piece is a module of its own, exposed to Python as `traceconv._core.<name>`.

use pyo3::prelude::*;

mod encode;
mod flows;
mod nest;
mod readback;
mod scan;
mod stacks;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // rust-numpy fetches NumPy's C API on first use, running Python code (its version check), and
    // panics if that raises: done here, while the module loads (`traceconv._native` loads it with
    // the stop signals held), so that a signal handler raising during a later kernel call cannot
    // land in it
    let _ = numpy::PyArray1::<u8>::zeros(m.py(), 0, false);
    nest::register(m)?;
    flows::register(m)?;
    scan::register(m)?;
    encode::register(m)?;
    readback::register(m)?;
    stacks::register(m)?;
    Ok(())
}
