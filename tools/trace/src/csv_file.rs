//! The CSV form: a header line naming the five columns of [`CSV_HEADER`] in order, optionally
//! followed by the two of [`CSV_OPTIONAL`], then one dispatch a line. Blank lines and lines
//! starting with `#` are skipped; fields are trimmed; no quoting. Read with the `csv` crate,
//! which gives each record's line for the errors.

use std::str::FromStr;

use csv::{ReaderBuilder, StringRecord, Trim};

use crate::record::{Dispatch, Footprint};
use crate::{CSV_HEADER, CSV_OPTIONAL, TraceError, rules};

/// The dispatches of the CSV text `text` of the file `name`.
pub(crate) fn read(name: &str, text: &str) -> Result<Vec<Dispatch>, TraceError> {
    let full: Vec<&str> = CSV_HEADER.iter().chain(&CSV_OPTIONAL).copied().collect();
    let mut reader = ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .quoting(false)
        .comment(Some(b'#'))
        .trim(Trim::All)
        .from_reader(text.as_bytes());
    let mut columns = None;
    let mut dispatches = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| TraceError::Csv {
            name: name.into(),
            line: e.position().map_or(0, |p| p.line() as usize),
            message: e.to_string(),
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        // A line of blanks, or a comment after blanks.
        if record.iter().all(str::is_empty) || record.get(0).is_some_and(|c| c.starts_with('#')) {
            continue;
        }
        let Some(columns) = columns else {
            let cells: Vec<&str> = record.iter().collect();
            columns = if cells == full {
                Some(full.len())
            } else if cells == CSV_HEADER {
                Some(CSV_HEADER.len())
            } else {
                return Err(TraceError::Header {
                    name: name.into(),
                    line,
                    got: cells.join(","),
                });
            };
            continue;
        };
        if record.len() != columns {
            return Err(TraceError::Fields {
                name: name.into(),
                line,
                got: record.len(),
                expected: columns,
                columns: full[..columns].join(","),
            });
        }
        dispatches.push(dispatch(&record, columns > CSV_HEADER.len()).map_err(
            |(field, rule)| TraceError::Field {
                name: name.into(),
                line,
                field,
                rule,
            },
        )?);
    }
    if columns.is_none() {
        return Err(TraceError::Empty { name: name.into() });
    }
    Ok(dispatches)
}

/// One record's dispatch, or the field that breaks its rule and the rule.
fn dispatch(cells: &StringRecord, footprint: bool) -> Result<Dispatch, (&'static str, String)> {
    // In column order: the first bad field is the one named.
    let workgroups = field(&cells[0], "workgroups", |n| n >= 1, rules::workgroups)?;
    let waves_per_wg = field(&cells[1], "waves_per_wg", rules::waves_ok, rules::waves)?;
    let wg_us = field(&cells[2], "wg_us", rules::wg_us_ok, rules::wg_us)?;
    let stream = field(&cells[3], "stream", |_| true, rules::stream)?;
    let barrier = match &cells[4] {
        "1" | "true" => true,
        "0" | "false" => false,
        other => return Err(("barrier", rules::barrier(other))),
    };
    let footprint = if footprint {
        Some(Footprint {
            cu_util: field(&cells[5], "cu_util", rules::cu_util_ok, rules::cu_util)?,
            dram_bytes: field(
                &cells[6],
                "dram_bytes",
                rules::dram_bytes_ok,
                rules::dram_bytes,
            )?,
        })
    } else {
        None
    };
    Ok(Dispatch {
        workgroups,
        waves_per_wg,
        wg_us,
        stream,
        barrier,
        footprint,
    })
}

/// The value of `cell` if it parses and passes `ok`, else the field and its rule.
fn field<T: FromStr + Copy>(
    cell: &str,
    name: &'static str,
    ok: impl Fn(T) -> bool,
    rule: fn(&str) -> String,
) -> Result<T, (&'static str, String)> {
    cell.parse::<T>()
        .ok()
        .filter(|v| ok(*v))
        .ok_or_else(|| (name, rule(cell)))
}
