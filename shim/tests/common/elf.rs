//! The dynamic symbol tables of the shim and of the HIP runtimes (`readelf --dyn-syms`).
#![allow(dead_code)]

use std::process::Command;

/// (binding, name with its version) of every function `lib` defines in its dynamic symbol table.
pub fn defined_functions(lib: &std::path::Path) -> Vec<(String, String)> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(lib)
        .output()
        .expect("run readelf (binutils)");
    assert!(
        out.status.success(),
        "readelf {}: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            (f.len() >= 8 && f[3] == "FUNC" && f[6] != "UND")
                .then(|| (f[4].to_string(), f[7].to_string()))
        })
        .collect()
}
