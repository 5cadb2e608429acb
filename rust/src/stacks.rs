//! Begin/end pairs into slices, for `traceconv.readers.chrome.stacks`: the `B`/`E` events of a
//! thread (and MXNet's `b`/`e`), the async `b`/`e` and `S`/`F` of an id, the `(`/`)` of a frame
//! track -- every event that opens or closes a slice on a stack of its own.
//!
//! The rule is Perfetto's JSON importer's, as the Python reader stated it before it was moved
//! here (the property tests in `tests/test_stacks.py` keep that statement as a reference):
//! events are taken in time order (the input order on a tie); a begin is pushed on its stack; an
//! end closes the innermost open slice of its stack with the same name and category (an end
//! without a name or category matches any), first ending every slice opened above it at the same
//! time (cut short); an end that matches none is not used; what is still open at the end of the
//! trace ends there (or at its own start, if later).

use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::nest::{column, same_length, Column};

/// The pairs, in the order the slices are closed.
#[derive(Default)]
struct Pairs {
    /// the begin's row
    begin: Vec<i64>,
    /// the end's row; -1 for a slice cut short or left open
    end: Vec<i64>,
    end_ts: Vec<i64>,
    /// the input position of the event that closed it (`never` for one left open)
    end_seq: Vec<i64>,
    unmatched_end: i64,
    cut_short: i64,
    left_open: i64,
}

impl Pairs {
    fn close(&mut self, begin: usize, end: i64, end_ts: i64, end_seq: i64) {
        self.begin.push(begin as i64);
        self.end.push(end);
        self.end_ts.push(end_ts);
        self.end_seq.push(end_seq);
    }
}

/// The matching loop (see the module's docs); `key` numbers the stacks from 0.
#[allow(clippy::too_many_arguments)]
fn match_kernel(
    ts: &[i64],
    seq: &[i64],
    kind: &[u8],
    key: &[i32],
    name: &[i32],
    cat: &[i32],
    last: i64,
    never: i64,
) -> Result<Pairs, String> {
    let n = ts.len();
    let nkeys = match key.iter().copied().max() {
        Some(k) if key.iter().all(|&k| k >= 0) => k as usize + 1,
        Some(_) => return Err("match: a stack key is negative".into()),
        None => 0,
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&r| (ts[r], seq[r])); // (stable)
    let mut stacks: Vec<Vec<usize>> = vec![Vec::new(); nkeys];
    // the stacks in the order they were first met, as the Python reader's dict of stacks had them
    let mut met: Vec<usize> = Vec::new();
    let mut seen = vec![false; nkeys];
    let mut out = Pairs::default();
    for &r in &order {
        let k = key[r] as usize;
        if !seen[k] {
            seen[k] = true;
            met.push(k);
        }
        let stack = &mut stacks[k];
        if kind[r] == 0 {
            stack.push(r);
            continue;
        }
        let (nm, ct) = (name[r], cat[r]);
        let Some(at) = stack
            .iter()
            .rposition(|&b| (nm == 0 || name[b] == nm) && (ct == 0 || cat[b] == ct))
        else {
            out.unmatched_end += 1;
            continue;
        };
        while stack.len() > at + 1 {
            if let Some(b) = stack.pop() {
                out.close(b, -1, ts[r], seq[r]);
                out.cut_short += 1;
            }
        }
        if let Some(b) = stack.pop() {
            out.close(b, r as i64, ts[r], seq[r]);
        }
    }
    for k in met {
        for &b in &stacks[k] {
            out.close(b, -1, last.max(ts[b]), never);
            out.left_open += 1;
        }
    }
    Ok(out)
}

/// match(ts, seq, kind, key, name, cat, last, never) -> dict
///
/// The slices the begins and ends make: rows given as columns (`kind` 0 for a begin, 1 for an
/// end; `key` the stack, numbered from 0; `name`/`cat` string ids, 0 for none), `last` the
/// trace's last time (where what is still open ends) and `never` the position recorded for the
/// end of such a slice.  Returns `begin`, `end` (-1: cut short or left open), `end_ts`, `end_seq`
/// (each closed slice, in the order they close) and the counts `unmatched_end`, `cut_short`,
/// `left_open`.  Runs without the GIL.
#[pyfunction(name = "match")]
#[allow(clippy::too_many_arguments)]
fn match_pairs<'py>(
    py: Python<'py>,
    ts: Column<'py, i64>,
    seq: Column<'py, i64>,
    kind: Column<'py, u8>,
    key: Column<'py, i32>,
    name: Column<'py, i32>,
    cat: Column<'py, i32>,
    last: i64,
    never: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let (ts, seq, kind) = (column(&ts), column(&seq), column(&kind));
    let (key, name, cat) = (column(&key), column(&name), column(&cat));
    same_length(
        "match",
        &[
            ts.len(),
            seq.len(),
            kind.len(),
            key.len(),
            name.len(),
            cat.len(),
        ],
    )?;
    let out = py
        .detach(|| match_kernel(&ts, &seq, &kind, &key, &name, &cat, last, never))
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    let d = PyDict::new(py);
    d.set_item("begin", out.begin.into_pyarray(py))?;
    d.set_item("end", out.end.into_pyarray(py))?;
    d.set_item("end_ts", out.end_ts.into_pyarray(py))?;
    d.set_item("end_seq", out.end_seq.into_pyarray(py))?;
    d.set_item("unmatched_end", out.unmatched_end)?;
    d.set_item("cut_short", out.cut_short)?;
    d.set_item("left_open", out.left_open)?;
    Ok(d)
}

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "stacks")?;
    m.add_function(wrap_pyfunction!(match_pairs, &m)?)?;
    core.add_submodule(&m)
}
