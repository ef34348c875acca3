//! The CSV form: a header line naming the five columns of [`CSV_HEADER`] in order, optionally
//! followed by the two of [`CSV_OPTIONAL`], then one dispatch a line. Blank lines and lines
//! starting with `#` are skipped; fields are trimmed; no quoting. Read with the `csv` crate,
//! which gives each record's line for the errors.

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
    let cell = |i: usize| &cells[i];
    let workgroups = cell(0)
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| ("workgroups", rules::workgroups(cell(0))))?;
    let waves_per_wg = cell(1)
        .parse::<u32>()
        .ok()
        .filter(|n| rules::waves_ok(*n))
        .ok_or_else(|| ("waves_per_wg", rules::waves(cell(1))))?;
    let wg_us = cell(2)
        .parse::<f64>()
        .ok()
        .filter(|x| rules::wg_us_ok(*x))
        .ok_or_else(|| ("wg_us", rules::wg_us(cell(2))))?;
    let stream = cell(3)
        .parse::<u32>()
        .map_err(|_| ("stream", rules::stream(cell(3))))?;
    let barrier = match cell(4) {
        "1" | "true" => true,
        "0" | "false" => false,
        other => return Err(("barrier", rules::barrier(other))),
    };
    let footprint = if footprint {
        let cu_util = cell(5)
            .parse::<f64>()
            .ok()
            .filter(|x| rules::cu_util_ok(*x))
            .ok_or_else(|| ("cu_util", rules::cu_util(cell(5))))?;
        let dram_bytes = cell(6)
            .parse::<f64>()
            .ok()
            .filter(|x| rules::dram_bytes_ok(*x))
            .ok_or_else(|| ("dram_bytes", rules::dram_bytes(cell(6))))?;
        Some(Footprint {
            cu_util,
            dram_bytes,
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
