//! The trade-off of a scenario or a sweep: the HP job's P99 relative to alone against the share
//! of its throughput the LP job keeps, one point per configuration and sweep value (labelled
//! with the value), with the LP limit of each value (`1 - HP busy fraction`) as a dotted line.
//! Down and right is better: alone at 1.0x with all of the limit.

use plotters::backend::DrawingBackend;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::FAMILY;
use super::{Chart, DrawError, decade_ticks, draw_mesh, err, framed, legend, style_of};
use crate::sweep::Point;

/// The chart of a run's points (one without a sweep has one point, its value empty).
#[derive(Debug)]
pub struct Tradeoff<'a> {
    /// The scenario (and sweep), as the title's first line.
    pub title: &'a str,
    /// The reports, one per sweep value.
    pub points: &'a [Point],
}

/// One marker: (configuration, sweep value, LP kept, HP P99 x).
pub type Marker = (String, String, f64, f64);

impl Tradeoff<'_> {
    /// The markers, in the reports' order.
    pub fn markers(&self) -> Vec<Marker> {
        self.points
            .iter()
            .flat_map(|p| {
                p.report
                    .rows
                    .iter()
                    .map(|r| (r.control.clone(), p.value.clone(), r.lp_rel, r.hp_p99_rel))
            })
            .collect()
    }

    /// Each sweep value's LP limit, where measured.
    pub fn limits(&self) -> Vec<(String, f64)> {
        self.points
            .iter()
            .filter_map(|p| p.report.alone.lp_limit().map(|l| (p.value.clone(), l)))
            .collect()
    }
}

/// Ratio ticks between `lo` and `hi`: over less than a factor of 3, 1, 1.02, 1.05, 1.1, 1.2,
/// 1.5 and 2 times the powers of ten (ratios near alone differ by percent); over more, 1, 2, 3
/// and 5 times them (native's are multiples).
pub fn ratio_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let fine: &[f64] = if hi < 3.0 * lo {
        &[1.0, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0]
    } else {
        &[1.0, 2.0, 3.0, 5.0]
    };
    decade_ticks(lo, hi, fine)
}

impl Chart for Tradeoff<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 720)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), DrawError> {
        let markers = self.markers();
        let limits = self.limits();
        let xs = markers
            .iter()
            .map(|m| m.2)
            .chain(limits.iter().map(|l| l.1));
        let (x_lo, x_hi) = xs.fold((1.0f64, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        let x_lo = (x_lo - 0.05).max(0.0);
        let x_hi = (x_hi + 0.05).max(x_lo + 0.1);
        let y_hi = markers.iter().map(|m| m.3).fold(1.1f64, f64::max);
        // Native sharing is many times alone: a log axis keeps the rest (percent apart) apart.
        let y_lo = markers
            .iter()
            .map(|m| m.3)
            .filter(|y| *y > 0.0)
            .fold(1.0f64, f64::min)
            * 0.98;
        let y_hi = y_hi * 1.05;
        let mut chart = framed(
            area,
            format!(
                "{}: HP P99 x alone against LP kept, per configuration",
                self.title
            ),
        )
        .build_cartesian_2d(
            x_lo..x_hi,
            (y_lo..y_hi)
                .log_scale()
                .with_key_points(ratio_ticks(y_lo, y_hi)),
        )
        .map_err(err)?;
        draw_mesh(
            chart
                .configure_mesh()
                .x_desc("LP throughput kept (x alone; dotted: its limit, 1 - HP busy fraction)")
                .y_desc("HP P99 (x alone, log scale)")
                .x_label_formatter(&|x| format!("{x:.2}"))
                .y_label_formatter(&|y| format!("{y:.2}")),
        )?;
        for (value, l) in &limits {
            chart
                .draw_series(DashedLineSeries::new(
                    [(*l, y_lo), (*l, y_hi)],
                    2,
                    4,
                    RGBColor(120, 120, 120).stroke_width(1),
                ))
                .map_err(err)?;
            if !value.is_empty() {
                chart
                    .draw_series(std::iter::once(Text::new(
                        value.clone(),
                        (*l, y_hi / 1.02),
                        (FAMILY, 13).into_font().color(&RGBColor(90, 90, 90)),
                    )))
                    .map_err(err)?;
            }
        }
        let mut seen: Vec<String> = Vec::new();
        for (control, value, x, y) in &markers {
            let (color, dashed) = style_of(control);
            let style = if dashed {
                color.stroke_width(2)
            } else {
                color.filled()
            };
            let font = (FAMILY, 13).into_font().color(&color);
            let anno = chart
                .draw_series(std::iter::once(
                    EmptyElement::at((*x, *y))
                        + Circle::new((0, 0), 6, style)
                        + Text::new(value.clone(), (9, -16), font),
                ))
                .map_err(err)?;
            if !seen.contains(control) {
                seen.push(control.clone());
                anno.label(control.as_str())
                    .legend(move |(x, y)| Circle::new((x + 12, y), 6, style));
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_ticks_cover_percent_and_multiples() {
        assert_eq!(ratio_ticks(0.98, 1.3), vec![1.0, 1.02, 1.05, 1.1, 1.2]);
        assert_eq!(ratio_ticks(0.9, 7.0), vec![1.0, 2.0, 3.0, 5.0]);
    }
}
