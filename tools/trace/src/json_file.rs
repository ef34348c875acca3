//! The JSON form: `{"dispatches": [{"workgroups": 64, "waves_per_wg": 4, "wg_us": 40,
//! "stream": 0, "barrier": false}, ...]}`, optionally with `cu_util` and `dram_bytes`; no other
//! field is allowed. A value that breaks its rule is refused with serde_json's position.

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::record::{Dispatch, Footprint};
use crate::{TraceError, rules};

/// The dispatches of the JSON text `text` of the file `name`.
pub(crate) fn read(name: &str, text: &str) -> Result<Vec<Dispatch>, TraceError> {
    let file: JsonFile = serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        // serde_json appends " at line L column C"; put the position first, as for CSV.
        let msg = msg
            .rsplit_once(" at line ")
            .map_or(msg.as_str(), |(m, _)| m)
            .to_string();
        TraceError::Json {
            name: name.into(),
            line: e.line(),
            column: e.column(),
            message: msg,
        }
    })?;
    Ok(file
        .dispatches
        .into_iter()
        .map(|d| Dispatch {
            workgroups: d.workgroups.0,
            waves_per_wg: d.waves_per_wg.0,
            wg_us: d.wg_us.0,
            stream: d.stream,
            barrier: d.barrier,
            footprint: (d.cu_util.is_some() || d.dram_bytes.is_some()).then(|| Footprint {
                cu_util: d.cu_util.map_or(0.0, |c| c.0),
                dram_bytes: d.dram_bytes.map_or(0.0, |b| b.0),
            }),
        })
        .collect())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonFile {
    dispatches: Vec<JsonDispatch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDispatch {
    workgroups: Workgroups,
    waves_per_wg: Waves,
    wg_us: WgUs,
    stream: u32,
    barrier: bool,
    #[serde(default, deserialize_with = "present")]
    cu_util: Option<CuUtil>,
    #[serde(default, deserialize_with = "present")]
    dram_bytes: Option<DramBytes>,
}

/// An optional field that, where present, is a value (`null` is refused, not read as absent).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

struct Workgroups(u64);
struct Waves(u32);
struct WgUs(f64);
struct CuUtil(f64);
struct DramBytes(f64);

/// A number that must pass `ok`, else the error names `field` and its rule.
fn checked<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    ok: impl Fn(f64) -> bool,
    rule: fn(&str) -> String,
) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if ok(v) {
        Ok(v)
    } else {
        Err(de::Error::custom(format!(
            "field {field}: {}",
            rule(&v.to_string())
        )))
    }
}

impl<'de> Deserialize<'de> for Workgroups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ok = |v: f64| v >= 1.0 && v.fract() == 0.0 && v <= u64::MAX as f64;
        checked(d, "workgroups", ok, rules::workgroups).map(|v| Workgroups(v as u64))
    }
}

impl<'de> Deserialize<'de> for Waves {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ok = |v: f64| {
            v.fract() == 0.0 && v >= 1.0 && rules::waves_ok(v.min(f64::from(u32::MAX)) as u32)
        };
        checked(d, "waves_per_wg", ok, rules::waves).map(|v| Waves(v as u32))
    }
}

impl<'de> Deserialize<'de> for WgUs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(d, "wg_us", rules::wg_us_ok, rules::wg_us).map(WgUs)
    }
}

impl<'de> Deserialize<'de> for CuUtil {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(d, "cu_util", rules::cu_util_ok, rules::cu_util).map(CuUtil)
    }
}

impl<'de> Deserialize<'de> for DramBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(d, "dram_bytes", rules::dram_bytes_ok, rules::dram_bytes).map(DramBytes)
    }
}
