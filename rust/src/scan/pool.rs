//! Blocks scanned on threads of the core's own, for `BlockScanner` in
//! `traceconv/readers/chrome/stream.py`: [`Pool`] takes a block (its text, where to start, its
//! strings table) and scans it to its end on one of its threads, and the [`Job`] it returns hands
//! the batches over when asked.
//!
//! The stream's scanning threads were Python's (a `ThreadPoolExecutor` calling `scan` a batch at a
//! time): each took the GIL back after every scan and to pick up its next block, and waited for it
//! while the converting thread held it (~70 ms each in the 1M trace's 0.58 s load, measured with a
//! probe on `take_gil`).  Here a block's scans run from its start to its end without the GIL, and
//! only the thread that asks for the result touches Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyList;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::{cols_dict, lock, scan_kernel, Cols, Strings, BAD, FULL};

/// One scan call's rows and the strings it added to the table, in id order.
struct Batch {
    cols: Cols,
    new: Vec<Box<str>>,
}

/// A block scanned: the table's size before it, its batches, where the scan stopped, why, and
/// whether that is after an event.  It holds the block's text and table until it is handed over,
/// so that they are let go of with the GIL held.
struct Done {
    before: usize,
    batches: Vec<Batch>,
    pos: usize,
    status: i32,
    after: bool,
    _keep: Option<(PyBackedBytes, Py<Strings>)>,
}

/// The scans of `text` from `pos` to its end (or the array's end, or bad text), `cap` rows a
/// batch, `after` an event or not, as `BlockScanner._scan_block` describes them; stopped (with
/// `BAD`) before a batch once `stop` is set.
fn scan_block(
    text: &[u8],
    mut pos: usize,
    cap: usize,
    strings: &Strings,
    mut after: bool,
    stop: &AtomicBool,
) -> Done {
    let mut t = lock(&strings.table);
    let before = t.len();
    let mut batches = Vec::new();
    let mut status = BAD;
    while !stop.load(Ordering::Relaxed) {
        let k = t.len();
        let (cols, at, st) = scan_kernel(text, pos, cap.max(1), &mut t, after);
        let new = (k..t.len())
            .filter_map(|i| t.get_index(i).cloned())
            .collect();
        after = after || !cols.flags.is_empty();
        batches.push(Batch { cols, new });
        pos = at;
        if st != FULL {
            status = st;
            break;
        }
    }
    Done {
        before,
        batches,
        pos,
        status,
        after,
        _keep: None,
    }
}

/// `Done` as Python takes it: `(before, [(columns, rows, new strings), ...], pos, status, after)`.
fn hand_over<'py>(
    py: Python<'py>,
    d: Done,
) -> PyResult<(usize, Bound<'py, PyList>, usize, i32, bool)> {
    let out = PyList::empty(py);
    for b in d.batches {
        let n = b.cols.flags.len();
        let new = PyList::new(py, b.new.iter().map(|s| &**s))?;
        out.append((cols_dict(py, b.cols)?, n, new))?;
    }
    Ok((d.before, out, d.pos, d.status, d.after))
}

enum Slot {
    Pending,
    Ready(Done),
    Taken,
}

/// A block given to a [`Pool`]: [`Job::result`] waits for its scan and hands it over, once.
#[pyclass(frozen, module = "traceconv._core.scan")]
pub struct Job {
    slot: Mutex<Slot>,
    ready: Condvar,
}

#[pymethods]
impl Job {
    /// result() -> (before, batches, pos, status, after): the table's size before the block's
    /// scan, its batches as `(columns, rows, new strings)` (see `scan`), where it stopped, why,
    /// and whether that is after an event.  Waits without the GIL.
    #[allow(clippy::type_complexity)]
    fn result<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(usize, Bound<'py, PyList>, usize, i32, bool)> {
        let done = py.detach(|| {
            let mut s = lock(&self.slot);
            while matches!(*s, Slot::Pending) {
                s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            match std::mem::replace(&mut *s, Slot::Taken) {
                Slot::Ready(d) => Some(d),
                _ => None,
            }
        });
        match done {
            Some(d) => hand_over(py, d),
            None => Err(PyValueError::new_err(
                "this block's result was handed over already",
            )),
        }
    }
}

struct Task {
    text: PyBackedBytes,
    pos: usize,
    cap: usize,
    strings: Py<Strings>,
    after: bool,
    job: Py<Job>,
}

/// `threads` threads of the core's own that scan the blocks given to them, in the order given
/// (see the module's doc), `nice` steps below the priority of the thread that made the pool (on
/// Linux).  `stop()` makes the scans running or waiting end before their next batch, with `BAD`;
/// `close()` stops them and waits for the threads.
#[pyclass(frozen, module = "traceconv._core.scan")]
pub struct Pool {
    send: Mutex<Option<Sender<Task>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

/// Lower the calling thread's scheduling priority by `nice` steps (Linux, where a thread has a
/// nice value of its own; elsewhere it would be the whole process's, so nothing is done).
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: getpriority and setpriority read and set the calling thread's nice value (`who`
        // 0 is the caller on Linux); they touch no memory of ours.  A failure (EACCES where the
        // value cannot be set) leaves the priority as it was.
        unsafe {
            let now = libc::getpriority(libc::PRIO_PROCESS, 0);
            libc::setpriority(libc::PRIO_PROCESS, 0, (now + nice).min(19));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

fn work(take: Arc<Mutex<Receiver<Task>>>, stop: Arc<AtomicBool>, nice: i32) {
    lower_priority(nice);
    loop {
        let task = match lock(&take).recv() {
            Ok(t) => t,
            Err(_) => return, // the pool was closed and every block given was taken
        };
        let strings = task.strings.get();
        let mut done = scan_block(&task.text, task.pos, task.cap, strings, task.after, &stop);
        let job = task.job.get();
        done._keep = Some((task.text, task.strings));
        *lock(&job.slot) = Slot::Ready(done);
        job.ready.notify_all();
    }
}

#[pymethods]
impl Pool {
    #[new]
    #[pyo3(signature = (threads, nice=0))]
    fn new(threads: usize, nice: i32) -> PyResult<Self> {
        let (send, take) = channel::<Task>();
        let take = Arc::new(Mutex::new(take));
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for k in 0..threads.max(1) {
            let (take, stop) = (take.clone(), stop.clone());
            let h = std::thread::Builder::new()
                .name(format!("traceconv-scan-{k}"))
                .spawn(move || work(take, stop, nice))
                .map_err(|e| {
                    PyValueError::new_err(format!("cannot start a scanning thread: {e}"))
                })?;
            handles.push(h);
        }
        Ok(Pool {
            send: Mutex::new(Some(send)),
            threads: Mutex::new(handles),
            stop,
        })
    }

    /// submit(text, pos, cap, strings, after) -> Job: scan the `bytes` `text` from `pos` to its
    /// end on one of the pool's threads, `cap` rows a batch, into the table `strings` (which no
    /// other scan may use until this one's result is taken), `after` an event or not.
    fn submit(
        &self,
        py: Python<'_>,
        text: PyBackedBytes,
        pos: usize,
        cap: usize,
        strings: Py<Strings>,
        after: bool,
    ) -> PyResult<Py<Job>> {
        let job = Py::new(
            py,
            Job {
                slot: Mutex::new(Slot::Pending),
                ready: Condvar::new(),
            },
        )?;
        let task = Task {
            text,
            pos,
            cap,
            strings,
            after,
            job: job.clone_ref(py),
        };
        match &*lock(&self.send) {
            Some(s) if s.send(task).is_ok() => Ok(job),
            _ => Err(PyValueError::new_err("the scanning pool is closed")),
        }
    }

    /// scan(text, pos, cap, strings, after) -> the tuple `Job.result` gives, scanned on the
    /// calling thread (without the GIL) and stopped as the pool's own scans are.
    #[allow(clippy::type_complexity)]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        text: &[u8],
        pos: usize,
        cap: usize,
        strings: &Bound<'py, Strings>,
        after: bool,
    ) -> PyResult<(usize, Bound<'py, PyList>, usize, i32, bool)> {
        let st = strings.get();
        let stop = &*self.stop;
        let done = py.detach(|| scan_block(text, pos, cap, st, after, stop));
        hand_over(py, done)
    }

    /// Make the scans running or waiting end before their next batch (with `BAD`).
    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stop the scans, let the threads finish the blocks given (at once: stopped) and wait for
    /// them.
    fn close(&self, py: Python<'_>) {
        self.stop.store(true, Ordering::Relaxed);
        lock(&self.send).take();
        let handles: Vec<_> = lock(&self.threads).drain(..).collect();
        py.detach(|| {
            for h in handles {
                let _ = h.join();
            }
        });
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        lock(&self.send).take();
    }
}
