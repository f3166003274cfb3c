//! Native decoding of binlog row images into the Python values dbus documents.
//!
//! A `Plan` is one table version's columns, each with the kind of value it holds
//! and that kind's parameters, as `dbus_fn.capture._native` derives them from the
//! Python readers (`dbus_fn.capture._column_readers`), which stay the reference:
//! every column also carries its Python reader, and a value this module does not
//! decode itself (JSON, geometry, a text in a character set other than UTF-8, a
//! UUID or INET shown as text, a malformed or truncated image) is read by it, so
//! both paths give the same values and raise the same errors.
//!
//! `encode` writes row images back out as the JSON text of Kafka messages;
//! `text_rows` reads the rows of a snapshot's SELECT; `events` splits the
//! replication connection's bytes into the binlog's events.

mod encode;
mod events;
mod text_rows;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDate, PyDateTime, PyDelta, PyDict, PyFrozenSet, PyList, PyString, PyTuple, PyTzInfo};

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The column's Python reader decodes it.
    Python,
    /// A little-endian integer of 1, 2, 3, 4 or 8 bytes.
    Int { width: usize, signed: bool },
    /// A FLOAT as the server shows it: rounded to 6 significant digits.
    Float,
    Double,
    Decimal { precision: usize, scale: usize },
    Year,
    /// UTF-8 text after a little-endian length of `prefix` bytes.
    Utf8 { prefix: usize },
    Bytes { prefix: usize },
    /// BINARY(width): logged without its trailing zero bytes.
    Padded { prefix: usize, width: usize },
    Date,
    DateTime2 { fsp: usize },
    Timestamp2 { fsp: usize },
    Time2 { fsp: usize },
    Enum { size: usize },
    Set { size: usize },
    Bit { size: usize },
    /// MySQL 9's VECTOR after a length of `prefix` bytes: little-endian float32s.
    Vector { prefix: usize },
}

struct Column {
    name: Py<PyString>,
    kind: Kind,
    labels: Vec<Py<PyString>>,
    reader: Py<PyAny>,
}

/// Helpers the values are made with, taken from Python once per plan.
struct Makers {
    decimal: Py<PyAny>,
    zero_date_text: Py<PyAny>,
    zero_timestamp: Py<PyAny>,
    utc: Py<PyTzInfo>,
}

#[pyclass(frozen, module = "dbus_native")]
struct Plan {
    columns: Vec<Column>,
    makers: Makers,
}

const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
const MICROS_PER_DAY: i64 = 86_400_000_000;

fn decimal_size(precision: usize, scale: usize) -> usize {
    let integral = precision - scale;
    DIG2BYTES[integral % 9] + 4 * (integral / 9 + scale / 9) + DIG2BYTES[scale % 9]
}

fn kind_of(name: &str, a: usize, b: usize) -> PyResult<Kind> {
    Ok(match name {
        "python" => Kind::Python,
        "int" | "uint" if matches!(a, 1 | 2 | 3 | 4 | 8) => Kind::Int { width: a, signed: name == "int" },
        "float" => Kind::Float,
        "double" => Kind::Double,
        "decimal" if b <= a && a <= 65 => Kind::Decimal { precision: a, scale: b },
        "year" => Kind::Year,
        "utf8" if matches!(a, 1..=4) => Kind::Utf8 { prefix: a },
        "bytes" if matches!(a, 1..=4) => Kind::Bytes { prefix: a },
        "padded" if matches!(a, 1..=4) => Kind::Padded { prefix: a, width: b },
        "date" => Kind::Date,
        "datetime2" if a <= 6 => Kind::DateTime2 { fsp: a },
        "timestamp2" if a <= 6 => Kind::Timestamp2 { fsp: a },
        "time2" if a <= 6 => Kind::Time2 { fsp: a },
        "enum" if matches!(a, 1 | 2) => Kind::Enum { size: a },
        "set" if matches!(a, 1..=8) => Kind::Set { size: a },
        "bit" if matches!(a, 1..=8) => Kind::Bit { size: a },
        "vector" if matches!(a, 1..=4) => Kind::Vector { prefix: a },
        _ => {
            return Err(PyValueError::new_err(format!(
                "no native column kind {name:?} with ({a}, {b}); decode it in Python (kind \"python\")"
            )))
        }
    })
}

fn little(data: &[u8], at: usize, width: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(width)?)?;
    Some(bytes.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

fn big(data: &[u8], at: usize, width: usize) -> Option<u64> {
    let bytes = data.get(at..at.checked_add(width)?)?;
    Some(bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

/// Fractional seconds of a DATETIME2, TIMESTAMP2 or TIME2: (bytes, microseconds).
fn fraction(data: &[u8], at: usize, fsp: usize) -> Option<(usize, i64)> {
    let size = (fsp + 1) / 2;
    if size == 0 {
        return Some((0, 0));
    }
    let scale = 10i64.pow((6 - 2 * size) as u32);
    Some((size, big(data, at, size)? as i64 * scale))
}

/// Days since 1970-01-01 as a proleptic Gregorian (year, month, day).
fn civil(days: i64) -> (i64, u8, u8) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u8;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u8;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn decimal_text(data: &[u8], at: usize, precision: usize, scale: usize) -> Option<(String, usize)> {
    let size = decimal_size(precision, scale);
    let mut raw = data.get(at..at.checked_add(size)?)?.to_vec();
    if raw.is_empty() {
        return None;
    }
    let negative = raw[0] & 0x80 == 0;
    raw[0] ^= 0x80;
    if negative {
        for byte in raw.iter_mut() {
            *byte ^= 0xFF;
        }
    }
    let integral = precision - scale;
    let (lead_digits, int_words) = (integral % 9, integral / 9);
    let (frac_words, tail_digits) = (scale / 9, scale % 9);
    let (lead_size, tail_size) = (DIG2BYTES[lead_digits], DIG2BYTES[tail_digits]);
    let mut text = String::with_capacity(precision + 3);
    if negative {
        text.push('-');
    }
    let mut pos = 0;
    if lead_size > 0 {
        text.push_str(&big(&raw, 0, lead_size)?.to_string());
        pos = lead_size;
    }
    for _ in 0..int_words {
        text.push_str(&format!("{:09}", big(&raw, pos, 4)?));
        pos += 4;
    }
    if scale > 0 {
        text.push('.');
        for _ in 0..frac_words {
            text.push_str(&format!("{:09}", big(&raw, pos, 4)?));
            pos += 4;
        }
        if tail_size > 0 {
            let tail = big(&raw, pos, tail_size)?;
            text.push_str(&format!("{:0width$}", tail, width = tail_digits));
        }
    }
    if text.is_empty() || text == "-" || text.starts_with('.') || text.starts_with("-.") {
        text = if text.contains('.') { text.replace('.', "0.") } else { text + "0" };
    }
    Some((text, at + size))
}

/// A FLOAT's single-precision value rounded to 6 significant digits, as SELECT shows it.
fn six_digits(value: f32) -> f64 {
    let wide = f64::from(value);
    if !wide.is_finite() {
        return wide;
    }
    format!("{wide:.5e}").parse().unwrap_or(wide)
}

/// A VECTOR's float32 as the shortest decimal that reads back as the same float32:
/// of 1 to 9 significant digits, the first whose correctly rounded value does, as
/// the Python reader (`vector_values`) finds it, ties included.
fn shortest(value: f32) -> f64 {
    let wide = f64::from(value);
    if !wide.is_finite() {
        return wide;
    }
    for digits in 0..9 {
        if let Ok(candidate) = format!("{wide:.digits$e}").parse::<f64>() {
            if (candidate as f32).to_bits() == value.to_bits() {
                return candidate;
            }
        }
    }
    wide
}

impl Plan {
    /// One value, or None where the Python reader must decode it.
    fn value<'py>(
        &self,
        py: Python<'py>,
        column: &Column,
        data: &[u8],
        at: usize,
    ) -> PyResult<Option<(Bound<'py, PyAny>, usize)>> {
        let made = match column.kind {
            Kind::Python => None,
            Kind::Int { width, signed } => match little(data, at, width) {
                None => None,
                Some(raw) if signed => {
                    let shift = 64 - 8 * width as u32;
                    let value = ((raw << shift) as i64) >> shift;
                    Some((value.into_pyobject(py)?.into_any(), at + width))
                }
                Some(raw) => Some((raw.into_pyobject(py)?.into_any(), at + width)),
            },
            Kind::Float => match little(data, at, 4) {
                None => None,
                Some(raw) => {
                    let value = six_digits(f32::from_bits(raw as u32));
                    Some((value.into_pyobject(py)?.into_any(), at + 4))
                }
            },
            Kind::Double => match little(data, at, 8) {
                None => None,
                Some(raw) => Some((f64::from_bits(raw).into_pyobject(py)?.into_any(), at + 8)),
            },
            Kind::Decimal { precision, scale } => match decimal_text(data, at, precision, scale) {
                None => None,
                Some((text, end)) => Some((self.makers.decimal.bind(py).call1((text,))?, end)),
            },
            Kind::Year => match data.get(at) {
                None => None,
                Some(&year) => {
                    let value: u32 = if year == 0 { 0 } else { u32::from(year) + 1900 };
                    Some((value.into_pyobject(py)?.into_any(), at + 1))
                }
            },
            Kind::Utf8 { prefix } => match length_prefixed(data, at, prefix) {
                None => None,
                Some((bytes, end)) => match std::str::from_utf8(bytes) {
                    Ok(text) => Some((PyString::new(py, text).into_any(), end)),
                    Err(_) => None, // the Python reader raises the same UnicodeDecodeError
                },
            },
            Kind::Bytes { prefix } => length_prefixed(data, at, prefix)
                .map(|(bytes, end)| (PyBytes::new(py, bytes).into_any(), end)),
            Kind::Padded { prefix, width } => match length_prefixed(data, at, prefix) {
                None => None,
                Some((bytes, end)) if bytes.len() >= width => Some((PyBytes::new(py, bytes).into_any(), end)),
                Some((bytes, end)) => {
                    let mut padded = bytes.to_vec();
                    padded.resize(width, 0);
                    Some((PyBytes::new(py, &padded).into_any(), end))
                }
            },
            Kind::Date => match little(data, at, 3) {
                None => None,
                Some(raw) => {
                    let (day, month, year) = ((raw & 31) as u8, ((raw >> 5) & 15) as u8, (raw >> 9) as i32);
                    let value = match PyDate::new(py, year, month, day) {
                        Ok(date) => date.into_any(),
                        Err(_) => self.makers.zero_date_text.bind(py).call1(("date", year, month, day))?,
                    };
                    Some((value, at + 3))
                }
            },
            Kind::DateTime2 { fsp } => self.datetime2(py, data, at, fsp)?,
            Kind::Timestamp2 { fsp } => match (big(data, at, 4), fraction(data, at + 4, fsp)) {
                (Some(seconds), Some((size, micro))) if micro < 1_000_000 => {
                    let end = at + 4 + size;
                    if seconds == 0 && micro == 0 {
                        Some((self.makers.zero_timestamp.bind(py).clone(), end))
                    } else {
                        let seconds = seconds as i64;
                        let (year, month, day) = civil(seconds.div_euclid(86_400));
                        let clock = seconds.rem_euclid(86_400);
                        let value = PyDateTime::new(
                            py, year as i32, month, day, (clock / 3600) as u8, (clock / 60 % 60) as u8,
                            (clock % 60) as u8, micro as u32, Some(self.makers.utc.bind(py)),
                        )?;
                        Some((value.into_any(), end))
                    }
                }
                _ => None,
            },
            Kind::Time2 { fsp } => match time2_micros(data, at, fsp) {
                None => None,
                Some((total, end)) => {
                    let days = total.div_euclid(MICROS_PER_DAY);
                    let rest = total.rem_euclid(MICROS_PER_DAY);
                    let value = PyDelta::new(
                        py, days as i32, (rest / 1_000_000) as i32, (rest % 1_000_000) as i32, true,
                    )?;
                    Some((value.into_any(), end))
                }
            },
            Kind::Enum { size } => match little(data, at, size) {
                None => None,
                Some(0) => Some((PyString::new(py, "").into_any(), at + size)),
                Some(index) => column
                    .labels
                    .get(index as usize - 1)
                    .map(|label| (label.bind(py).clone().into_any(), at + size)),
            },
            Kind::Set { size } => match little(data, at, size) {
                None => None,
                Some(mask) => {
                    let chosen = column
                        .labels
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i < 64 && mask >> i & 1 == 1)
                        .map(|(_, label)| label.bind(py).clone());
                    Some((PyFrozenSet::new(py, chosen)?.into_any(), at + size))
                }
            },
            Kind::Bit { size } => match big(data, at, size) {
                None => None,
                Some(value) => Some((value.into_pyobject(py)?.into_any(), at + size)),
            },
            Kind::Vector { prefix } => match length_prefixed(data, at, prefix) {
                Some((bytes, end)) if bytes.len() % 4 == 0 => {
                    let values = bytes.chunks_exact(4).map(|four| {
                        shortest(f32::from_le_bytes([four[0], four[1], four[2], four[3]]))
                    });
                    Some((PyList::new(py, values)?.into_any(), end))
                }
                _ => None,
            },
        };
        Ok(made)
    }

    fn datetime2<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        at: usize,
        fsp: usize,
    ) -> PyResult<Option<(Bound<'py, PyAny>, usize)>> {
        let (Some(raw), Some((size, micro))) = (big(data, at, 5), fraction(data, at + 5, fsp)) else {
            return Ok(None);
        };
        let packed = raw as i64 - 0x80_0000_0000;
        if packed < 0 {
            return Ok(None); // no valid DATETIME packs below zero
        }
        let (ymd, hms) = (packed >> 17, packed & 0x1FFFF);
        let year_month = ymd >> 5;
        let (year, month, day) = ((year_month / 13) as i32, (year_month % 13) as u8, (ymd & 31) as u8);
        let (hour, minute, second) = ((hms >> 12) as u8, ((hms >> 6) & 63) as u8, (hms & 63) as u8);
        let end = at + 5 + size;
        let value = match PyDateTime::new(py, year, month, day, hour, minute, second, micro as u32, None) {
            Ok(value) => value.into_any(),
            Err(_) => self
                .makers
                .zero_date_text
                .bind(py)
                .call1(("datetime", year, month, day, hour, minute, second, micro))?,
        };
        Ok(Some((value, end)))
    }

    fn image<'py>(
        &self,
        py: Python<'py>,
        whole: &Bound<'py, PyBytes>,
        data: &[u8],
        mut at: usize,
        selected: &[usize],
    ) -> PyResult<(Bound<'py, PyDict>, usize)> {
        let width = (selected.len() + 7) >> 3;
        let nulls = data
            .get(at..at + width)
            .ok_or_else(|| PyValueError::new_err("a row image ends inside its null bitmap"))?;
        at += width;
        let image = PyDict::new(py);
        for (i, &index) in selected.iter().enumerate() {
            let column = &self.columns[index];
            let name = column.name.bind(py);
            if nulls[i >> 3] >> (i & 7) & 1 == 1 {
                image.set_item(name, py.None())?;
                continue;
            }
            let (value, end) = match self.value(py, column, data, at)? {
                Some(made) => made,
                None => column.reader.bind(py).call1((whole, at))?.extract()?,
            };
            image.set_item(name, value)?;
            at = end;
        }
        Ok((image, at))
    }

    fn selection(&self, present: &[u8]) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|&i| present.get(i >> 3).is_some_and(|byte| byte >> (i & 7) & 1 == 1))
            .collect()
    }
}

fn length_prefixed(data: &[u8], at: usize, prefix: usize) -> Option<(&[u8], usize)> {
    let length = little(data, at, prefix)? as usize;
    let start = at + prefix;
    let end = start.checked_add(length)?;
    Some((data.get(start..end)?, end))
}

/// A TIME2 as signed microseconds, and where it ends. Negative values keep their
/// fraction as a borrow from the integer part, undone before the sign applies.
fn time2_micros(data: &[u8], at: usize, fsp: usize) -> Option<(i64, usize)> {
    let size = (fsp + 1) / 2;
    let mut intpart = big(data, at, 3)? as i64 - 0x80_0000;
    let packed = match size {
        0 => intpart << 24,
        1 => {
            let mut fraction = i64::from(*data.get(at + 3)?);
            if intpart < 0 && fraction != 0 {
                intpart += 1;
                fraction -= 0x100;
            }
            (intpart << 24) + fraction * 10_000
        }
        2 => {
            let mut fraction = big(data, at + 3, 2)? as i64;
            if intpart < 0 && fraction != 0 {
                intpart += 1;
                fraction -= 0x1_0000;
            }
            (intpart << 24) + fraction * 100
        }
        _ => big(data, at, 6)? as i64 - 0x8000_0000_0000,
    };
    let negative = packed < 0;
    let packed = packed.abs();
    let (hms, micro) = (packed >> 24, packed & 0xFF_FFFF);
    let seconds = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63);
    let total = seconds * 1_000_000 + micro;
    Some((if negative { -total } else { total }, at + 3 + size))
}

#[pymethods]
impl Plan {
    /// `columns`: per column of the table map, (name, kind, a, b, labels, reader);
    /// `makers`: (decimal.Decimal, zero_date_text, the zero TIMESTAMP's text, UTC).
    #[new]
    fn new(columns: Vec<(Py<PyString>, String, usize, usize, Vec<Py<PyString>>, Py<PyAny>)>,
           makers: (Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyTzInfo>)) -> PyResult<Self> {
        let columns = columns
            .into_iter()
            .map(|(name, kind, a, b, labels, reader)| {
                Ok(Column { name, kind: kind_of(&kind, a, b)?, labels, reader })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (decimal, zero_date_text, zero_timestamp, utc) = makers;
        Ok(Plan { columns, makers: Makers { decimal, zero_date_text, zero_timestamp, utc } })
    }

    /// Every row of a rows event's body: a list of (image, after image or None).
    #[pyo3(signature = (data, present, present_after=None))]
    fn images<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyBytes>,
        present: &[u8],
        present_after: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        let bytes = data.as_bytes();
        let first = self.selection(present);
        let second = present_after.map(|bits| self.selection(bits));
        let rows = PyList::empty(py);
        let mut at = 0;
        while at < bytes.len() {
            let (image, end) = self.image(py, data, bytes, at, &first)?;
            at = end;
            let after = match &second {
                None => py.None().into_bound(py),
                Some(selected) => {
                    let (after, end) = self.image(py, data, bytes, at, selected)?;
                    at = end;
                    after.into_any()
                }
            };
            rows.append(PyTuple::new(py, [image.into_any(), after])?)?;
        }
        Ok(rows)
    }
}

#[pymodule]
fn dbus_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Plan>()?;
    module.add_class::<encode::ImageEncoder>()?;
    module.add_class::<text_rows::TextRows>()?;
    module.add_function(wrap_pyfunction!(events::split_events, module)?)?;
    Ok(())
}
