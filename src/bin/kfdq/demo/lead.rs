//! The hint's lead in `level2-hinted`: how long before a request's first launch the latency
//! client calls `kfdq_request_begin()` (`--hint-lead-us`, docs/demo.md "The hint's lead").
//!
//! The lead is host time of the request (an inference server parsing, decoding and copying
//! before its first launch), a property of the request like its kernels. The demo runs the
//! request on a stretched time scale (the emulator cannot resolve the field's sub-millisecond
//! kernels), so the default lead is the field's on the same scale: the lab's target lead
//! (issue 51: 500 µs at MI300X speed, `preempt-lab sim --hint-lead-us 500`) times the shape's
//! scale. The control path (the reaction the lead hides) is not scaled: it is what is measured.

use super::super::CliError;
use super::super::args::RequestShape;
use kfdq_trace::EMULATOR_TIME_SCALE;

/// The lead issue 51's target assumes at the field's speed, µs.
const FIELD_LEAD_US: f64 = 500.0;

/// How much slower than the field the synthetic request runs: 8 ms alone here, the field's
/// ResNet-18 service 2.65 ms P99 alone (docs/field-reports.md), so about 3x.
const SYNTHETIC_SCALE: f64 = 3.0;

/// The shape's time scale against the field.
fn scale(shape: RequestShape) -> f64 {
    match shape {
        RequestShape::Synthetic => SYNTHETIC_SCALE,
        RequestShape::Resnet18 => EMULATOR_TIME_SCALE,
    }
}

/// The lead for `shape`, µs: `given` (checked), else the field's lead on the shape's scale.
pub fn lead_us(shape: RequestShape, given: Option<u32>) -> Result<u32, CliError> {
    let bound = kfdq::proto::DEFAULT_HINT_TIMEOUT.as_micros();
    match given {
        Some(us) if u128::from(us) >= bound => Err(CliError::Usage(format!(
            "--hint-lead-us {us}: at most {} µs: a hint not followed by GPU work within the class's hint_timeout_ms ({} ms, the demo agent's default) expires before the request's first launch (docs/shim.md, \"Request hints\")",
            bound - 1,
            bound / 1000
        ))),
        Some(us) => Ok(us),
        None => Ok((FIELD_LEAD_US * scale(shape)).round() as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lead_is_the_fields_on_the_shapes_scale() {
        assert_eq!(lead_us(RequestShape::Resnet18, None).unwrap(), 5000);
        assert_eq!(lead_us(RequestShape::Synthetic, None).unwrap(), 1500);
        assert_eq!(lead_us(RequestShape::Resnet18, Some(0)).unwrap(), 0);
        assert_eq!(lead_us(RequestShape::Synthetic, Some(2500)).unwrap(), 2500);
    }

    #[test]
    fn a_lead_past_the_hint_bound_is_refused_with_the_rule() {
        let e = lead_us(RequestShape::Resnet18, Some(50_000)).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("--hint-lead-us 50000") && m.contains("hint_timeout_ms"),
            "{m}"
        );
        assert!(lead_us(RequestShape::Resnet18, Some(49_999)).is_ok());
    }
}
