//! Pull and import progress: bars on a terminal, plain lines otherwise,
//! nothing with `--quiet`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

use berth_image::pipeline::{LayerDesc, Progress};
use berth_image::store::StoredImage;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

enum Mode {
    Quiet,
    Lines,
    Bars(MultiProgress),
}

/// Reports progress of one pull or import on stderr.
pub struct Reporter {
    mode: Mode,
    what: String,
    start: Instant,
    bars: Mutex<Vec<Option<ProgressBar>>>,
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

impl Reporter {
    /// A reporter for `what` (a reference or source).
    pub fn new(quiet: bool, what: &str) -> Self {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bars(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
        } else {
            Mode::Lines
        };
        if !quiet {
            eprintln!("Fetching {what}");
        }
        Self {
            mode,
            what: what.to_string(),
            start: Instant::now(),
            bars: Mutex::new(Vec::new()),
        }
    }

    /// Reports the end.
    pub fn done(&self, image: &StoredImage) {
        if matches!(self.mode, Mode::Quiet) {
            return;
        }
        eprintln!(
            "Stored {} as {} ({} bytes squashfs) in {:.1}s",
            self.what,
            short(&image.record.id),
            image.record.squashfs.size,
            self.start.elapsed().as_secs_f64()
        );
    }
}

impl Progress for Reporter {
    fn cached(&self, id: &str) {
        if !matches!(self.mode, Mode::Quiet) {
            eprintln!("Image {} is already in the store", short(id));
        }
    }

    fn waiting(&self, id: &str) {
        if !matches!(self.mode, Mode::Quiet) {
            eprintln!(
                "Image {} was converted by another process meanwhile",
                short(id)
            );
        }
    }

    fn layer_start(&self, index: usize, count: usize, layer: &LayerDesc) {
        match &self.mode {
            Mode::Quiet => {}
            Mode::Lines => eprintln!(
                "Layer {}/{} {} ({} bytes)",
                index + 1,
                count,
                short(&layer.digest),
                layer.size
            ),
            Mode::Bars(multi) => {
                let bar = multi.add(ProgressBar::new(layer.size));
                let style = ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
                bar.set_style(style);
                bar.set_prefix(format!(
                    "layer {}/{} {}",
                    index + 1,
                    count,
                    short(&layer.digest)
                ));
                if let Ok(mut bars) = self.bars.lock() {
                    if bars.len() <= index {
                        bars.resize(index + 1, None);
                    }
                    bars[index] = Some(bar);
                }
            }
        }
    }

    fn layer_bytes(&self, index: usize, bytes: u64) {
        if let Mode::Bars(_) = self.mode {
            if let Ok(bars) = self.bars.lock() {
                if let Some(Some(bar)) = bars.get(index) {
                    bar.set_position(bytes);
                }
            }
        }
    }

    fn layer_done(&self, index: usize) {
        if let Mode::Bars(_) = self.mode {
            if let Ok(bars) = self.bars.lock() {
                if let Some(Some(bar)) = bars.get(index) {
                    bar.finish_with_message("done");
                }
            }
        }
    }

    fn finishing(&self) {
        if let Mode::Lines = self.mode {
            eprintln!("Writing squashfs");
        }
    }

    fn layers_cached(&self, cached: usize, count: usize) {
        if cached > 0 && !matches!(self.mode, Mode::Quiet) {
            eprintln!("{cached} of {count} layers were in the layer cache");
        }
    }
}
