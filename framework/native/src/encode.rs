//! Row images as JSON text, the way the Kafka binding writes them.
//!
//! An `ImageEncoder` is one table shape's columns, each with the family of its
//! declared type (`dbus_fn.columns`), as `dbus_fn.row_json.row_json_encoder` derives
//! them. `encode` writes a row (a dict of column name to value) as
//! `json.dumps(row_to_json(row, types))` would: the same separators, the same
//! `ensure_ascii` escapes, the same text for every value. The Python codecs stay
//! the reference: a value this module does not write itself (a subclass, a zero
//! date, a TIMESTAMP in another zone, a JSON column) goes through the column's
//! Python codec, and a row it cannot write at all (an unknown column, a value that
//! does not fit its type) gives None, so the caller takes the Python path, which
//! names the problem.

use std::collections::HashMap;
use std::fmt::Write;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyDate, PyDateAccess, PyDateTime, PyDelta, PyDeltaAccess, PyDict, PyFloat,
    PyFrozenSet, PyInt, PySet, PyString, PyTimeAccess, PyType, PyTzInfoAccess,
};

#[derive(Clone, Copy)]
enum Family {
    Int { low: i128, high: i128 },
    Float,
    Date,
    Time,
    DateTime,
    Timestamp,
    Year,
    Text,
    Bytes,
    Set,
    /// The column's Python codec gives the value's JSON text (`python`) or a string
    /// the JSON holds quoted (`pystr`, a DECIMAL's digits).
    Python { quoted: bool },
}

struct Column {
    name: Py<PyString>,
    family: Family,
    codec: Py<PyAny>,
}

#[pyclass(frozen, module = "dbus_native")]
pub struct ImageEncoder {
    columns: Vec<Column>,
    by_name: HashMap<String, usize>,
    date: Py<PyType>,
    datetime: Py<PyType>,
    utc: Py<PyAny>,
}

/// Why a value is not written here: the Python path writes it, or refuses it.
struct Refused;

type Written = Result<(), Refused>;

fn family_of(name: &str, low: i128, high: i128) -> PyResult<Family> {
    Ok(match name {
        "int" => Family::Int { low, high },
        "float" => Family::Float,
        "date" => Family::Date,
        "time" => Family::Time,
        "datetime" => Family::DateTime,
        "timestamp" => Family::Timestamp,
        "year" => Family::Year,
        "text" => Family::Text,
        "bytes" => Family::Bytes,
        "set" => Family::Set,
        "python" => Family::Python { quoted: false },
        "pystr" => Family::Python { quoted: true },
        _ => return Err(PyValueError::new_err(format!("no native column family {name:?}"))),
    })
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `text` as a JSON string with `ensure_ascii`: every character outside space to
/// tilde escaped, as `\uXXXX` (a surrogate pair above U+FFFF) unless it has a
/// short form.
fn quote(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str("\\u");
                    for shift in [12, 8, 4, 0] {
                        out.push(HEX[usize::from((*unit >> shift) & 15)] as char);
                    }
                }
            }
        }
    }
    out.push('"');
}

fn base64(out: &mut String, data: &[u8]) {
    out.push('"');
    for chunk in data.chunks(3) {
        let bytes = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let joined = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((joined >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out.push('"');
}

fn fraction(out: &mut String, micro: u32) {
    if micro != 0 {
        let _ = write!(out, ".{micro:06}");
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]`, as `datetime.isoformat` writes a naive one.
fn moment(out: &mut String, value: &Bound<'_, PyDateTime>) {
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        value.get_year(),
        value.get_month(),
        value.get_day(),
        value.get_hour(),
        value.get_minute(),
        value.get_second()
    );
    fraction(out, value.get_microsecond());
}

impl ImageEncoder {
    fn value(&self, py: Python<'_>, out: &mut String, column: &Column, value: &Bound<'_, PyAny>) -> Written {
        match column.family {
            Family::Int { low, high } => {
                let number: i128 = if value.is_exact_instance_of::<PyInt>() {
                    value.extract().map_err(|_| Refused)?
                } else if value.is_exact_instance_of::<PyBool>() {
                    i128::from(value.is_truthy().map_err(|_| Refused)?)
                } else {
                    return Err(Refused);
                };
                if number < low || number > high {
                    return Err(Refused);
                }
                let _ = write!(out, "{number}");
            }
            Family::Year => {
                if !value.is_exact_instance_of::<PyInt>() {
                    return Err(Refused);
                }
                let year: i64 = value.extract().map_err(|_| Refused)?;
                if year != 0 && !(1901..=2155).contains(&year) {
                    return Err(Refused);
                }
                let _ = write!(out, "{year}");
            }
            Family::Float => {
                let float = value.cast_exact::<PyFloat>().map_err(|_| Refused)?;
                if !float.value().is_finite() {
                    return Err(Refused);
                }
                out.push_str(&float.repr().map_err(|_| Refused)?.to_string());
            }
            Family::Text => {
                let text = value.cast::<PyString>().map_err(|_| Refused)?;
                quote(out, &text.to_str().map_err(|_| Refused)?);
            }
            Family::Bytes => {
                let bytes = value.cast_exact::<PyBytes>().map_err(|_| Refused)?;
                base64(out, bytes.as_bytes());
            }
            Family::Date => {
                if !value.get_type().is(self.date.bind(py)) {
                    return Err(Refused);
                }
                let date = value.cast::<PyDate>().map_err(|_| Refused)?;
                let _ = write!(out, "\"{:04}-{:02}-{:02}\"", date.get_year(), date.get_month(), date.get_day());
            }
            Family::DateTime | Family::Timestamp => {
                if !value.get_type().is(self.datetime.bind(py)) {
                    return Err(Refused);
                }
                let moment_value = value.cast::<PyDateTime>().map_err(|_| Refused)?;
                let zone = moment_value.get_tzinfo();
                let utc = match (column.family, zone) {
                    (Family::DateTime, None) => false,
                    (Family::Timestamp, Some(zone)) if zone.is(self.utc.bind(py)) => true,
                    _ => return Err(Refused),
                };
                out.push('"');
                moment(out, moment_value);
                if utc {
                    out.push('Z');
                }
                out.push('"');
            }
            Family::Time => {
                let delta = value.cast::<PyDelta>().map_err(|_| Refused)?;
                let total = (i64::from(delta.get_days()) * 86_400 + i64::from(delta.get_seconds())) * 1_000_000
                    + i64::from(delta.get_microseconds());
                let sign = if total < 0 { "-" } else { "" };
                let (seconds, micro) = (total.abs() / 1_000_000, (total.abs() % 1_000_000) as u32);
                let (minutes, second) = (seconds / 60, seconds % 60);
                let (hours, minute) = (minutes / 60, minutes % 60);
                let _ = write!(out, "\"{sign}{hours:02}:{minute:02}:{second:02}");
                fraction(out, micro);
                out.push('"');
            }
            Family::Set => {
                let mut members: Vec<String> = Vec::new();
                let items = if let Ok(set) = value.cast_exact::<PyFrozenSet>() {
                    set.iter().collect::<Vec<_>>()
                } else if let Ok(set) = value.cast_exact::<PySet>() {
                    set.iter().collect::<Vec<_>>()
                } else {
                    return Err(Refused);
                };
                for member in items {
                    let text = member.cast::<PyString>().map_err(|_| Refused)?;
                    members.push(text.to_str().map_err(|_| Refused)?.to_owned());
                }
                members.sort_unstable(); // UTF-8 byte order is code point order, as Python sorts
                out.push('[');
                for (i, member) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    quote(out, member);
                }
                out.push(']');
            }
            Family::Python { quoted } => {
                let made = column.codec.bind(py).call1((value,)).map_err(|_| Refused)?;
                let text = made.cast::<PyString>().map_err(|_| Refused)?;
                let text = text.to_str().map_err(|_| Refused)?;
                if quoted {
                    quote(out, &text);
                } else {
                    out.push_str(&text);
                }
            }
        }
        Ok(())
    }

    fn column(&self, py: Python<'_>, at: usize, name: &Bound<'_, PyString>) -> Option<&Column> {
        // Rows come in their table's column order: the name at the same place first.
        if let Some(column) = self.columns.get(at) {
            if column.name.bind(py).is(name) {
                return Some(column);
            }
        }
        let text = name.to_str().ok()?;
        self.by_name.get(&*text).map(|&i| &self.columns[i])
    }
}

#[pymethods]
impl ImageEncoder {
    /// `columns`: per column, (name, family, low, high, codec): `low` and `high`
    /// bound an integer family; `codec` writes a `python` family's value as JSON
    /// text, and a `pystr` family's as the string the JSON quotes. `types`: the
    /// `datetime.date` and `datetime.datetime` classes and `datetime.UTC`.
    #[new]
    fn new(
        columns: Vec<(Py<PyString>, String, i128, i128, Py<PyAny>)>,
        types: (Py<PyType>, Py<PyType>, Py<PyAny>),
        py: Python<'_>,
    ) -> PyResult<Self> {
        let mut by_name = HashMap::new();
        let columns = columns
            .into_iter()
            .enumerate()
            .map(|(i, (name, family, low, high, codec))| {
                by_name.insert(name.bind(py).to_str()?.to_owned(), i);
                Ok(Column { name, family: family_of(&family, low, high)?, codec })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (date, datetime, utc) = types;
        Ok(ImageEncoder { columns, by_name, date, datetime, utc })
    }

    /// The row's JSON object text, or None where the Python path must write it.
    fn encode(&self, py: Python<'_>, row: &Bound<'_, PyDict>) -> Option<String> {
        let mut out = String::with_capacity(32 * row.len() + 2);
        out.push('{');
        for (at, (name, value)) in row.iter().enumerate() {
            let name = name.cast::<PyString>().ok()?;
            let column = self.column(py, at, name)?;
            if at > 0 {
                out.push_str(", ");
            }
            quote(&mut out, &name.to_str().ok()?);
            out.push_str(": ");
            if value.is_none() {
                out.push_str("null");
            } else {
                self.value(py, &mut out, column, &value).ok()?;
            }
        }
        out.push('}');
        Some(out)
    }
}
