//! The HP job's request latency as a cumulative distribution, one curve per configuration and
//! one for the job alone, on a logarithmic latency axis (native sharing is an order of
//! magnitude slower than the rest, which differ by percent). A dotted line marks P99.

use plotters::backend::DrawingBackend;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Chart, DrawError, decade_ticks, draw_mesh, err, framed, legend, style_of};
use crate::experiment::Series;

/// The chart of a scenario's series.
#[derive(Debug)]
pub struct Cdf<'a> {
    /// The scenario, as the title's first line.
    pub title: &'a str,
    /// The data.
    pub series: &'a Series,
}

/// The points of the empirical CDF of `v` (latencies in µs) as (ms, fraction at or below).
pub fn points(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    s.iter()
        .enumerate()
        .map(|(i, &x)| (x / 1e3, (i + 1) as f64 / n))
        .collect()
}

/// Axis ticks at 1, 2, 3 and 5 times the powers of ten between `lo` and `hi` (ms).
pub fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    decade_ticks(lo, hi, &[1.0, 2.0, 3.0, 5.0])
}

impl Chart for Cdf<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 680)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), DrawError> {
        let mut curves = vec![("alone".to_string(), points(&self.series.hp_alone_us))];
        for c in &self.series.configs {
            curves.push((c.control.clone(), points(&c.hp_latency_us)));
        }
        let all = curves.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        let (lo, hi) = if lo.is_finite() && hi > 0.0 {
            (lo * 0.9, hi * 1.15)
        } else {
            (0.1, 10.0)
        };
        let mut chart = framed(
            area,
            format!(
                "{}: HP request latency CDF per configuration (all seeds)",
                self.title
            ),
        )
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(ticks(lo, hi)),
            0.0..1.0,
        )
        .map_err(err)?;
        draw_mesh(
            chart
                .configure_mesh()
                .x_desc("HP request latency, arrival to last kernel's end (ms, log scale)")
                .y_desc("fraction of requests at or below")
                .x_label_formatter(&|x| {
                    if *x < 10.0 {
                        format!("{x}")
                    } else {
                        format!("{x:.0}")
                    }
                })
                .y_label_formatter(&|y| format!("{y:.2}")),
        )?;
        chart
            .draw_series(DashedLineSeries::new(
                [(lo, 0.99), (hi, 0.99)],
                4,
                4,
                RGBColor(120, 120, 120).stroke_width(1),
            ))
            .map_err(err)?
            .label("P99")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 24, y)], RGBColor(120, 120, 120)));
        for (name, pts) in &curves {
            let (color, dashed) = style_of(name);
            let width = if name == "alone" { 3 } else { 2 };
            // A CDF is a step function: each point holds until the next sample.
            let mut steps = Vec::with_capacity(pts.len() * 2);
            let mut prev = 0.0;
            for &(x, y) in pts {
                steps.push((x, prev));
                steps.push((x, y));
                prev = y;
            }
            let style = color.stroke_width(width);
            let anno = if dashed {
                chart
                    .draw_series(DashedLineSeries::new(steps, 8, 5, style))
                    .map_err(err)?
            } else {
                chart
                    .draw_series(LineSeries::new(steps, style))
                    .map_err(err)?
            };
            anno.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 24, y)], color.stroke_width(3))
            });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_are_sorted_and_end_at_one() {
        let p = points(&[3000.0, 1000.0, 2000.0, 4000.0]);
        assert_eq!(p, vec![(1.0, 0.25), (2.0, 0.5), (3.0, 0.75), (4.0, 1.0)]);
        assert_eq!(ticks(2.1, 35.0), vec![3.0, 5.0, 10.0, 20.0, 30.0]);
        assert_eq!(ticks(0.15, 1.0), vec![0.2, 0.3, 0.5, 1.0]);
    }
}
