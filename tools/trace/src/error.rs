//! What is wrong with a trace file.

use crate::{CSV_HEADER, CSV_OPTIONAL};

/// What is wrong with a trace file: each names the file and, where there is one, the line, the
/// field and its rule.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read {name}: {source}")]
    Read {
        /// The file.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The CSV header is not [`CSV_HEADER`] (with or without [`CSV_OPTIONAL`]).
    #[error(
        "{name}:{line}: the header must be `{}`, optionally followed by `,{}` (got `{got}`)",
        CSV_HEADER.join(","),
        CSV_OPTIONAL.join(",")
    )]
    Header {
        /// The file.
        name: String,
        /// Its line.
        line: usize,
        /// The line found.
        got: String,
    },
    /// A CSV line has another number of fields than the header.
    #[error("{name}:{line}: {got} fields, expected {expected} ({columns})")]
    Fields {
        /// The file.
        name: String,
        /// Its line.
        line: usize,
        /// Fields found.
        got: usize,
        /// Fields the header names.
        expected: usize,
        /// The header's columns.
        columns: String,
    },
    /// CSV the reader cannot split into records.
    #[error("{name}:{line}: {message}")]
    Csv {
        /// The file.
        name: String,
        /// Its line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A CSV field breaks its rule.
    #[error("{name}:{line}: field {field}: {rule}")]
    Field {
        /// The file.
        name: String,
        /// Its line.
        line: usize,
        /// The column.
        field: &'static str,
        /// The value and the rule it breaks.
        rule: String,
    },
    /// JSON that does not parse, or a field that breaks its rule.
    #[error("{name}:{line}:{column}: {message}")]
    Json {
        /// The file.
        name: String,
        /// Its line.
        line: usize,
        /// Its column.
        column: usize,
        /// What is wrong (the field and its rule, where one is broken).
        message: String,
    },
    /// A CSV file without a header.
    #[error(
        "{name}: empty: a trace needs the header `{}` and at least one dispatch",
        CSV_HEADER.join(",")
    )]
    Empty {
        /// The file.
        name: String,
    },
    /// A dispatch whose grid a HIP launch cannot take.
    #[error(
        "{name}: dispatch {dispatch}: {workgroups} work-groups: a HIP launch takes at most {}",
        u32::MAX
    )]
    Grid {
        /// The file.
        name: String,
        /// The dispatch, from 1 in file order.
        dispatch: usize,
        /// Its work-groups.
        workgroups: u64,
    },
    /// A file without a dispatch.
    #[error("{name}: no dispatches: a trace needs at least one")]
    NoDispatches {
        /// The file.
        name: String,
    },
}
