//! Renders the man pages (clap_mangen) and the bash, zsh and fish completions (clap_complete) of
//! `kfdq` and `kfdqd` from the same clap definitions the binaries parse with, so they cannot
//! drift from `--help`.
//!
//! Output, in the install layout that scripts/package.sh copies into the Debian package:
//!
//! ```text
//! target/<profile>/assets/man/kfdq.1, kfdq-<command>.1 ..., kfdqd.8
//! target/<profile>/assets/completions/bash/kfdq, zsh/_kfdq, fish/kfdq.fish (and kfdqd)
//! ```
//!
//! The same tree is in `$OUT_DIR/assets` (tests of this package find it there).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;

#[allow(dead_code)]
mod kfdq_cli {
    include!("src/bin/kfdq/args.rs");
}

#[allow(dead_code)]
mod kfdqd_cli {
    include!("src/bin/kfdqd/args.rs");
}

fn main() -> io::Result<()> {
    skip_privileged_cfg();
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/bin/kfdq/args.rs");
    println!("cargo::rerun-if-changed=src/bin/kfdqd/args.rs");

    let out = PathBuf::from(
        std::env::var_os("OUT_DIR")
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "cargo did not set OUT_DIR"))?,
    );
    let assets = out.join("assets");
    render(&assets)?;

    // OUT_DIR is <target>/<profile>/build/kfdq-<hash>/out: publish next to the binaries too.
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let published = profile_dir.join("assets");
        if published.exists() {
            fs::remove_dir_all(&published)?;
        }
        render(&published)?;
    }
    Ok(())
}

fn render(assets: &Path) -> io::Result<()> {
    let man = assets.join("man");
    fs::create_dir_all(&man)?;
    let mut kfdq = kfdq_cli::Cli::command();
    // Built, the subcommands carry the global options (--root, --json, --agent) too.
    kfdq.build();
    let kfdqd = kfdqd_cli::Args::command();

    write_man(&man, kfdq.clone(), "1")?;
    for sub in kfdq.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("kfdq-{}", sub.get_name());
        write_man(&man, sub.clone().name(name), "1")?;
    }
    write_man(&man, kfdqd.clone(), "8")?;

    for (shell, dir) in [
        (Shell::Bash, "bash"),
        (Shell::Zsh, "zsh"),
        (Shell::Fish, "fish"),
    ] {
        let dir = assets.join("completions").join(dir);
        fs::create_dir_all(&dir)?;
        for cmd in [kfdq.clone(), kfdqd.clone()] {
            let name = cmd.get_name().to_string();
            let file = match shell {
                Shell::Zsh => format!("_{name}"),
                Shell::Fish => format!("{name}.fish"),
                _ => name.clone(),
            };
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd.clone(), name, &mut text);
            fs::write(dir.join(file), text)?;
        }
    }
    Ok(())
}

fn write_man(dir: &Path, mut cmd: clap::Command, section: &str) -> io::Result<()> {
    let file = dir.join(format!("{}.{section}", cmd.get_name()));
    // The NAME line is "NAME - ABOUT": an about that starts with the name ("kfdq — ...") would
    // say it twice.
    for name in ["kfdq", "kfdqd"] {
        let prefix = format!("{name} — ");
        if let Some(rest) = cmd
            .get_about()
            .map(|a| a.to_string())
            .and_then(|a| a.strip_prefix(&prefix).map(str::to_owned))
        {
            cmd = cmd.about(rest);
        }
    }
    let mut text = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .manual("kfdq")
        .source(format!("kfdq {}", env!("CARGO_PKG_VERSION")))
        .render(&mut text)?;
    let text = String::from_utf8(text).map_err(io::Error::other)?;
    fs::write(file, synopsis_with_values(&cmd, &text))
}

/// clap_mangen's SYNOPSIS names every option without its value (`[--level]`), which reads as
/// a flag; this adds the value the option takes (`[--level LEVEL]`), as `--help` shows it.
fn synopsis_with_values(cmd: &clap::Command, page: &str) -> String {
    let mut lines: Vec<String> = page.lines().map(str::to_owned).collect();
    let Some(at) = lines.iter().position(|l| l == ".SH SYNOPSIS") else {
        return page.to_owned();
    };
    let Some(line) = lines.get_mut(at + 1) else {
        return page.to_owned();
    };
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let (Some(long), true) = (arg.get_long(), arg.get_action().takes_values()) else {
            continue;
        };
        let value = arg
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        let escaped = long.replace('-', "\\-");
        let value = value.replace('-', "\\-");
        // `]` closes an optional option, `>` a required one.
        for close in [']', '>'] {
            let bare = format!("\\fB\\-\\-{escaped}\\fR{close}");
            let with = format!("\\fB\\-\\-{escaped}\\fR \\fI{value}\\fR{close}");
            *line = line.replace(&bare, &with);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

include!("tools/test-support/skip_privileged_cfg.rs");
