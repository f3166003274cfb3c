//! The binlog's events as a replication connection receives them.
//!
//! `split_events` cuts the bytes read from the connection into its packets and
//! reads the events every transaction is made of (its GTID, table maps, rows
//! events, MySQL's partial JSON updates among them, XID) and the stream's own
//! (rotations, heartbeats) into plain tuples, as `dbus_fn.capture._events`
//! documents them. Any other event, or one whose layout is not the one
//! expected, is handed back whole (`OTHER`) for mysql-replication to read,
//! which stays the reference for every event.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

const OTHER: u8 = 0;
const HEARTBEAT: u8 = 1;
const ROTATE: u8 = 2;
const TABLE_MAP: u8 = 3;
const WRITE: u8 = 4;
const UPDATE: u8 = 5;
const DELETE: u8 = 6;
const GTID: u8 = 7;
const XID: u8 = 8;
const ERROR: u8 = 9;
const END: u8 = 10;
const PARTIAL_UPDATE: u8 = 11;

/// A packet's payload at its largest; a longer one goes on in the next packet.
const FULL: usize = 0xFF_FFFF;
/// The OK byte and the event header before an event's post-header.
const BODY: usize = 20;

fn le(data: &[u8], at: usize, width: usize) -> Option<u64> {
    let bytes = data.get(at..at + width)?;
    Some(bytes.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

/// A length-encoded integer at `at`: its value and where it ends.
fn length_encoded(data: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *data.get(at)?;
    let (width, value) = match first {
        0..=250 => return Some((usize::from(first), at + 1)),
        252 => (2, le(data, at + 1, 2)?),
        253 => (3, le(data, at + 1, 3)?),
        254 => (8, le(data, at + 1, 8)?),
        _ => return None,
    };
    Some((usize::try_from(value).ok()?, at + 1 + width))
}

/// The next whole packet's payload at `at` and where the packet ends, or the
/// number of bytes still missing (0 when even its header is incomplete).
fn packet(buffer: &[u8], at: usize) -> Result<(Vec<u8>, usize), usize> {
    let mut payload = Vec::new();
    let mut at = at;
    loop {
        let Some(length) = le(buffer, at, 3) else { return Err(0) };
        let length = length as usize;
        let end = at + 4 + length;
        if end > buffer.len() {
            return Err(end - buffer.len());
        }
        payload.extend_from_slice(&buffer[at + 4..end]);
        at = end;
        if length < FULL {
            return Ok((payload, at));
        }
    }
}

struct Header {
    timestamp: u64,
    kind: u8,
    server_id: u64,
    size: u64,
    end: u64,
    body_end: usize,
}

fn header(payload: &[u8], checksum: bool) -> Option<Header> {
    let size = le(payload, 10, 4)?;
    let body_end = usize::try_from(size).ok()?.checked_add(1)?.checked_sub(if checksum { 4 } else { 0 })?;
    if body_end < BODY || body_end > payload.len() {
        return None;
    }
    Some(Header {
        timestamp: le(payload, 1, 4)?,
        kind: payload[5],
        server_id: le(payload, 6, 4)?,
        size,
        end: le(payload, 14, 4)?,
        body_end,
    })
}

fn text<'py>(py: Python<'py>, bytes: &[u8]) -> Option<Bound<'py, PyAny>> {
    std::str::from_utf8(bytes).ok().map(|s| PyString::new(py, s).into_any())
}

/// What a rows event holds past its post-header: (table id, columns present,
/// columns present after, rows).
fn rows<'py>(
    py: Python<'py>,
    payload: &[u8],
    head: &Header,
    post_headers: &[u8],
) -> Option<[Bound<'py, PyAny>; 4]> {
    let v2 = matches!(head.kind, 30..=32 | 39);
    let known = if v2 { 10 } else { 8 };
    let declared = post_headers.get(usize::from(head.kind) - 1).map_or(known, |&n| usize::from(n));
    if declared < known {
        return None;
    }
    let data = &payload[..head.body_end];
    let table_id = le(data, BODY, 6)?;
    let mut at = BODY + declared;
    if v2 {
        let extra = usize::try_from(le(data, BODY + 8, 2)?).ok()?;
        at += extra.checked_sub(2)?;
    }
    let (columns, after_count) = length_encoded(data, at)?;
    let width = columns.div_ceil(8);
    let present = data.get(after_count..after_count + width)?;
    at = after_count + width;
    let present_after = if matches!(head.kind, 24 | 31 | 39) {
        let bits = data.get(at..at + width)?;
        at += width;
        PyBytes::new(py, bits).into_any()
    } else {
        py.None().into_bound(py)
    };
    let body = data.get(at..)?;
    Some([
        table_id.into_pyobject(py).ok()?.into_any(),
        PyBytes::new(py, present).into_any(),
        present_after,
        PyBytes::new(py, body).into_any(),
    ])
}

fn gtid(payload: &[u8], head: &Header) -> Option<String> {
    let data = &payload[..head.body_end];
    if head.kind == 162 {
        let sequence = le(data, BODY, 8)?;
        let domain = le(data, BODY + 8, 4)?;
        return Some(format!("{domain}-{}-{sequence}", head.server_id));
    }
    let sid = data.get(BODY + 1..BODY + 17)?;
    let number = le(data, BODY + 17, 8)?;
    let hex: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}:{number}",
        &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]
    ))
}

/// The tuple of one event: (kind, timestamp, end, size, a, b, c, d); (kind,
/// payload) for `OTHER`, `ERROR` and `END`; None for a packet that is none of
/// them (mysql-replication skips it too).
fn event<'py>(
    py: Python<'py>,
    payload: &[u8],
    checksum: bool,
    post_headers: &[u8],
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let none = || py.None().into_bound(py);
    let whole = |kind: u8| -> PyResult<Option<Bound<'py, PyTuple>>> {
        let kind = kind.into_pyobject(py)?.into_any();
        PyTuple::new(py, [kind, PyBytes::new(py, payload).into_any()]).map(Some)
    };
    match payload.first() {
        Some(0) if payload.len() >= BODY => {}
        Some(0xFF) => return whole(ERROR),
        Some(0xFE) if payload.len() < 9 => return whole(END),
        _ => return Ok(None),
    }
    let Some(head) = header(payload, checksum) else { return whole(OTHER) };
    let data = &payload[..head.body_end];
    let fields: Option<(u8, [Bound<'py, PyAny>; 4])> = match head.kind {
        4 => le(data, BODY, 8).and_then(|position| {
            let name = text(py, data.get(BODY + 8..)?)?;
            Some((ROTATE, [name, position.into_pyobject(py).ok()?.into_any(), none(), none()]))
        }),
        27 => text(py, &data[BODY..]).map(|ident| (HEARTBEAT, [ident, none(), none(), none()])),
        16 => Some((XID, [none(), none(), none(), none()])),
        19 => le(data, BODY, 6).and_then(|table_id| {
            let id = table_id.into_pyobject(py).ok()?.into_any();
            Some((TABLE_MAP, [id, PyBytes::new(py, payload).into_any(), none(), none()]))
        }),
        23 | 30 => rows(py, payload, &head, post_headers).map(|fields| (WRITE, fields)),
        24 | 31 => rows(py, payload, &head, post_headers).map(|fields| (UPDATE, fields)),
        25 | 32 => rows(py, payload, &head, post_headers).map(|fields| (DELETE, fields)),
        // MySQL's partial JSON update: its images are read in Python (`_json_diff`).
        39 => rows(py, payload, &head, post_headers).map(|fields| (PARTIAL_UPDATE, fields)),
        33 | 162 => gtid(payload, &head)
            .map(|text| (GTID, [PyString::new(py, &text).into_any(), none(), none(), none()])),
        _ => None,
    };
    let Some((kind, [a, b, c, d])) = fields else { return whole(OTHER) };
    PyTuple::new(
        py,
        [
            kind.into_pyobject(py)?.into_any(),
            head.timestamp.into_pyobject(py)?.into_any(),
            head.end.into_pyobject(py)?.into_any(),
            head.size.into_pyobject(py)?.into_any(),
            a,
            b,
            c,
            d,
        ],
    )
    .map(Some)
}

/// The whole packets at the start of `buffer`, each as its event's tuple; how many
/// bytes they took; and how many more the next packet needs (0: unknown yet).
///
/// `checksum`: whether each event ends in a CRC32; `post_headers`: the post-header
/// length of each event type (by type - 1) from the stream's format description,
/// empty until there is one.
#[pyfunction]
pub fn split_events<'py>(
    py: Python<'py>,
    buffer: &[u8],
    checksum: bool,
    post_headers: &[u8],
) -> PyResult<(Bound<'py, PyList>, usize, usize)> {
    let events = PyList::empty(py);
    let mut at = 0;
    loop {
        match packet(buffer, at) {
            Ok((payload, end)) => {
                if let Some(event) = event(py, &payload, checksum, post_headers)? {
                    events.append(event)?;
                }
                at = end;
            }
            Err(missing) => return Ok((events, at, missing)),
        }
    }
}
