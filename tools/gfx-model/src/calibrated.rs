//! A node's calibration (the `kfdq-calibration` file, written by `kfdq bench --write`) in the
//! model's vocabulary: its measured costs and arbitration set the [`Params`].

use kfdq_calibration::{Measured, MeasuredArbitration};

use crate::{Arbitration, Params};

/// The model's arbitration for what a node showed, if it matched one.
pub fn measured_arbitration(m: MeasuredArbitration) -> Option<Arbitration> {
    match m {
        MeasuredArbitration::Equal => Some(Arbitration::Equal),
        MeasuredArbitration::Pipe => Some(Arbitration::PipePriority),
        MeasuredArbitration::Strict => Some(Arbitration::StrictPriority),
        MeasuredArbitration::None => None,
    }
}

impl Params {
    /// These parameters with a partition's measured values (the arbitration only when the node
    /// matched one).
    pub fn calibrated(self, m: &Measured) -> Params {
        Params {
            preempt_fixed_ns: m.preempt_fixed_ns,
            save_wave_ns: m.save_wave_ns,
            restore_wave_ns: m.restore_wave_ns,
            arbitration: measured_arbitration(m.arbitration).unwrap_or(self.arbitration),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_sets_the_parameters() {
        let text = "format = 2\n\n[[partition]]\n\n[partition.node]\ngpu_name = \"AMD Instinct MI308X\"\n\
                    gpu_id = 45472\ngfx_target = \"gfx942\"\ngfx_target_version = 90402\ncus = 80\n\
                    wave_slots = 2560\nkernel = \"7.0.0\"\nmec_firmware = 151\nsdma_firmware = 19\n\
                    kfd_version = \"1.17\"\nmeasured_with = \"kfdq 0.1.0 bench\"\n\n[partition.model]\n\
                    preempt_fixed_ns = 150000\nsave_wave_ns = 300\nrestore_wave_ns = 500\n\
                    arbitration = \"strict\"\npreempt_round_trip_ns = 2348000\n\
                    preempt_fixed_error_ns = 10\nper_wave_error_ns = 1\n";
        let c = kfdq_calibration::Calibration::parse(text).unwrap();
        let p = Params::default().calibrated(&c.first().model);
        assert_eq!(p.preempt_fixed_ns, 150_000);
        assert_eq!((p.save_wave_ns, p.restore_wave_ns), (300, 500));
        assert_eq!(p.arbitration, Arbitration::StrictPriority);
        assert_eq!(p.default_wg_ns, Params::default().default_wg_ns);
        // A node that matched no hypothesis keeps the model's arbitration.
        let none =
            kfdq_calibration::Calibration::parse(&text.replace("\"strict\"", "\"none\"")).unwrap();
        let p = Params::default().calibrated(&none.first().model);
        assert_eq!(p.arbitration, Params::default().arbitration);
    }
}
