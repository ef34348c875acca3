//! The LP job's throughput over simulated time, one panel per configuration, for the
//! representative seed: kernels completed per second in [`BINS`] bins over the run, the job's
//! throughput alone as a dashed line, and the intervals during which kfdq held or preempted it
//! shaded, with a tick at each preempt.

use plotters::backend::DrawingBackend;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::font::FAMILY;
use super::{Chart, DrawError, err, style_of};
use crate::experiment::Series;

/// Bins per run (at most; [`bin_ns`] rounds the bin up to 1, 2 or 5 x 10^k ms): 25 keeps the
/// field's batch job (about 30 kernels/s alone, 20 at levels 2-3, over 10 s) at 8 or more
/// kernels a bin, so that a bin's rate is not one kernel more or less, and still shows the
/// seconds in which requests bunched.
pub const BINS: u64 = 25;

const PANEL_HEIGHT: u32 = 190;
const TITLE_HEIGHT: u32 = 64;

/// The bin for a run of `end_ns`: `end_ns / BINS` rounded up to 1, 2 or 5 x 10^k ms.
pub fn bin_ns(end_ns: u64) -> u64 {
    let raw = end_ns.div_ceil(BINS).max(1);
    let mut decade = 1_000_000u64;
    while decade / 10 >= raw {
        decade /= 10;
    }
    loop {
        for m in [1, 2, 5] {
            if m * decade >= raw {
                return m * decade;
            }
        }
        decade *= 10;
    }
}

/// The chart of a scenario's series.
#[derive(Debug)]
pub struct Throughput<'a> {
    /// The scenario, as the title's first line.
    pub title: &'a str,
    /// The data.
    pub series: &'a Series,
}

impl Chart for Throughput<'_> {
    fn size(&self) -> (u32, u32) {
        let n = self.series.configs.len().max(1) as u32;
        (1100, TITLE_HEIGHT + n * PANEL_HEIGHT)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), DrawError> {
        let s = self.series;
        let (head, area) = area.split_vertically(TITLE_HEIGHT);
        let bin_ns = bin_ns(
            s.configs
                .iter()
                .map(|c| c.timeline.end_ns)
                .max()
                .unwrap_or(1),
        );
        head.draw_text(
            &format!(
                "{}: LP throughput over simulated time, seed {}",
                self.title, s.seed
            ),
            &(FAMILY, 22).into_text_style(&head),
            (300, 8),
        )
        .map_err(err)?;
        head.draw_text(
            &format!(
                "solid: LP kernels completed per second in {} ms bins; dashed: LP alone; shaded: LP held (level 1) or preempted (levels 2-3), a tick at each start",
                bin_ns / 1_000_000
            ),
            &(FAMILY, 15).into_text_style(&head),
            (40, 38),
        )
        .map_err(err)?;
        let end_ns = s
            .configs
            .iter()
            .map(|c| c.timeline.end_ns)
            .max()
            .unwrap_or(1)
            .max(1);
        let rates: Vec<Vec<(f64, f64)>> = s
            .configs
            .iter()
            .map(|c| c.timeline.lp_rate(bin_ns))
            .collect();
        let top = rates
            .iter()
            .flatten()
            .map(|r| r.1)
            .fold(s.lp_alone_per_s, f64::max)
            * 1.2;
        let top = if top > 0.0 { top } else { 1.0 };
        let end_s = end_ns as f64 / 1e9;
        let panels = area.split_evenly((s.configs.len().max(1), 1));
        for ((panel, c), rate) in panels.iter().zip(&s.configs).zip(&rates) {
            let (color, _) = style_of(&c.control);
            let tl = &c.timeline;
            let preempts = tl.marks.iter().filter(|m| m.preempted).count();
            let what = if tl.marks.is_empty() {
                "not held or preempted".to_string()
            } else if tl.marks.iter().all(|m| m.level == 1) {
                format!("{preempts} holds")
            } else {
                format!("{preempts} preempts")
            };
            let kernels = tl.lp_done_ns.len() as f64;
            let mean = if tl.end_ns > 0 {
                kernels / (tl.end_ns as f64 / 1e9)
            } else {
                0.0
            };
            let rel = if s.lp_alone_per_s > 0.0 {
                format!(" ({:.2}x alone)", mean / s.lp_alone_per_s)
            } else {
                String::new()
            };
            let mut chart = ChartBuilder::on(panel)
                .caption(
                    format!("{}: {mean:.1} LP kernels/s{rel}, {what}", c.control),
                    (FAMILY, 16),
                )
                .margin_left(16)
                .margin_right(24)
                .margin_top(4)
                .margin_bottom(4)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..end_s, 0.0..top)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("simulated time (s)")
                .y_desc("LP kernels/s")
                .x_label_formatter(&|x| format!("{x:.1}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .y_labels(4)
                .label_style((FAMILY, 13))
                .axis_desc_style((FAMILY, 14))
                .light_line_style(RGBColor(238, 238, 238))
                .draw()
                .map_err(err)?;
            let shade = color.mix(0.22).filled();
            chart
                .draw_series(tl.preempted_spans().into_iter().map(|(a, b)| {
                    Rectangle::new(
                        [
                            (a as f64 / 1e9, 0.0),
                            ((b as f64 / 1e9).max(a as f64 / 1e9), top),
                        ],
                        shade,
                    )
                }))
                .map_err(err)?;
            chart
                .draw_series(tl.marks.iter().filter(|m| m.preempted).map(|m| {
                    let x = m.at_ns as f64 / 1e9;
                    PathElement::new([(x, top * 0.92), (x, top)], color.stroke_width(1))
                }))
                .map_err(err)?;
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, s.lp_alone_per_s), (end_s, s.lp_alone_per_s)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?;
            let mut steps = Vec::with_capacity(rate.len() * 2);
            for &(t, r) in rate {
                steps.push((t, r));
                steps.push(((t + bin_ns as f64 / 1e9).min(end_s), r));
            }
            chart
                .draw_series(LineSeries::new(steps, color.stroke_width(2)))
                .map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_round() {
        // 10 s / 25 = 400 ms -> 500 ms; 9.75 s -> 390 ms -> 500 ms; 1 s -> 40 ms -> 50 ms.
        assert_eq!(bin_ns(10_000_000_000), 500_000_000);
        assert_eq!(bin_ns(9_750_000_000), 500_000_000);
        assert_eq!(bin_ns(1_000_000_000), 50_000_000);
        assert_eq!(bin_ns(2_500_000), 100_000);
    }
}
