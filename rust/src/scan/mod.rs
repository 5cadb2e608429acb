//! The event scanner, for `traceconv.readers.chrome.reader`: the text of a Chrome/Kineto `traceEvents`
//! array, a block at a time, into columns (phase, name and category ids, `ts`/`dur` as exact ns,
//! `pid`/`tid`/`id`, the `s` and `bp` letters, the args object without the whitespace between its
//! tokens) and a string-interning table.
//!
//! serde_json does every piece of the lexing and validating.  Each event is read by a
//! `StreamDeserializer` (which says where the event ends) through a visitor that fills the row
//! as the members come: keys as borrowed strings (serde_json lends a `&str` only when there is
//! no escape), name/cat/ph/s/bp as borrowed strings, other values (the args object included,
//! whole, however deep) as `&RawValue` text.  The code here only
//!
//! * skips the whitespace and commas between the array's events and keeps the block-boundary
//!   bookkeeping (an event cut by the end of a block: `MORE`, scanned again with the next block;
//!   a block's UTF-8 is checked once, then serde_json reads it as `&str`);
//! * classifies tokens serde_json has already validated, in one pass over a value's text
//!   ([`walk`]): a string token holds a `\u` escape, a number token has an exponent or is long,
//!   containers nest too deep; the same pass copies the args object without the whitespace
//!   between its tokens (every token keeps its own spelling);
//! * turns a number token's digits into exact integer ns (µs with up to 3 decimals, no float on
//!   the way).
//!
//! (Reading the args member by member as `&RawValue`, each nested container again one level at
//! a time, cost a serde_json pass per nesting level, with Kineto's `"Input Dims": [[..], [..]]`
//! three; and keeping the members in a list to walk again after the event: together ~22 % of
//! the instructions, 1.10 -> 0.81 s CPU on the bench's 1M-event trace.)
//!
//! An event of the plain shape gets its columns filled; any other shape is marked `SLOW` (and
//! decoded from its own text by the Python reader's general decoder): a field of another type, an
//! id past 64 bits (one past int64, up to 2^64 - 1, is kept as its bits and flagged: `F_*_U64`),
//! an escape in a key or a name, `ts` with an exponent or more than three decimals, args holding
//! `\u` escapes, exponents or numbers of 100+ characters, a repeated or rare key (`id2`), a
//! `bind_id` other than an int64, a `flow_in`/`flow_out` other than `true`/`false`.  Nothing is
//! dropped and nothing is guessed.  Containers nested more than [`MAX_DEPTH`] levels inside a value
//! stop the scan with `BAD` (the Python reader's whole-document path reads such a file, turning
//! deep values into strings).
//!
//! The rules are those of the numba scanner this replaces (`traceconv/fast/jsonscan.py` before
//! it was removed); `tests/test_scan.py` keeps a pure-Python reference of them and compares.
//! Nothing here panics on any input (every index is checked first, no unwrap): bad text is a
//! status, bad arguments a ValueError.
//!
//! Beside the scanner (here):
//!
//! * `rows.rs`: the two steps the reader takes with each batch of rows: [`split`] sorts them into
//!   complete events, flow points and instants of the plain shape (and the rest, for the general
//!   decoder) and gathers each part's columns and args in one pass, and [`Pairs`] numbers their
//!   (pid, tid) pairs.  Both replaced NumPy masks and gathers (~40 array operations and an
//!   `np.unique` per batch) that cost the reading thread more than the scan itself saved it; the
//!   NumPy statement of `split` is `split_reference` in `tests/test_scan.py`.
//! * `text.rs`: what the stream and the whole-document reader ask of the text around the event
//!   array (UTF-8, where whitespace and a header value end, containers nested too deep).

use indexmap::IndexSet;
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rustc_hash::FxBuildHasher;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::fmt;
use std::sync::Mutex;

// status returned by scan()
/// The text ended (possibly inside an event): call again from `pos` with more text.
pub const MORE: i32 = 0;
/// The array's closing `]` was read; `pos` is just after it.
pub const END: i32 = 1;
/// `cap` events were scanned: take them and call again from `pos`.
pub const FULL: i32 = 2;
/// Not the JSON of an array of objects at `pos`.
pub const BAD: i32 = -1;

// flags of a row: which fields it has; SLOW: leave the event to the general decoder
pub const F_NAME: i32 = 1;
pub const F_CAT: i32 = 1 << 1;
pub const F_TS: i32 = 1 << 2;
pub const F_DUR: i32 = 1 << 3;
pub const F_PID: i32 = 1 << 4;
pub const F_TID: i32 = 1 << 5;
pub const F_ID: i32 = 1 << 6;
pub const F_ARGS: i32 = 1 << 7;
pub const F_S: i32 = 1 << 8;
pub const F_BP: i32 = 1 << 9;
pub const F_PH: i32 = 1 << 10;
/// pid, tid, id: the value is past int64 (an unsigned 64-bit integer, MXNet's hashed ids): the
/// column holds its bits as an int64 (the value less 2^64)
pub const F_PID_U64: i32 = 1 << 11;
pub const F_TID_U64: i32 = 1 << 12;
pub const F_ID_U64: i32 = 1 << 13;
/// v2 flows: the event has `bind_id` (an int64, in the `bind` column), `flow_in`, `flow_out`
/// (`true` or `false`, in the `flow` column: 1 flow_in, 2 flow_out)
pub const F_BIND: i32 = 1 << 14;
pub const F_FLOW_IN: i32 = 1 << 16;
pub const F_FLOW_OUT: i32 = 1 << 17;
pub const SLOW: i32 = 1 << 15;

/// Containers nested deeper than this inside one value (an event's args, a header value) stop
/// the scan with `BAD`.
pub const MAX_DEPTH: u32 = 63;
/// At most this many bytes of room made for a call's args up front (more grows as needed).
const MAX_ARGS_RESERVE: usize = 64 << 20;
/// `ts`/`dur` of this many µs or more are left to the general decoder (as MAX_US in chrome.py).
const MAX_US: i64 = 4_000_000_000_000_000;

// what walk() finds in a value
const W_UESC: u32 = 2; // a string (or key) with a \u escape
const W_EXP: u32 = 8; // a number with an exponent
const W_LONG: u32 = 16; // a number of 100+ characters

// ---------------------------------------------------------------- the interning table

type Table = IndexSet<Box<str>, FxBuildHasher>;

/// Names and categories seen by the scanner, each with its id (the order it was first seen in).
/// Lives as long as a file's reading; `scan` returns the strings each call added, in id order.
#[pyclass(frozen, module = "traceconv._core.scan")]
pub struct Strings {
    table: Mutex<Table>,
}

/// The table behind `m`, even if a panic elsewhere poisoned the lock while it was held: the
/// tables here are only ever appended to (or cut back whole), so they stay consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Strings {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        lock(&self.table)
    }
}

#[pymethods]
impl Strings {
    #[new]
    fn new() -> Self {
        Strings {
            table: Mutex::new(Table::default()),
        }
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    /// The string of id `i`.
    fn get(&self, i: usize) -> PyResult<String> {
        match self.lock().get_index(i) {
            Some(s) => Ok(s.to_string()),
            None => Err(PyValueError::new_err(format!("no string of id {i}"))),
        }
    }

    /// truncate(n): forget the strings of ids n and above (a scan whose rows were not used: the
    /// reader's speculative scan of a block from a start that proved wrong).
    fn truncate(&self, n: usize) {
        self.lock().truncate(n);
    }

    /// Bytes held by the table's strings (the #8 check: the table grows with the text it holds,
    /// never by doubling past it).
    fn nbytes(&self) -> usize {
        self.lock().iter().map(|s| s.len()).sum()
    }
}

fn intern(t: &mut Table, s: &str) -> i32 {
    if let Some(i) = t.get_index_of(s) {
        return i as i32;
    }
    t.insert_full(s.into()).0 as i32
}

// ---------------------------------------------------------------- the columns

/// One call's rows.
#[derive(Default)]
pub struct Cols {
    pub start: Vec<i64>,
    pub end: Vec<i64>,
    pub flags: Vec<i32>,
    pub ph: Vec<u8>,
    pub name: Vec<i32>,
    pub cat: Vec<i32>,
    pub ts: Vec<i64>,
    pub dur: Vec<i64>,
    pub pid: Vec<i64>,
    pub tid: Vec<i64>,
    pub id: Vec<i64>,
    pub s: Vec<u8>,
    pub bp: Vec<u8>,
    pub bind: Vec<i64>,
    /// 1: `flow_in` is true; 2: `flow_out` is true
    pub flow: Vec<u8>,
    /// each row's args object without whitespace, back to back (`{}` and no args: empty)
    pub args: Vec<u8>,
    /// row r's compacted args are `args[args_off[r]..args_off[r + 1]]`
    pub args_off: Vec<i64>,
}

impl Cols {
    /// Give back the room reserved for rows and args that the scan did not fill: the columns
    /// wait, a few blocks at a time, for the reader to take them (see `scan_str`'s reserves).
    fn shrink_to_fit(&mut self) {
        self.start.shrink_to_fit();
        self.end.shrink_to_fit();
        self.flags.shrink_to_fit();
        self.ph.shrink_to_fit();
        self.name.shrink_to_fit();
        self.cat.shrink_to_fit();
        self.ts.shrink_to_fit();
        self.dur.shrink_to_fit();
        self.pid.shrink_to_fit();
        self.tid.shrink_to_fit();
        self.id.shrink_to_fit();
        self.s.shrink_to_fit();
        self.bp.shrink_to_fit();
        self.bind.shrink_to_fit();
        self.flow.shrink_to_fit();
        self.args.shrink_to_fit();
        self.args_off.shrink_to_fit();
    }
}

// ---------------------------------------------------------------- reading one event

#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Other,
    Ph,
    Name,
    Cat,
    Ts,
    Dur,
    Pid,
    Tid,
    Id,
    Args,
    S,
    Bp,
    BindId,
    FlowIn,
    FlowOut,
    Rare,
}

thread_local! {
    /// The args of the rows being scanned (`Cols::args`, lent here while serde_json reads one
    /// event, so that its visitor compacts the args object straight after the rows before it: no
    /// copy per event).
    static ARGS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The value of name, cat, ph, s or bp, as `str_val` reads it.
enum Val<'de> {
    /// a string without escapes
    Str(&'de str),
    /// a string with escapes
    Escaped,
    /// a value of another type (its depth already checked)
    NotStr,
}

/// An event as its visitor reads it, member by member in text order (strings borrowed from the
/// text): the row's fields and flags; its last args object without whitespace is at the end of
/// `ARGS`, from `args_at` on.
/// Names and categories are interned only once the whole event is read (`strs`).
struct RawEvent<'de> {
    /// F_* bits, and SLOW
    fl: i32,
    /// the name and cat strings, in text order (Key::Name or Key::Cat)
    strs: SmallVec<[(Key, &'de str); 2]>,
    ph: u8,
    s: u8,
    bp: u8,
    ts: i64,
    dur: i64,
    pid: i64,
    tid: i64,
    id: i64,
    bind: i64,
    flow: u8,
    /// an args object was read into ARGS
    args_kept: bool,
    /// where this event's args start in ARGS
    args_at: usize,
    /// a value nested deeper than MAX_DEPTH in name/cat/ph/s/bp or args: BAD
    deep: bool,
    /// the first other member nested deeper than MAX_DEPTH: BAD, after interning the strings
    /// before it (`strs[..k]`, as the rows' reader always did)
    deep_other_at: Option<usize>,
}

fn key_of(k: &str) -> Key {
    match k {
        "ph" => Key::Ph,
        "name" => Key::Name,
        "cat" => Key::Cat,
        "ts" => Key::Ts,
        "dur" => Key::Dur,
        "pid" => Key::Pid,
        "tid" => Key::Tid,
        "id" => Key::Id,
        "args" => Key::Args,
        "s" => Key::S,
        "bp" => Key::Bp,
        "bind_id" => Key::BindId,
        "flow_in" => Key::FlowIn,
        "flow_out" => Key::FlowOut,
        "id2" => Key::Rare,
        _ => Key::Other,
    }
}

/// An event's key: which one, and whether it has escapes (serde_json hands over a borrowed
/// string only when it has none).
struct KeySeed;

impl<'de> de::DeserializeSeed<'de> for KeySeed {
    type Value = (Key, bool);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(Key, bool), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = (Key, bool);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E: de::Error>(self, k: &'de str) -> Result<(Key, bool), E> {
        Ok((key_of(k), false))
    }
    fn visit_str<E: de::Error>(self, _k: &str) -> Result<(Key, bool), E> {
        Ok((Key::Other, true))
    }
}

/// The value of name, cat, ph, s or bp, from its raw text: a string without escapes, or not. A
/// number is not converted (serde_json's own reading of `1e309` as a double is an error, which
/// made the whole stream BAD where the event is only SLOW); a container is checked for depth.
fn str_val<'de>(raw: &'de str, deep: &mut bool) -> Val<'de> {
    match raw.as_bytes().first() {
        Some(b'"') => {
            let inner = &raw[1..raw.len() - 1];
            if inner.as_bytes().contains(&b'\\') {
                Val::Escaped
            } else {
                Val::Str(inner)
            }
        }
        Some(b'[') | Some(b'{') => {
            if walk(raw, 1, None).is_err() {
                *deep = true;
            }
            Val::NotStr
        }
        _ => Val::NotStr,
    }
}

impl<'de> RawEvent<'de> {
    /// A member whose key is F_* `f`: SLOW if it is there already.
    fn mark(&mut self, f: i32) {
        if self.fl & f != 0 {
            self.fl |= SLOW;
        }
        self.fl |= f;
    }
}

impl<'de> Deserialize<'de> for RawEvent<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut ev = RawEvent {
                    fl: 0,
                    strs: SmallVec::new(),
                    ph: 0,
                    s: 0,
                    bp: 0,
                    ts: 0,
                    dur: 0,
                    pid: 0,
                    tid: 0,
                    id: 0,
                    bind: 0,
                    flow: 0,
                    args_kept: false,
                    args_at: ARGS.with_borrow(|a| a.len()),
                    deep: false,
                    deep_other_at: None,
                };
                while let Some((key, escaped)) = map.next_key_seed(KeySeed)? {
                    if escaped {
                        ev.fl |= SLOW;
                    }
                    match key {
                        Key::Name | Key::Cat | Key::Ph | Key::S | Key::Bp => {
                            match str_val(map.next_value::<&'de RawValue>()?.get(), &mut ev.deep) {
                                Val::Escaped | Val::NotStr => ev.fl |= SLOW,
                                Val::Str(s) => match key {
                                    Key::Name | Key::Cat => {
                                        ev.mark(if key == Key::Name { F_NAME } else { F_CAT });
                                        ev.strs.push((key, s));
                                    }
                                    _ => {
                                        ev.mark(match key {
                                            Key::Ph => F_PH,
                                            Key::S => F_S,
                                            _ => F_BP,
                                        });
                                        if s.len() != 1 {
                                            ev.fl |= SLOW;
                                        }
                                        let ch = if s.len() == 1 { s.as_bytes()[0] } else { 0 };
                                        match key {
                                            Key::Ph => ev.ph = ch,
                                            Key::S => ev.s = ch,
                                            _ => ev.bp = ch,
                                        }
                                    }
                                },
                            }
                        }
                        Key::FlowIn | Key::FlowOut => {
                            let raw = map.next_value::<&'de RawValue>()?.get();
                            let (f, bit) = if key == Key::FlowIn {
                                (F_FLOW_IN, 1)
                            } else {
                                (F_FLOW_OUT, 2)
                            };
                            ev.mark(f);
                            match raw {
                                "true" => ev.flow |= bit,
                                "false" => ev.flow &= !bit,
                                _ => {
                                    // (a value not kept: only its depth matters, as another key's)
                                    ev.fl |= SLOW;
                                    if raw.starts_with(['[', '{'])
                                        && ev.deep_other_at.is_none()
                                        && walk(raw, 1, None).is_err()
                                    {
                                        ev.deep_other_at = Some(ev.strs.len());
                                    }
                                }
                            }
                        }
                        Key::Args => {
                            // read once by serde_json as raw text, then compacted (or only
                            // checked for depth) in one pass however deep it is
                            let raw = map.next_value::<&'de RawValue>()?.get();
                            ev.mark(F_ARGS);
                            if raw.starts_with('{') {
                                ev.args_kept = true;
                                ARGS.with_borrow_mut(|out| {
                                    out.truncate(ev.args_at); // (a repeated args: the last kept)
                                    match walk(raw, 1, Some(out)) {
                                        Ok(f) if f & (W_UESC | W_EXP | W_LONG) != 0 => {
                                            ev.fl |= SLOW
                                        }
                                        Ok(_) => {}
                                        Err(()) => ev.deep = true,
                                    }
                                });
                            } else {
                                ev.fl |= SLOW;
                                if raw.starts_with('[') && walk(raw, 1, None).is_err() {
                                    ev.deep = true;
                                }
                            }
                        }
                        _ => {
                            let raw = map.next_value::<&'de RawValue>()?.get();
                            let first = raw.as_bytes().first().copied().unwrap_or(0);
                            let is_number = first == b'-' || first.is_ascii_digit();
                            match key {
                                Key::BindId => {
                                    // an int64 (hex strings, and ids past int64: the general decoder)
                                    ev.mark(F_BIND);
                                    match int64(raw).filter(|_| is_number) {
                                        Some((x, false)) => ev.bind = x,
                                        _ => ev.fl |= SLOW,
                                    }
                                    if !is_number
                                        && (first == b'{' || first == b'[')
                                        && ev.deep_other_at.is_none()
                                        && walk(raw, 1, None).is_err()
                                    {
                                        ev.deep_other_at = Some(ev.strs.len());
                                    }
                                    continue;
                                }
                                Key::Ts | Key::Dur | Key::Pid | Key::Tid | Key::Id if is_number => {
                                    let (f, got) = match key {
                                        Key::Ts => (F_TS, us_to_ns(raw).inspect(|&x| ev.ts = x)),
                                        Key::Dur => (F_DUR, us_to_ns(raw).inspect(|&x| ev.dur = x)),
                                        _ => {
                                            let (f, big, at) = match key {
                                                Key::Pid => (F_PID, F_PID_U64, &mut ev.pid),
                                                Key::Tid => (F_TID, F_TID_U64, &mut ev.tid),
                                                _ => (F_ID, F_ID_U64, &mut ev.id),
                                            };
                                            let got = int64(raw);
                                            if let Some((x, u)) = got {
                                                *at = x;
                                                ev.fl = if u { ev.fl | big } else { ev.fl & !big };
                                            }
                                            (f, got.map(|(x, _)| x))
                                        }
                                    };
                                    if got.is_none() {
                                        ev.fl |= SLOW;
                                    }
                                    ev.mark(f);
                                    continue;
                                }
                                Key::Other => {}
                                _ => ev.fl |= SLOW, // a known key with a value of another type, or a rare one
                            }
                            // a value not kept: only its depth matters
                            if (first == b'{' || first == b'[')
                                && ev.deep_other_at.is_none()
                                && walk(raw, 1, None).is_err()
                            {
                                ev.deep_other_at = Some(ev.strs.len());
                            }
                        }
                    }
                }
                Ok(ev)
            }
        }
        d.deserialize_map(V)
    }
}

/// A number token of µs → exact ns: integers and up to 3 decimals, below ±MAX_US; anything else
/// (an exponent, more decimals, 17+ integer digits) is None.
fn us_to_ns(raw: &str) -> Option<i64> {
    let b = raw.as_bytes();
    let (neg, b) = match b.split_first() {
        Some((b'-', t)) => (true, t),
        _ => (false, b),
    };
    let ip = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if ip == 0 || ip > 16 {
        return None;
    }
    let v = digits(&b[..ip]);
    if v >= MAX_US {
        return None;
    }
    let fp = match b[ip..].split_first() {
        None => &b[ip..],
        Some((b'.', f)) => f,
        Some(_) => return None,
    };
    if fp.len() > 3 || !fp.iter().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut frac = digits(fp);
    for _ in fp.len()..3 {
        frac *= 10;
    }
    let ns = v * 1000 + frac;
    Some(if neg { -ns } else { ns })
}

/// The value of at most 18 ASCII digits (the caller has checked them).
fn digits(d: &[u8]) -> i64 {
    d.iter().fold(0i64, |v, &c| v * 10 + i64::from(c - b'0'))
}

/// A number token that is an integer of 64 bits, signed or not: its bits as an int64, and
/// whether it is past int64 (2^63 and up: the int64 holds it less 2^64).
fn int64(raw: &str) -> Option<(i64, bool)> {
    let b = raw.as_bytes();
    let (neg, d) = match b.split_first() {
        Some((b'-', t)) => (true, t),
        _ => (false, b),
    };
    if d.is_empty() || d.len() > 20 || !d.iter().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let v = d.iter().try_fold(0u64, |v, &c| {
        v.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })?;
    if neg {
        // down to -2^63
        (v <= 1 << 63).then(|| ((v as i64).wrapping_neg(), false))
    } else {
        Some((v as i64, v > i64::MAX as u64))
    }
}

/// Walk a value serde_json has validated (`raw`, at nesting `level`, 1 for the outermost
/// container): what it holds (`W_*` bits), and, with `out`, its text without whitespace between
/// tokens appended there (each leaf token copied as it is).  Err: nested deeper than MAX_DEPTH.
///
/// One pass over the bytes, whatever the nesting (serde_json has already checked the text is
/// JSON, so this only classifies: it steps over each string to its closing quote, noting a `\u`
/// escape, and over each number token, noting an exponent or a length of 100+; it reads no
/// value).  Whitespace outside strings is dropped, every other byte copied.
fn walk(raw: &str, level: u32, out: Option<&mut Vec<u8>>) -> Result<u32, ()> {
    match out {
        Some(o) => {
            let at = o.len();
            o.reserve(raw.len()); // (the compacted text is never longer)
            let r = walk_into::<true>(raw.as_bytes(), level, o);
            if r.is_err() {
                o.truncate(at);
            }
            r
        }
        None => walk_into::<false>(raw.as_bytes(), level, &mut Vec::new()),
    }
}

/// walk's loop: with KEEP, the compacted text is appended to `out` (each run of bytes between
/// whitespace copied at once).  A string is crossed with `memchr2` (to its next quote or
/// backslash), a number a byte at a time, whitespace dropped; every other byte is one step.
fn walk_into<const KEEP: bool>(b: &[u8], level: u32, out: &mut Vec<u8>) -> Result<u32, ()> {
    let n = b.len();
    let mut flags = 0u32;
    let mut depth = 0u32; // containers open at `i`
    let mut kept = 0usize; // the bytes from `kept` to `i` are still to be copied
    let mut i = 0usize;
    while i < n {
        match b[i] {
            b' ' | b'\n' | b'\r' | b'\t' => {
                // between tokens: dropped
                if KEEP {
                    out.extend_from_slice(b.get(kept..i).unwrap_or_default());
                }
                i = skip_ws_at(b, i + 1);
                kept = i;
            }
            b'{' | b'[' => {
                depth += 1;
                if level + depth - 1 > MAX_DEPTH {
                    return Err(());
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => i = string_end(b, i + 1, &mut flags),
            b'-' | b'0'..=b'9' => {
                let from = i;
                i += 1;
                while let Some(&c) = b.get(i) {
                    match c {
                        b'0'..=b'9' | b'.' | b'-' | b'+' => {}
                        b'e' | b'E' => flags |= W_EXP,
                        _ => break,
                    }
                    i += 1;
                }
                if i - from >= 100 {
                    flags |= W_LONG;
                }
            }
            _ => i += 1, // `,` `:` and the letters of true, false, null
        }
    }
    if KEEP {
        out.extend_from_slice(b.get(kept..).unwrap_or_default());
    }
    Ok(flags)
}

/// Just past the closing quote of the string whose text starts at `b[i]` (a backslash escapes
/// the byte after it; a `\u` escape is noted in `flags`), or past the end of `b`.
#[inline]
fn string_end(b: &[u8], mut i: usize, flags: &mut u32) -> usize {
    while let Some(k) = b
        .get(i..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        i += k;
        if b[i] == b'"' {
            return i + 1;
        }
        if b.get(i + 1) == Some(&b'u') {
            *flags |= W_UESC;
        }
        i += 2;
    }
    b.len() + 1
}

fn is_ws(c: u8) -> bool {
    c == b' ' || c == b'\n' || c == b'\r' || c == b'\t'
}

fn skip_ws_at(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    i
}

/// Whether serde_json's error `e` on `text` comes from the text ending (more text may complete
/// it): an end-of-input error, or one it places at the very end (a number cut after its `-`,
/// `.` or `e`, which serde_json reports as an invalid number).
fn cut_short(text: &[u8], e: &serde_json::Error) -> bool {
    if e.is_eof() {
        return true;
    }
    // serde_json places an error by line (1-based) and byte column within it
    let line_start = match e.line() {
        0 | 1 => 0,
        l => match text
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c == b'\n')
            .nth(l - 2)
        {
            Some((k, _)) => k + 1,
            None => return false,
        },
    };
    line_start + e.column() >= text.len()
        && matches!(
            text.last(),
            Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        )
}

enum EventOutcome {
    Row,
    More,
    Bad,
}

/// One event at `b[i]` (a `{`): its row appended to `c`, or why not.  `end` is set just past it.
fn scan_event(b: &str, i: usize, table: &mut Table, c: &mut Cols, end: &mut usize) -> EventOutcome {
    let Some(text) = b.get(i..) else {
        return EventOutcome::Bad;
    };
    // from a &str: serde_json checks no UTF-8 again (scan_kernel checked the block once)
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<RawEvent>();
    let at = c.args.len();
    ARGS.with_borrow_mut(|a| std::mem::swap(a, &mut c.args));
    let read = stream.next();
    ARGS.with_borrow_mut(|a| std::mem::swap(a, &mut c.args));
    let ev = match read {
        Some(Ok(ev)) if !ev.deep && ev.deep_other_at.is_none() => ev,
        Some(Ok(ev)) => {
            c.args.truncate(at);
            if let Some(k) = ev.deep_other_at.filter(|_| !ev.deep) {
                // the strings before the value nested too deep are interned all the same, as the
                // rows' reader always did
                for &(_, s) in &ev.strs[..k] {
                    intern(table, s);
                }
            }
            return EventOutcome::Bad;
        }
        Some(Err(e)) if !cut_short(text.as_bytes(), &e) => {
            c.args.truncate(at);
            return EventOutcome::Bad;
        }
        _ => {
            c.args.truncate(at);
            return EventOutcome::More;
        }
    };
    *end = i + stream.byte_offset();
    let (mut nm, mut ct) = (-1, -1);
    for &(key, s) in ev.strs.iter() {
        let sid = intern(table, s);
        if key == Key::Name {
            nm = sid;
        } else {
            ct = sid;
        }
    }
    let fl = ev.fl;
    if !ev.args_kept || c.args.len() - at <= 2 {
        c.args.truncate(at); // (`{}`: no args)
    }
    c.start.push(i as i64);
    c.end.push(*end as i64);
    c.flags.push(fl);
    c.ph.push(if fl & F_PH != 0 { ev.ph } else { 0 });
    c.name.push(nm);
    c.cat.push(ct);
    c.ts.push(ev.ts);
    c.dur.push(ev.dur);
    c.pid.push(ev.pid);
    c.tid.push(ev.tid);
    c.id.push(ev.id);
    c.s.push(ev.s);
    c.bp.push(ev.bp);
    c.bind.push(ev.bind);
    c.flow.push(ev.flow);
    c.args_off.push(c.args.len() as i64);
    EventOutcome::Row
}

/// Scan events from `b[pos..]`, at most `cap`, `after` an event or not (see [`scan_str`]):
/// (rows, where to go on, status).
pub fn scan_kernel(
    bytes: &[u8],
    pos: usize,
    cap: usize,
    table: &mut Table,
    after: bool,
) -> (Cols, usize, i32) {
    let c = Cols {
        args_off: vec![0],
        ..Cols::default()
    };
    // The text as UTF-8, checked once here, from where the scan starts: up to a character cut by
    // the block's end (it is in an event the next call reads again with more text), or up to a
    // byte that is not UTF-8 (the scan then stops there with BAD, not MORE: no more text makes it
    // valid).  The text before `from` is not read, so not checked (it was, in a second pass from
    // the block's start: ~1 % of the scan's CPU, within the noise of the 1M bench trace).
    let from = pos.min(bytes.len());
    let (b, invalid) = match std::str::from_utf8(&bytes[from..]) {
        Ok(b) => (b, false),
        Err(e) => {
            let valid = from + e.valid_up_to();
            match std::str::from_utf8(&bytes[from..valid]) {
                Ok(b) => (b, e.error_len().is_some()),
                Err(_) => return (c, pos, BAD), // (never: the prefix is valid)
            }
        }
    };
    let (mut c, at, status) = scan_str(b, cap, table, c, after);
    c.shrink_to_fit();
    // the rows' places, and where to go on, in `bytes` (the scan read `bytes[from..]`)
    if from > 0 {
        let shift = from as i64;
        for v in [&mut c.start, &mut c.end] {
            for x in v.iter_mut() {
                *x += shift;
            }
        }
    }
    let pos = from + at;
    if status == MORE && invalid && from + b.len() < bytes.len() {
        return (c, pos, BAD);
    }
    (c, pos, status)
}

/// Scan events from the start of `text`, at most `cap`: (rows, where to go on, status).  `after`:
/// the text starts right after an event (where an earlier call stopped, having read one), so a
/// comma comes before its first event; else it starts after the array's `[` (or at an event whose
/// comma is behind it: a block's guessed start), where no comma may come first.  A FULL or MORE
/// call stops right after the last event it read (or where it started), never past a comma: the
/// next call goes on from there, `after` an event if this one was or read one.
fn scan_str(
    text: &str,
    cap: usize,
    table: &mut Table,
    mut c: Cols,
    after: bool,
) -> (Cols, usize, i32) {
    let b = text.as_bytes();
    let n = b.len();
    let mut pos = 0usize;
    // room for a block's rows made once (about one row per 100 bytes of Kineto's text), not by
    // doubling
    let rows = cap.min(n / 100 + 1);
    for v in [
        &mut c.start,
        &mut c.end,
        &mut c.ts,
        &mut c.dur,
        &mut c.pid,
        &mut c.tid,
        &mut c.id,
        &mut c.bind,
    ] {
        v.reserve(rows);
    }
    c.args_off.reserve(rows);
    // the compacted args are never longer than the text they come from: room for them once (the
    // pages never written are never made resident), not by doubling and copying
    c.args.reserve(n.min(MAX_ARGS_RESERVE));
    for v in [&mut c.flags, &mut c.name, &mut c.cat] {
        v.reserve(rows);
    }
    for v in [&mut c.ph, &mut c.s, &mut c.bp, &mut c.flow] {
        v.reserve(rows);
    }
    let mut rows = 0usize;
    loop {
        // between events: whitespace, then the array's end or the next event, after a comma
        // exactly when an event comes before it (`{}{}`, `[,{}]`, `{},]` and `[,]` are BAD: the
        // repairing reader reads them)
        let mut i = skip_ws_at(b, pos);
        if i >= n {
            return (c, pos, MORE);
        }
        let comma = b[i] == b',';
        if comma {
            i = skip_ws_at(b, i + 1);
            if i >= n {
                return (c, pos, MORE);
            }
        }
        match b[i] {
            b']' if !comma => return (c, i + 1, END),
            b'{' if comma == (after || rows > 0) => {}
            _ => return (c, i, BAD),
        }
        if rows >= cap {
            return (c, pos, FULL);
        }
        let mut end = i;
        match scan_event(text, i, table, &mut c, &mut end) {
            EventOutcome::Row => {
                rows += 1;
                pos = end;
            }
            EventOutcome::More => return (c, pos, MORE),
            EventOutcome::Bad => return (c, i, BAD),
        }
    }
}

fn cols_dict<'py>(py: Python<'py>, c: Cols) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("start", c.start.into_pyarray(py))?;
    d.set_item("end", c.end.into_pyarray(py))?;
    d.set_item("flags", c.flags.into_pyarray(py))?;
    d.set_item("ph", c.ph.into_pyarray(py))?;
    d.set_item("name", c.name.into_pyarray(py))?;
    d.set_item("cat", c.cat.into_pyarray(py))?;
    d.set_item("ts", c.ts.into_pyarray(py))?;
    d.set_item("dur", c.dur.into_pyarray(py))?;
    d.set_item("pid", c.pid.into_pyarray(py))?;
    d.set_item("tid", c.tid.into_pyarray(py))?;
    d.set_item("id", c.id.into_pyarray(py))?;
    d.set_item("s", c.s.into_pyarray(py))?;
    d.set_item("bp", c.bp.into_pyarray(py))?;
    d.set_item("bind", c.bind.into_pyarray(py))?;
    d.set_item("flow", c.flow.into_pyarray(py))?;
    d.set_item("args", c.args.into_pyarray(py))?;
    d.set_item("args_off", c.args_off.into_pyarray(py))?;
    Ok(d)
}

/// scan(text, pos, cap, strings, after=False) -> (columns, pos, status, new_strings)
///
/// Scan at most `cap` events from `text[pos:]` (the text of an event array after its `[`, or a
/// block of it); `after`: `text[pos:]` starts right after an event, so a comma must come before
/// the next one (else none may: the array's start, or a `{` whose comma is behind it).  `columns`
/// is a dict of NumPy arrays, one row per event scanned (`start`, `end`, `flags`, `ph`, `name`,
/// `cat` (ids in `strings`, -1: none), `ts`, `dur` (ns), `pid`, `tid`, `id`, `s`, `bp`, and
/// `args`/`args_off` (row r's args without whitespace: `args[args_off[r]:args_off[r + 1]]`, empty
/// for none or `{}`)); `pos` is where to go on (for MORE and FULL: right after the last event
/// read, or `pos` if none was, so the next call goes on `after` an event when this one was or read
/// one); `status` why it stopped (MORE, END, FULL, BAD); `new_strings` the strings this call added
/// to `strings`, in id order.  Runs without the GIL.
#[pyfunction]
#[pyo3(signature = (text, pos, cap, strings, after=false))]
#[allow(clippy::type_complexity)]
fn scan<'py>(
    py: Python<'py>,
    text: &[u8],
    pos: usize,
    cap: usize,
    strings: &Bound<'py, Strings>,
    after: bool,
) -> PyResult<(Bound<'py, PyDict>, usize, i32, Bound<'py, PyList>)> {
    let st = strings.get();
    let (c, pos, status, new) = py.detach(|| {
        let mut t = st.lock();
        let before = t.len();
        let (c, pos, status) = scan_kernel(text, pos, cap, &mut t, after);
        let new: Vec<Box<str>> = (before..t.len())
            .filter_map(|k| t.get_index(k).cloned())
            .collect();
        (c, pos, status, new)
    });
    let new = PyList::new(py, new.iter().map(|s| &**s))?;
    Ok((cols_dict(py, c)?, pos, status, new))
}

mod memory;
mod pool;
mod rows;
mod text;

use memory::memory_values;
use pool::{Job, Pool};
use rows::{split, Counters, Pairs};
use text::{deep_spans, is_utf8, skip_ws, value_end};

pub fn register(core: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(core.py(), "scan")?;
    m.add_class::<Strings>()?;
    m.add_class::<Pairs>()?;
    m.add_class::<Counters>()?;
    m.add_class::<Pool>()?;
    m.add_class::<Job>()?;
    m.add_function(wrap_pyfunction!(scan, &m)?)?;
    m.add_function(wrap_pyfunction!(split, &m)?)?;
    m.add_function(wrap_pyfunction!(memory_values, &m)?)?;
    m.add_function(wrap_pyfunction!(skip_ws, &m)?)?;
    m.add_function(wrap_pyfunction!(is_utf8, &m)?)?;
    m.add_function(wrap_pyfunction!(value_end, &m)?)?;
    m.add_function(wrap_pyfunction!(deep_spans, &m)?)?;
    for (k, v) in [
        ("MORE", MORE),
        ("END", END),
        ("FULL", FULL),
        ("BAD", BAD),
        ("F_NAME", F_NAME),
        ("F_CAT", F_CAT),
        ("F_TS", F_TS),
        ("F_DUR", F_DUR),
        ("F_PID", F_PID),
        ("F_TID", F_TID),
        ("F_ID", F_ID),
        ("F_ARGS", F_ARGS),
        ("F_S", F_S),
        ("F_BP", F_BP),
        ("F_PH", F_PH),
        ("F_PID_U64", F_PID_U64),
        ("F_TID_U64", F_TID_U64),
        ("F_ID_U64", F_ID_U64),
        ("F_BIND", F_BIND),
        ("F_FLOW_IN", F_FLOW_IN),
        ("F_FLOW_OUT", F_FLOW_OUT),
        ("SLOW", SLOW),
    ] {
        m.add(k, v)?;
    }
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    core.add_submodule(&m)
}
