//! `--kernel-times`: a `[work_group_time_by_arg]` entry the emulator cannot read is refused
//! before anything is mounted, with the rule.

use std::process::Command;

fn serve_with(times: &str) -> (bool, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("times.toml");
    std::fs::write(&file, times).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .arg("--kernel-times")
        .arg(&file)
        .output()
        .expect("run kfd-emu");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    )
}

#[test]
fn an_argument_model_of_a_bad_size_or_field_is_refused_before_mounting() {
    let (ok, err, dir) = serve_with(
        "[work_group_time_by_arg]\nkfdq_spin = { offset = 0, size = 9, ps_per_unit = 1 }\n",
    );
    assert!(!ok && err.contains("size must be 1 to 8 bytes"), "{err}");
    assert!(!dir.path().join("mnt/dev/kfd").exists(), "nothing mounted");
    let (ok, err, _dir) =
        serve_with("[work_group_time_by_arg]\nkfdq_spin = { offset = 0, ns = 30 }\n");
    assert!(!ok && err.contains("work_group_time_by_arg"), "{err}");
}
