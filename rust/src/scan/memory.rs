//! The values of Kineto's `[memory]` instants, for the memory counters of
//! `traceconv.readers.chrome.kineto` (`_MemoryEvents.add_values`): a batch's rows read in one call,
//! without a Python object per row.
//!
//! Only the common shape is read here, as PyTorch writes it: an object whose "Device Type" and
//! "Device Id" are integers (or absent) and whose "Total Allocated", "Total Reserved" and "Bytes"
//! are numbers (or absent).  Anything else in any row of the batch -- a null, a string, a duplicate
//! key, a number beyond a double or an integer beyond 64 bits, a row that is not an object -- and
//! the call declines (returns None): the reader then takes its Python way for the batch, which
//! reads every shape (and is what the tests compare this with).

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::nest::{column, same_length, Column};

/// A key's raw value, or None when the key is absent (a JSON null is a value: it declines).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct MemoryArgs<'a> {
    #[serde(rename = "Device Type", borrow, default, deserialize_with = "present")]
    dtype: Option<&'a RawValue>,
    #[serde(rename = "Device Id", borrow, default, deserialize_with = "present")]
    did: Option<&'a RawValue>,
    #[serde(rename = "Total Allocated", borrow, default, deserialize_with = "present")]
    total: Option<&'a RawValue>,
    #[serde(rename = "Total Reserved", borrow, default, deserialize_with = "present")]
    reserved: Option<&'a RawValue>,
    #[serde(rename = "Bytes", borrow, default, deserialize_with = "present")]
    nbytes: Option<&'a RawValue>,
}

/// A value's text if it is a number, and whether it is written as an integer (no fraction nor
/// exponent).
fn number(raw: &RawValue) -> Option<(&str, bool)> {
    let t = raw.get();
    t.starts_with(|c: char| c == '-' || c.is_ascii_digit())
        .then(|| (t, !t.contains(['.', 'e', 'E'])))
}

/// A JSON integer's value as Python's ``int`` reads it, within 64 bits (None: not an integer).
fn integer(raw: &RawValue) -> Option<i64> {
    let (t, whole) = number(raw)?;
    whole.then(|| t.parse().ok()).flatten()
}

/// A JSON number as the double Python's ``float`` makes of it (NaN: the key is absent; None: not
/// a number, or one this path leaves to Python: beyond a double, an integer beyond 64 bits).
fn double(raw: Option<&RawValue>) -> Option<f64> {
    let Some(raw) = raw else {
        return Some(f64::NAN);
    };
    let (t, whole) = number(raw)?;
    if !whole {
        // Rust's parse rounds correctly, as Python's float() does
        return t.parse::<f64>().ok().filter(|v| v.is_finite());
    }
    // an integer: to the nearest double, ties to even, as float(int) does
    if let Ok(v) = t.parse::<i64>() {
        return Some(v as f64);
    }
    t.parse::<u64>().ok().map(|v| v as f64)
}

type Place = (Option<i64>, Option<i64>, i64);

/// memory_values(args, lens, rows, pid) -> None | (places, place, total, reserved, nbytes).
///
/// ``args`` and ``lens`` are a batch's instants' args texts back to back and each one's length (as
/// ``split`` gives them), ``rows`` the instants to read (ascending), ``pid`` every instant's pid.
/// ``places`` are the distinct (Device Type, Device Id, pid) of the rows in the order first seen
/// (None: the key is absent), ``place`` each row's index in it (int32), the three values doubles
/// (NaN: absent).  None: a row is not of the common shape (see the module's doc).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(super) fn memory_values<'py>(
    py: Python<'py>,
    args: Column<'py, u8>,
    lens: Column<'py, i64>,
    rows: Column<'py, i64>,
    pid: Column<'py, i64>,
) -> PyResult<
    Option<(
        Vec<Place>,
        Bound<'py, PyArray1<i32>>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray1<f64>>,
        Bound<'py, PyArray1<f64>>,
    )>,
> {
    let (args, lens, rows, pid) = (column(&args), column(&lens), column(&rows), column(&pid));
    same_length("memory_values", &[lens.len(), pid.len()])?;
    // with the GIL held: a batch takes ~50 µs, less than taking the GIL back from the scanning
    // threads after letting it go would
    let read = (|| {
        let n = rows.len();
        let (mut place, mut total, mut reserved, mut nbytes) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut places: Vec<Place> = Vec::new();
        let mut seen: FxHashMap<Place, i32> = FxHashMap::default();
        let (mut at, mut next) = (0usize, 0usize); // args offset of instant `next`
        for &r in rows.iter() {
            let r = usize::try_from(r).ok().filter(|&r| r < lens.len() && r >= next)?;
            for &l in &lens[next..r] {
                at = at.checked_add(usize::try_from(l).ok()?)?;
            }
            let len = usize::try_from(lens[r]).ok()?;
            let text = args.get(at..at.checked_add(len)?)?;
            at += len;
            next = r + 1;
            if text.first() != Some(&b'{') {
                return None; // (serde would read an array as the fields in order)
            }
            let a: MemoryArgs = serde_json::from_str(std::str::from_utf8(text).ok()?).ok()?;
            let dtype = match a.dtype {
                Some(v) => Some(integer(v)?),
                None => None,
            };
            let did = match a.did {
                Some(v) => Some(integer(v)?),
                None => None,
            };
            total.push(double(a.total)?);
            reserved.push(double(a.reserved)?);
            nbytes.push(double(a.nbytes)?);
            let key = (dtype, did, pid[r]);
            let k = *seen.entry(key).or_insert_with(|| {
                places.push(key);
                (places.len() - 1) as i32
            });
            place.push(k);
        }
        Some((places, place, total, reserved, nbytes))
    })();
    Ok(read.map(|(places, place, total, reserved, nbytes)| {
        (
            places,
            place.into_pyarray(py),
            total.into_pyarray(py),
            reserved.into_pyarray(py),
            nbytes.into_pyarray(py),
        )
    }))
}
