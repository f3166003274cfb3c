//! Rows of a SELECT (MySQL's text protocol) as the values PyMySQL gives.
//!
//! A snapshot chunk reads its rows through PyMySQL, whose row parsing in Python
//! was most of a chunk's read. `TextRows` parses a row packet in its place: one
//! kind per column, as `dbus_fn.capture._text_rows` derives it from the column's
//! PyMySQL converter and encoding. Each kind reads only the one form the server
//! writes (`-12`, `2024-01-02 03:04:05.5`, `-838:59:59`); any other text, and
//! every column of another kind, goes through the column's own PyMySQL decoding
//! (`slow`), so both give the same values and raise the same errors.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDate, PyDateTime, PyDelta, PyString, PyTuple};

#[derive(Clone, Copy)]
enum TextKind {
    /// The column's PyMySQL decoding reads it.
    Python,
    Int,
    Float,
    Decimal,
    Date,
    DateTime,
    Time,
    Utf8,
    Bytes,
}

#[pyclass(frozen, module = "dbus_native")]
pub struct TextRows {
    kinds: Vec<TextKind>,
    slow: Vec<Py<PyAny>>,
    decimal: Py<PyAny>,
}

fn digits(text: &[u8]) -> Option<u32> {
    if text.is_empty() || text.len() > 9 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0u32, |acc, &d| acc * 10 + u32::from(d - b'0')))
}

/// `.f` to `.ffffff` after a time: microseconds, as PyMySQL pads them.
fn micro(text: &[u8]) -> Option<u32> {
    match text {
        [] => Some(0),
        [b'.', rest @ ..] if (1..=6).contains(&rest.len()) => {
            Some(digits(rest)? * 10u32.pow(6 - rest.len() as u32))
        }
        _ => None,
    }
}

/// `HH:MM:SS` and what follows it.
fn clock(text: &[u8]) -> Option<(u32, u32, u32, u32)> {
    if text.len() < 8 || text[2] != b':' || text[5] != b':' {
        return None;
    }
    Some((digits(&text[..2])?, digits(&text[3..5])?, digits(&text[6..8])?, micro(&text[8..])?))
}

fn day(text: &[u8]) -> Option<(i32, u8, u8)> {
    if text.len() != 10 || text[4] != b'-' || text[7] != b'-' {
        return None;
    }
    Some((digits(&text[..4])? as i32, digits(&text[5..7])? as u8, digits(&text[8..])? as u8))
}

fn length_coded(data: &[u8], at: usize) -> Option<(Option<&[u8]>, usize)> {
    let first = *data.get(at)?;
    let (length, start) = match first {
        0xFB => return Some((None, at + 1)),
        0xFC => (u64::from(u16::from_le_bytes(data.get(at + 1..at + 3)?.try_into().ok()?)), at + 3),
        0xFD => {
            let bytes = data.get(at + 1..at + 4)?;
            (u64::from(bytes[0]) | u64::from(bytes[1]) << 8 | u64::from(bytes[2]) << 16, at + 4)
        }
        0xFE => (u64::from_le_bytes(data.get(at + 1..at + 9)?.try_into().ok()?), at + 9),
        0xFF => return None,
        short => (u64::from(short), at + 1),
    };
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    Some((Some(data.get(start..end)?), end))
}

impl TextRows {
    /// One value of a common form, or None where PyMySQL's decoding must read it.
    fn fast<'py>(&self, py: Python<'py>, kind: TextKind, raw: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        let ascii = || std::str::from_utf8(raw).ok().filter(|t| t.is_ascii());
        Ok(match kind {
            TextKind::Python => None,
            TextKind::Int => {
                let body = raw.strip_prefix(b"-").unwrap_or(raw);
                if body.is_empty() || body.len() > 20 || !body.iter().all(u8::is_ascii_digit) {
                    None
                } else {
                    match ascii().and_then(|t| t.parse::<i128>().ok()) {
                        Some(value) => Some(value.into_pyobject(py)?.into_any()),
                        None => None,
                    }
                }
            }
            TextKind::Float => {
                let plain = raw.iter().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'));
                match ascii().filter(|_| plain && !raw.is_empty()).and_then(|t| t.parse::<f64>().ok()) {
                    Some(value) if value.is_finite() => Some(value.into_pyobject(py)?.into_any()),
                    _ => None,
                }
            }
            TextKind::Decimal => match ascii() {
                Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'.') => {
                    Some(self.decimal.bind(py).call1((text,))?)
                }
                _ => None,
            },
            TextKind::Date => match day(raw) {
                Some((year, month, day)) => PyDate::new(py, year, month, day).ok().map(Bound::into_any),
                None => None,
            },
            TextKind::DateTime => match (raw.get(..10).and_then(day), raw.get(10), raw.get(11..).and_then(clock)) {
                (Some((year, month, day)), Some(b' '), Some((hour, minute, second, micro))) => {
                    if hour > 23 || minute > 59 || second > 59 {
                        None
                    } else {
                        PyDateTime::new(py, year, month, day, hour as u8, minute as u8, second as u8, micro, None)
                            .ok()
                            .map(Bound::into_any)
                    }
                }
                _ => None,
            },
            TextKind::Time => {
                let (negative, body) = match raw.strip_prefix(b"-") {
                    Some(rest) => (true, rest),
                    None => (false, raw),
                };
                // Hours of two or three digits: shift a three-digit one onto the clock's shape.
                let colon = body.iter().position(|&b| b == b':');
                match colon {
                    Some(width @ 2..=3) if body.len() >= width + 6 => {
                        let hours = digits(&body[..width]);
                        let rest = clock(&[b"00", &body[width..]].concat());
                        match (hours, rest) {
                            (Some(hours), Some((_, minutes, seconds, micro))) if minutes < 60 && seconds < 60 => {
                                let magnitude = (i64::from(hours) * 3600 + i64::from(minutes) * 60 + i64::from(seconds))
                                    * 1_000_000
                                    + i64::from(micro);
                                let total = if negative { -magnitude } else { magnitude };
                                let (days, rest) = (total.div_euclid(86_400_000_000), total.rem_euclid(86_400_000_000));
                                Some(
                                    PyDelta::new(py, days as i32, (rest / 1_000_000) as i32, (rest % 1_000_000) as i32, true)?
                                        .into_any(),
                                )
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                }
            }
            TextKind::Utf8 => std::str::from_utf8(raw).ok().map(|text| PyString::new(py, text).into_any()),
            TextKind::Bytes => Some(PyBytes::new(py, raw).into_any()),
        })
    }
}

#[pymethods]
impl TextRows {
    /// `kinds`: per column, its kind's name; `slow`: per column, PyMySQL's own
    /// decoding of its raw bytes; `decimal`: `decimal.Decimal`.
    #[new]
    fn new(kinds: Vec<String>, slow: Vec<Py<PyAny>>, decimal: Py<PyAny>) -> PyResult<Self> {
        let kinds = kinds
            .iter()
            .map(|name| {
                Ok(match name.as_str() {
                    "python" => TextKind::Python,
                    "int" => TextKind::Int,
                    "float" => TextKind::Float,
                    "decimal" => TextKind::Decimal,
                    "date" => TextKind::Date,
                    "datetime" => TextKind::DateTime,
                    "time" => TextKind::Time,
                    "utf8" => TextKind::Utf8,
                    "bytes" => TextKind::Bytes,
                    other => {
                        return Err(pyo3::exceptions::PyValueError::new_err(format!(
                            "no native text kind {other:?}"
                        )))
                    }
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        if kinds.len() != slow.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("one decoding per column"));
        }
        Ok(TextRows { kinds, slow, decimal })
    }

    /// A row packet's values, or None where it is not one value per column (PyMySQL
    /// reads it then, as it would).
    fn row<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let mut values = Vec::with_capacity(self.kinds.len());
        let mut at = 0;
        for (kind, slow) in self.kinds.iter().zip(&self.slow) {
            let Some((raw, end)) = length_coded(data, at) else {
                return Ok(None);
            };
            at = end;
            values.push(match raw {
                None => py.None().into_bound(py),
                Some(raw) => match self.fast(py, *kind, raw)? {
                    Some(value) => value,
                    None => slow.bind(py).call1((PyBytes::new(py, raw),))?,
                },
            });
        }
        if at != data.len() {
            return Ok(None);
        }
        Ok(Some(PyTuple::new(py, values)?))
    }
}
