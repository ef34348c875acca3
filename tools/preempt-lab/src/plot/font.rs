//! The font of the plots' text. plotters measures text for its layout (SVG and PNG) and
//! rasterises it for PNG from a TrueType file; preempt-lab reads DejaVu Sans from the path
//! Debian's `fonts-dejavu-core` installs it at (scripts/setup.sh installs that package), or
//! from `PREEMPT_LAB_FONT`. No font is bundled.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use plotters::style::{FontStyle, register_font};

use super::PlotError;

/// Where Debian's `fonts-dejavu-core` puts DejaVu Sans.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The environment variable naming another TrueType file.
pub const FONT_ENV: &str = "PREEMPT_LAB_FONT";

/// The family name the charts ask for.
pub const FAMILY: &str = "sans-serif";

static LOADED: OnceLock<Result<(), FontError>> = OnceLock::new();

/// Why the plots' font could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FontError {
    /// The file could not be read.
    #[error(
        "plots need a TrueType font for their text: cannot read {} ({source}); install Debian's \
         fonts-dejavu-core (scripts/setup.sh does), or name another .ttf file in {FONT_ENV}",
        path.display()
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: Arc<std::io::Error>,
    },
    /// plotters could not read it as a font.
    #[error("{} is not a TrueType font plotters can read", .0.display())]
    NotTrueType(PathBuf),
}

/// The font file to use.
pub fn path() -> PathBuf {
    std::env::var_os(FONT_ENV).map_or_else(|| PathBuf::from(DEFAULT_FONT), PathBuf::from)
}

/// Reads and registers the font once per process.
pub fn ensure() -> Result<(), PlotError> {
    LOADED
        .get_or_init(|| {
            let p = path();
            let bytes = std::fs::read(&p).map_err(|e| FontError::Unreadable {
                path: p.clone(),
                source: Arc::new(e),
            })?;
            // plotters keeps fonts for the process's life; this runs once.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            register_font(FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| FontError::NotTrueType(p.clone()))
        })
        .clone()
        .map_err(PlotError::Font)
}
