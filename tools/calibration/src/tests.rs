//! The format's round trip, the first format's reading, and every refusal with its line.

use super::*;

fn sample() -> Calibration {
    Calibration {
        format: FORMAT,
        partitions: vec![partition(90402, 150_000)],
    }
}

fn partition(gfx_target_version: u32, fixed_ns: u64) -> PartitionCalibration {
    PartitionCalibration {
        node: NodeIdentity {
            gpu_name: "AMD Instinct MI308X".into(),
            gpu_id: 0xb1a0,
            gfx_target: "gfx942".into(),
            gfx_target_version,
            cus: 80,
            wave_slots: 2560,
            kernel: "7.0.0".into(),
            mec_firmware: 151,
            sdma_firmware: 19,
            kfd_version: "1.17".into(),
            measured_with: "kfdq 0.1.0 bench".into(),
        },
        model: Measured {
            preempt_fixed_ns: fixed_ns,
            save_wave_ns: 300,
            restore_wave_ns: 500,
            arbitration: MeasuredArbitration::Strict,
            preempt_round_trip_ns: round_trip_ns(fixed_ns, 300, 500, 2560),
            preempt_fixed_error_ns: 10,
            per_wave_error_ns: 1,
        },
    }
}

#[test]
fn a_written_file_reads_back() {
    // Setting the model's parameters from it: gfx-model's `Params::calibrated` tests.
    let text = sample().to_toml();
    let c = Calibration::parse(&text).unwrap();
    assert_eq!(c, sample());
    c.check_target(&text, 90402).unwrap();
}

#[test]
fn another_gpu_kind_is_refused_with_the_line_of_its_target() {
    let text = sample().to_toml();
    let c = Calibration::parse(&text).unwrap();
    let e = c.check_target(&text, 90010).unwrap_err();
    let line = text
        .lines()
        .position(|l| l.starts_with("gfx_target_version"))
        .unwrap()
        + 1;
    assert!(
        matches!(e, CalibrationError::OtherGpu { line: l, file: 90402, here: 90010, .. } if l == line),
        "{e}"
    );
    assert!(e.to_string().contains("gfx942"), "{e}");
}

#[test]
fn a_round_trip_other_than_the_fits_is_named_with_its_line() {
    let text = sample().to_toml();
    let parsed = Calibration::parse(&text).unwrap();
    assert_eq!(parsed.first().round_trip_disagreement(&text, 0), None);
    let fit = parsed.first().model.preempt_round_trip_ns;
    let edited = text.replace(
        &format!("preempt_round_trip_ns = {fit}"),
        "preempt_round_trip_ns = 5000",
    );
    let parsed = Calibration::parse(&edited).unwrap();
    let w = parsed.first().round_trip_disagreement(&edited, 0).unwrap();
    let line = edited
        .lines()
        .position(|l| l.starts_with("preempt_round_trip_ns"))
        .unwrap()
        + 1;
    assert!(w.starts_with(&format!("line {line}: ")), "{w}");
    assert!(
        w.contains("5000") && w.contains(&format!("= {fit} ns")),
        "{w}"
    );
}

#[test]
fn malformed_files_name_their_line_and_reason() {
    let text = sample().to_toml();
    let bad = text.replace("save_wave_ns = 300", "save_wave_ns = \"fast\"");
    let line = bad.lines().position(|l| l.contains("\"fast\"")).unwrap() + 1;
    match Calibration::parse(&bad).unwrap_err() {
        CalibrationError::Malformed { line: l, reason } => {
            assert_eq!(l, line);
            assert!(reason.contains("u64"), "{reason}");
        }
        e => panic!("{e}"),
    }
    let unknown = text.replace("save_wave_ns = 300", "save_wave_ns = 300\nspeed = 1");
    let e = Calibration::parse(&unknown).unwrap_err();
    assert!(e.to_string().contains("speed"), "{e}");
    let huge = text.replace("restore_wave_ns = 500", "restore_wave_ns = 5000000000");
    match Calibration::parse(&huge).unwrap_err() {
        CalibrationError::Value { key, line, .. } => {
            assert_eq!(key, "restore_wave_ns");
            assert_eq!(
                line,
                huge.lines()
                    .position(|l| l.starts_with("restore_wave_ns"))
                    .unwrap()
                    + 1
            );
        }
        e => panic!("{e}"),
    }
    let arb = text.replace("arbitration = \"strict\"", "arbitration = \"fifo\"");
    assert!(Calibration::parse(&arb).is_err());
}

#[test]
fn every_partition_is_written_and_read_back_in_order() {
    let two = Calibration {
        format: FORMAT,
        partitions: vec![partition(90402, 150_000), partition(90402, 400_000)],
    };
    let text = two.to_toml();
    assert_eq!(
        text.lines().filter(|l| *l == "[[partition]]").count(),
        2,
        "{text}"
    );
    let c = Calibration::parse(&text).unwrap();
    assert_eq!(c, two);
    // Paired partition by partition with a GPU of two; a one-partition file with each.
    let paired = c.pair(&text, &[90402, 90402]).unwrap();
    assert_eq!(paired[1].model.preempt_fixed_ns, 400_000);
    match c.pair(&text, &[90402]).unwrap_err() {
        CalibrationError::Partitions { file: 2, here: 1 } => {}
        e => panic!("{e}"),
    }
    let one = sample().to_toml();
    let c1 = Calibration::parse(&one).unwrap();
    assert_eq!(c1.pair(&one, &[90402, 90402, 90402]).unwrap().len(), 3);
    // The second partition's target is refused with its own line.
    let mixed = Calibration {
        format: FORMAT,
        partitions: vec![partition(90402, 150_000), partition(90010, 150_000)],
    };
    let text = mixed.to_toml();
    let line = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("gfx_target_version"))
        .nth(1)
        .unwrap()
        .0
        + 1;
    match mixed.check_target(&text, 90402).unwrap_err() {
        CalibrationError::OtherGpu {
            line: l,
            file: 90010,
            ..
        } => assert_eq!(l, line),
        e => panic!("{e}"),
    }
    // A value out of range in the second partition names its line.
    let huge = two
        .to_toml()
        .replace("preempt_fixed_ns = 400000", "preempt_fixed_ns = 4000000000");
    match Calibration::parse(&huge).unwrap_err() {
        CalibrationError::Value { key, line, .. } => {
            assert_eq!(key, "preempt_fixed_ns");
            assert!(huge.lines().nth(line - 1).unwrap().contains("4000000000"));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn a_file_of_the_first_format_is_still_read_as_one_partition() {
    let p = partition(90402, 150_000);
    #[derive(Serialize)]
    struct One<'a> {
        format: u32,
        node: &'a NodeIdentity,
        model: &'a Measured,
    }
    let text = toml::to_string(&One {
        format: FORMAT_ONE_PARTITION,
        node: &p.node,
        model: &p.model,
    })
    .unwrap();
    let c = Calibration::parse(&text).unwrap();
    assert_eq!(c.format, FORMAT_ONE_PARTITION);
    assert_eq!(c.partitions, vec![p]);
    // An unknown format and an empty list are refused with their rule.
    let e = Calibration::parse(&text.replace("format = 1", "format = 3")).unwrap_err();
    assert!(e.to_string().contains("formats 1"), "{e}");
    let e = Calibration::parse("format = 2\npartition = []\n").unwrap_err();
    assert!(e.to_string().contains("no [[partition]]"), "{e}");
}
