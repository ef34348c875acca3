//! Plots of a scenario's runs, as SVG and PNG (`sim --plots DIR`): the HP latency CDF of every
//! configuration ([`cdf`]), the LP job's throughput over time with its preemptions
//! ([`throughput`]), and the trade-off of every configuration and sweep value ([`tradeoff`]). Drawn with plotters; text is measured (both formats) and rasterised
//! (PNG) with a TrueType font read from the system ([`font`]).

pub mod cdf;
pub mod font;
pub mod throughput;
pub mod tradeoff;

use std::path::{Path, PathBuf};

use plotters::backend::DrawingBackend;
use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::{
    BitMapBackend, ChartBuilder, ChartContext, Color, DrawingArea, IntoDrawingArea, SVGBackend,
    SeriesLabelPosition,
};
use plotters::style::{RGBColor, WHITE};

use crate::experiment::Series;
use crate::sweep::Point;

/// Errors while writing plots.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// The font for text could not be read.
    #[error(transparent)]
    Font(#[from] font::FontError),
    /// The directory could not be created.
    #[error("cannot create {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    /// Drawing or writing a file failed.
    #[error("cannot write {0}: {1}")]
    Draw(PathBuf, DrawError),
}

/// What a plotters backend reported while drawing (its error types differ per backend, so the
/// charts keep its description).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DrawError(String);

/// A chart that can be drawn on any plotters backend.
pub trait Chart {
    /// Its size in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws it on `area` (already white).
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), DrawError>;
}

/// Each configuration's colour and whether its line is dashed (level 3 dashed: with one LP
/// queue it costs what level 2 costs, and its curve would hide level 2's). The edge
/// configurations take their level's hue, darker; the hinted ones lighter.
pub fn style_of(control: &str) -> (RGBColor, bool) {
    match control {
        "alone" => (RGBColor(0, 0, 0), false),
        "native" => (RGBColor(213, 62, 79), false),
        "priority" => (RGBColor(230, 130, 20), false),
        "level 1" => (RGBColor(50, 110, 200), false),
        "level 2" => (RGBColor(40, 160, 80), false),
        "level 3" => (RGBColor(140, 70, 170), true),
        "level 1 edge" => (RGBColor(20, 50, 120), false),
        "level 2 edge" => (RGBColor(10, 90, 40), false),
        "level 3 edge" => (RGBColor(80, 20, 110), true),
        "level 1 hinted" => (RGBColor(120, 170, 240), false),
        "level 2 hinted" => (RGBColor(120, 210, 60), false),
        "level 3 hinted" => (RGBColor(200, 130, 220), true),
        _ => (RGBColor(100, 100, 100), false),
    }
}

/// Writes every plot of `series` into `dir` (created if missing), file names starting with
/// `prefix` (the scenario's name), `title` heading each; returns the files written.
pub fn write_all(
    dir: &Path,
    prefix: &str,
    title: &str,
    series: &Series,
) -> Result<Vec<PathBuf>, PlotError> {
    font::ensure()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    let mut out = Vec::new();
    out.extend(render(
        &dir.join(format!("{prefix}-hp-latency-cdf")),
        &cdf::Cdf { title, series },
    )?);
    out.extend(render(
        &dir.join(format!("{prefix}-lp-throughput")),
        &throughput::Throughput { title, series },
    )?);
    Ok(out)
}

/// Writes the trade-off of `points` (every configuration at every sweep value) into `dir` as
/// `<prefix>-tradeoff.svg` and `.png`; returns the files written.
pub fn write_tradeoff(
    dir: &Path,
    prefix: &str,
    title: &str,
    points: &[Point],
) -> Result<Vec<PathBuf>, PlotError> {
    font::ensure()?;
    std::fs::create_dir_all(dir).map_err(|e| PlotError::Dir(dir.to_path_buf(), e))?;
    render(
        &dir.join(format!("{prefix}-tradeoff")),
        &tradeoff::Tradeoff { title, points },
    )
}

/// Draws `chart` into `base.svg` and `base.png`.
fn render(base: &Path, chart: &impl Chart) -> Result<Vec<PathBuf>, PlotError> {
    let size = chart.size();
    let svg = base.with_extension("svg");
    {
        let area = SVGBackend::new(&svg, size).into_drawing_area();
        draw_and_present(&area, chart).map_err(|e| PlotError::Draw(svg.clone(), e))?;
    }
    let png = base.with_extension("png");
    {
        let area = BitMapBackend::new(&png, size).into_drawing_area();
        draw_and_present(&area, chart).map_err(|e| PlotError::Draw(png.clone(), e))?;
    }
    Ok(vec![svg, png])
}

fn draw_and_present<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &impl Chart,
) -> Result<(), DrawError> {
    area.fill(&plotters::style::WHITE).map_err(err)?;
    chart.draw(area)?;
    area.present().map_err(err)
}

/// Ticks at `multiples` of the powers of ten between `lo` and `hi` (logarithmic axes).
pub fn decade_ticks(lo: f64, hi: f64, multiples: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powi(lo.max(1e-6).log10().floor() as i32);
    while decade <= hi {
        for &m in multiples {
            // Round away float noise (0.30000000000000004).
            let x = ((m * decade) * 1e6).round() / 1e6;
            if x >= lo && x <= hi {
                out.push(x);
            }
        }
        decade *= 10.0;
    }
    out
}

/// A chart on `area` with the charts' caption font, margin and axis label areas.
pub(crate) fn framed<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: String,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(caption, (font::FAMILY, 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70);
    b
}

/// Draws a mesh (axes, grid, labels) in the charts' fonts and grid colour.
pub(crate) fn draw_mesh<X, Y, DB>(mesh: &mut MeshStyle<'_, '_, X, Y, DB>) -> Result<(), DrawError>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
    DB: DrawingBackend,
{
    mesh.label_style((font::FAMILY, 15))
        .axis_desc_style((font::FAMILY, 17))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(err)
}

/// The charts' legend, at `position`.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawError> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((font::FAMILY, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(err)
}

/// A backend's drawing error, described.
pub(crate) fn err<E: std::fmt::Debug>(e: E) -> DrawError {
    DrawError(format!("{e:?}"))
}
